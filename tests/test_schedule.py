"""Schedule (the contract, section 4): construction, JSON round trip, validation, epoch scaling; shipped-schedule lookup."""

from __future__ import annotations

import copy
import json
import math
import os
import pickle
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from hba_augment import pretrained
from hba_augment.functional import NUM_OPS, OP_NAMES, OPS
from hba_augment.schedule import Schedule

NO_MAG = [k for k, spec in enumerate(OPS) if not spec.has_magnitude]
ROTATE = OP_NAMES.index("Rotate")
INVERT = OP_NAMES.index("Invert")


def random_arrays(epochs: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    prob = rng.uniform(0, 1, (epochs, 2, NUM_OPS))
    mag = np.full((epochs, 2, NUM_OPS), np.nan)
    for k, spec in enumerate(OPS):
        if spec.has_magnitude:
            mag[:, :, k] = rng.uniform(spec.low, spec.high, (epochs, 2))
    return prob, mag


def make_schedule(epochs: int = 3, seed: int = 0, **kwargs) -> Schedule:
    prob, mag = random_arrays(epochs, seed)
    kwargs.setdefault("name", "test")
    kwargs.setdefault("provenance", {"dataset": "synthetic", "seed": seed})
    return Schedule(prob, mag, **kwargs)


@pytest.fixture
def valid_dict() -> dict:
    return make_schedule().to_dict()


# ---------------------------------------------------------------------------------------- construction
def test_attributes():
    prob, mag = random_arrays(4)
    s = Schedule(prob, mag, name="abc", count_probs=[0.1, 0.9], provenance={"x": [1, 2]})
    assert s.name == "abc"
    assert s.epochs == 4
    assert s.count_probs == (0.1, 0.9)
    assert s.provenance == {"x": [1, 2]}
    assert s.prob.dtype == np.float64 and s.prob.shape == (4, 2, NUM_OPS)
    np.testing.assert_array_equal(s.prob, prob)
    np.testing.assert_array_equal(s.mag, mag)
    assert np.isnan(s.mag[:, :, NO_MAG]).all()


def test_defaults():
    s = Schedule(*random_arrays(1))
    assert s.name == "custom"
    assert s.count_probs == (0.2, 0.3, 0.5)
    assert s.provenance == {}


def test_arrays_are_read_only_copies():
    prob, mag = random_arrays(2)
    s = Schedule(prob, mag)
    prob[0, 0, 0] = 0.123  # the caller's array is copied, not referenced
    assert s.prob[0, 0, 0] != 0.123
    with pytest.raises(ValueError, match="read-only"):
        s.prob[0, 0, 0] = 0.5
    with pytest.raises(ValueError, match="read-only"):
        s.mag[0, 0, 0] = 0.1
    p = s.provenance
    p["new"] = 1
    assert "new" not in s.provenance


def test_accepts_tensors_and_lists():
    prob, mag = random_arrays(2)
    a = Schedule(torch.from_numpy(prob).float(), torch.from_numpy(mag).float())
    b = Schedule(prob.tolist(), mag.tolist())
    np.testing.assert_allclose(a.prob, b.prob, rtol=1e-6)
    np.testing.assert_allclose(a.mag, b.mag, rtol=1e-6)


def test_constant():
    prob, mag = random_arrays(1)
    s = Schedule.constant(prob[0], mag[0], epochs=5)
    assert s.epochs == 5 and s.name == "constant"
    for e in range(5):
        np.testing.assert_array_equal(s.prob[e], prob[0])
        np.testing.assert_array_equal(s.mag[e], mag[0])
    assert Schedule.constant(prob[0], mag[0]).epochs == 1


@pytest.mark.parametrize(
    ("prob", "mag", "epochs", "match"),
    [
        (np.zeros((2, 14)), None, 1, r"prob must have shape \(2, 15\), got \(2, 14\)"),
        (None, np.zeros((1, 2, 15)), 1, r"mag must have shape \(2, 15\), got \(1, 2, 15\)"),
        ("abc", None, 1, "prob must be a numeric array"),
        (None, None, 0, "epochs must be an integer >= 1, got 0"),
        (None, None, 1.5, "epochs must be an integer >= 1"),
    ],
)
def test_constant_errors(prob, mag, epochs, match):
    prob0, mag0 = random_arrays(1)
    prob = prob0[0] if prob is None else prob
    mag = mag0[0] if mag is None else mag
    with pytest.raises(ValueError, match=match):
        Schedule.constant(prob, mag, epochs=epochs)


def _mutated(field: str, index: tuple[int, int, int], value: float) -> tuple[np.ndarray, np.ndarray]:
    prob, mag = random_arrays(3)
    (prob if field == "prob" else mag)[index] = value
    return prob, mag


@pytest.mark.parametrize(
    ("prob_mag", "match"),
    [
        (_mutated("prob", (1, 0, 3), 1.5), r"entries\[1\]\.prob\[0\]\[3\] \(copy 0, TranslateY\) = 1.5 is outside \[0, 1\]"),
        (_mutated("prob", (0, 1, 0), -0.01), r"entries\[0\]\.prob\[1\]\[0\] \(copy 1, ShearX\).*outside \[0, 1\]"),
        (_mutated("prob", (2, 1, 14), np.nan), r"entries\[2\]\.prob\[1\]\[14\] \(copy 1, Cutout\) = nan"),
        (_mutated("mag", (0, 0, ROTATE), 30.5), r"entries\[0\]\.mag\[0\]\[4\] \(copy 0, Rotate\) = 30.5 is outside Rotate's range \[0.0, 30.0\]"),
        (_mutated("mag", (0, 0, ROTATE), -10.0), r"Rotate.*outside.*unsigned"),
        (_mutated("mag", (2, 1, 10), 0.05), r"entries\[2\]\.mag\[1\]\[10\] \(copy 1, Contrast\) = 0.05 is outside"),
        (_mutated("mag", (1, 0, 9), np.nan), r"entries\[1\]\.mag\[0\]\[9\] \(copy 0, Posterize\) is missing"),
        (_mutated("mag", (1, 1, INVERT), 0.0), r"entries\[1\]\.mag\[1\]\[6\] \(copy 1, Invert\) = 0.0 must be null"),
        (_mutated("mag", (0, 0, 0), np.inf), r"ShearX\) = inf is outside"),
        ((np.zeros((2, 15)), np.zeros((2, 15))), r"prob must have shape \(S, 2, 15\)"),
        ((np.zeros((0, 2, 15)), np.zeros((0, 2, 15))), r"prob must have shape \(S, 2, 15\) with S >= 1"),
        ((np.zeros((1, 3, 15)), np.zeros((1, 3, 15))), r"prob must have shape"),
        ((np.zeros((1, 2, 14)), np.zeros((1, 2, 14))), r"prob must have shape"),
        ((random_arrays(2)[0], random_arrays(3)[1]), r"prob and mag must have the same shape"),
        ((random_arrays(2)[0], "x"), r"mag must be a numeric array"),
    ],
)
def test_array_validation(prob_mag, match):
    with pytest.raises(ValueError, match=match):
        Schedule(*prob_mag)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": ""}, "name must be a non-empty string"),
        ({"name": 3}, "name must be a non-empty string"),
        ({"count_probs": (0.2, 0.3, 0.6)}, "count_probs must sum to 1"),
        ({"count_probs": (1.2, -0.2)}, r"count_probs\[1\] must be a finite number >= 0"),
        ({"count_probs": (0.5, float("nan"), 0.5)}, r"count_probs\[1\]"),
        ({"count_probs": ()}, "count_probs must have 1 to 31 entries"),
        ({"count_probs": [1 / 32] * 32}, "count_probs must have 1 to 31 entries"),
        ({"count_probs": "abc"}, "count_probs must be a sequence"),
        ({"count_probs": 1.0}, "count_probs must be a sequence"),
        ({"count_probs": (True,)}, r"count_probs\[0\]"),
        ({"provenance": [1, 2]}, "provenance must be a dict"),
        ({"provenance": {"x": object()}}, "provenance must be JSON-serialisable"),
        ({"provenance": {"x": float("nan")}}, "provenance must be JSON-serialisable"),
    ],
)
def test_keyword_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_schedule(**kwargs)


def test_count_probs_tolerance():
    assert make_schedule(count_probs=(0.2, 0.3, 0.5 + 5e-7)).count_probs[2] == 0.5 + 5e-7
    assert make_schedule(count_probs=np.array([0.25, 0.75])).count_probs == (0.25, 0.75)
    assert make_schedule(count_probs=[1]).count_probs == (1.0,)


def test_range_ends_are_valid():
    prob = np.zeros((2, 2, NUM_OPS))
    prob[1] = 1.0
    mag = np.full((2, 2, NUM_OPS), np.nan)
    for k, spec in enumerate(OPS):
        if spec.has_magnitude:
            mag[0, :, k], mag[1, :, k] = spec.low, spec.high
    Schedule(prob, mag)


# ---------------------------------------------------------------------------------------- JSON
def test_dict_round_trip_is_exact():
    s = make_schedule(epochs=4)
    d = s.to_dict()
    assert d["format"] == "hba-schedule" and d["version"] == 2
    assert d["ops"] == list(OP_NAMES) and d["epochs"] == 4 and len(d["entries"]) == 4
    assert [e["epoch"] for e in d["entries"]] == [0, 1, 2, 3]
    assert all(d["entries"][0]["mag"][c][k] is None for c in range(2) for k in NO_MAG)
    assert Schedule.from_dict(json.loads(json.dumps(d))) == s


# ---------------------------------------------------------------------------------------- format version 1
SOLARIZE = OP_NAMES.index("Solarize")
POSTERIZE = OP_NAMES.index("Posterize")


def _version_1(d: dict, solarize: list[float], posterize: list[float]) -> dict:
    """``d`` as a version-1 file whose copy-0/copy-1 Solarize thresholds and Posterize bits are given."""
    d = copy.deepcopy(d)
    d["version"] = 1
    for entry in d["entries"]:
        for c in range(2):
            entry["mag"][c][SOLARIZE] = solarize[c]
            entry["mag"][c][POSTERIZE] = posterize[c]
    return d


@pytest.mark.parametrize(("threshold", "strength"), [(0, 255), (0.5, 255), (1, 255), (13, 243), (128, 128), (255, 1)])
@pytest.mark.parametrize(("bits", "posterize_strength"), [(0, 8), (0.4, 7.6), (2.5, 5.5), (8, 0)])
def test_version_1_converts_to_strengths(valid_dict, threshold, strength, bits, posterize_strength):
    d1 = _version_1(valid_dict, [threshold, 200.0], [bits, 4.0])
    with pytest.warns(UserWarning, match=r"format version 1 .* converted to version 2 strengths"):
        s = Schedule.from_dict(d1)
    assert s.mag[:, 0, SOLARIZE] == pytest.approx(strength) and s.mag[:, 1, SOLARIZE] == pytest.approx(56.0)
    assert s.mag[:, 0, POSTERIZE] == pytest.approx(posterize_strength) and s.mag[:, 1, POSTERIZE] == pytest.approx(4.0)
    others = [k for k in range(NUM_OPS) if k not in (SOLARIZE, POSTERIZE)]
    np.testing.assert_array_equal(s.prob, Schedule.from_dict(valid_dict).prob)
    np.testing.assert_array_equal(s.mag[:, :, others], Schedule.from_dict(valid_dict).mag[:, :, others])
    assert s.provenance["converted_from_version"] == 1
    assert s.to_dict()["version"] == 2


@pytest.mark.parametrize("threshold", [1, 13, 100, 127.5, 200, 255])
@pytest.mark.parametrize("bits", [0, 1, 2.5, 3.4, 5.5, 8])
def test_version_1_conversion_applies_the_same_ops(valid_dict, threshold, bits):
    """A converted schedule changes pixels exactly as the version-1 file did under its own convention."""
    from PIL import Image, ImageOps

    from hba_augment.functional import apply_op

    with pytest.warns(UserWarning):
        s = Schedule.from_dict(_version_1(valid_dict, [threshold, threshold], [bits, bits]))
    ramp = torch.arange(256, dtype=torch.uint8).reshape(1, 1, 16, 16)
    pil = Image.fromarray(ramp[0, 0].numpy())
    kept = round(bits)
    old_solarize = np.asarray(ImageOps.solarize(pil, threshold))
    old_posterize = np.asarray(ImageOps.posterize(pil, kept) if kept else pil.point([0] * 256))
    np.testing.assert_array_equal(apply_op(ramp, "Solarize", float(s.mag[0, 0, SOLARIZE]))[0, 0].numpy(), old_solarize)
    np.testing.assert_array_equal(apply_op(ramp, "Posterize", float(s.mag[0, 0, POSTERIZE]))[0, 0].numpy(), old_posterize)


def test_version_1_file_loads_and_resaves_as_version_2(tmp_path, valid_dict):
    path = tmp_path / "old.json"
    path.write_text(json.dumps(_version_1(valid_dict, [128, 128], [4, 4])))
    with pytest.warns(UserWarning, match="old.json|version 1"):
        s = Schedule.load(path)
    s.save(tmp_path / "new.json")
    assert json.loads((tmp_path / "new.json").read_text())["version"] == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a version-2 file loads without a warning
        again = Schedule.load(tmp_path / "new.json")
    assert again.provenance == s.provenance and again.provenance["converted_from_version"] == 1
    np.testing.assert_allclose(again.mag, s.mag, rtol=1e-5)  # files hold 6 significant digits


def test_version_1_file_is_validated_before_conversion(valid_dict):
    with pytest.raises(ValueError, match=r"Solarize\) = 256.0 is outside"):
        Schedule.from_dict(_version_1(valid_dict, [256, 0], [4, 4]))


def test_save_load_round_trip(tmp_path):
    s = make_schedule(epochs=5)
    path = tmp_path / "s.json"
    s.save(path)
    loaded = Schedule.load(path)
    assert (loaded.name, loaded.epochs, loaded.count_probs, loaded.provenance) == (
        s.name, s.epochs, s.count_probs, s.provenance,
    )
    np.testing.assert_allclose(loaded.prob, s.prob, rtol=5e-6, atol=0)
    np.testing.assert_allclose(loaded.mag, s.mag, rtol=5e-6, atol=0)  # NaNs compare equal here
    # Rounding is idempotent: a loaded file saves to the same bytes (clean diffs).
    again = tmp_path / "again.json"
    loaded.save(str(again))
    assert again.read_bytes() == path.read_bytes()
    # The file is standard JSON with one line per prob / mag list.
    text = path.read_text()
    assert json.loads(text)["epochs"] == 5
    assert len(text.splitlines()) < 40
    assert "NaN" not in text and "null" in text


def test_save_rounds_to_six_significant_digits(tmp_path):
    prob, mag = random_arrays(1)
    prob[0, 0, 0] = 0.123456789
    mag[0, 0, ROTATE] = 29.99999999
    Schedule(prob, mag).save(tmp_path / "r.json")
    d = json.loads((tmp_path / "r.json").read_text())
    assert d["entries"][0]["prob"][0][0] == 0.123457
    assert d["entries"][0]["mag"][0][ROTATE] == 30.0  # rounding never leaves the range


def test_save_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "s.json"
    make_schedule(seed=1).save(path)
    before = path.read_bytes()

    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        make_schedule(seed=2).save(path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.json"]  # temp file cleaned up
    monkeypatch.undo()
    make_schedule(seed=2).save(path)  # overwrites in place
    np.testing.assert_allclose(Schedule.load(path).prob, make_schedule(seed=2).prob, rtol=5e-6)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.json"]


def test_save_into_missing_folder_raises(tmp_path):
    with pytest.raises(OSError):
        make_schedule().save(tmp_path / "missing" / "s.json")


def test_provenance_optional_in_json(valid_dict):
    del valid_dict["provenance"]
    assert Schedule.from_dict(valid_dict).provenance == {}


def _set(path: list, value):
    def mutate(d):
        target = d
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return mutate


def _delete(key):
    def mutate(d):
        del d[key]

    return mutate


def _call(fn):
    def mutate(d):
        fn(d)

    return mutate


JSON_ERRORS = [
    (_set(["format"], "pba-schedule"), "format must be 'hba-schedule'"),
    (_set(["version"], 3), r"version must be one of \[1, 2\], got 3 \(this hba_augment reads"),
    (_set(["version"], True), r"version must be one of \[1, 2\], got True"),
    (_set(["version"], "2"), r"version must be one of \[1, 2\], got '2'"),
    (_set(["name"], ""), "name must be a non-empty string"),
    (_set(["name"], None), "name must be a non-empty string"),
    (_set(["ops"], list(reversed(OP_NAMES))), "ops must be the 15 op names in canonical order"),
    (_set(["ops"], list(OP_NAMES[:14])), "ops must be the 15 op names"),
    (_set(["ops", 3], "TranslateZ"), "ops must be the 15 op names"),
    (_set(["count_probs"], [0.5, 0.6]), "count_probs must sum to 1"),
    (_set(["count_probs"], [0.5, -0.5, 1.0]), r"count_probs\[1\]"),
    (_set(["count_probs"], {"0": 1.0}), "count_probs must be a list"),
    (_set(["count_probs"], [1.0, None]), r"count_probs\[1\]"),
    (_set(["epochs"], 4), "epochs is 4 but entries has 3 entries"),
    (_set(["epochs"], 0), "epochs must be an integer >= 1"),
    (_set(["epochs"], 3.0), "epochs must be an integer >= 1"),
    (_set(["entries"], {}), "entries must be a list"),
    (_call(lambda d: d["entries"].pop()), "epochs is 3 but entries has 2 entries"),
    (_set(["entries", 1], [1, 2]), r"entries\[1\] must be an object"),
    (_set(["entries", 1, "epoch"], 2), r"entries\[1\]\.epoch must be 1"),
    (_set(["entries", 0, "epoch"], False), r"entries\[0\]\.epoch must be 0"),
    (_call(lambda d: d["entries"].reverse()), r"entries\[0\]\.epoch must be 0 \(entries in epoch order\), got 2"),
    (_call(lambda d: d["entries"][2].pop("mag")), r"entries\[2\] must have exactly the fields"),
    (_set(["entries", 2, "extra"], 1), r"entries\[2\] must have exactly the fields"),
    (_set(["entries", 0, "prob"], [[0.1] * 15]), r"entries\[0\]\.prob must be a list of 2 copies"),
    (_set(["entries", 0, "prob"], [[0.1] * 15] * 3), r"entries\[0\]\.prob must be a list of 2 copies"),
    (_set(["entries", 0, "mag", 1], [0.1] * 14), r"entries\[0\]\.mag\[1\] must be a list of 15 values"),
    (_set(["entries", 0, "prob", 1], "abc"), r"entries\[0\]\.prob\[1\] must be a list of 15 values"),
    (_set(["entries", 1, "prob", 0, 2], 1.01), r"entries\[1\]\.prob\[0\]\[2\] \(copy 0, TranslateX\) = 1.01 is outside \[0, 1\]"),
    (_set(["entries", 1, "prob", 0, 2], None), r"entries\[1\]\.prob\[0\]\[2\] \(copy 0, TranslateX\) must be a finite number, got None"),
    (_set(["entries", 1, "prob", 0, 2], "0.5"), r"entries\[1\]\.prob\[0\]\[2\].*must be a finite number"),
    (_set(["entries", 1, "prob", 0, 2], True), r"entries\[1\]\.prob\[0\]\[2\].*must be a finite number"),
    (_set(["entries", 1, "prob", 0, 2], float("nan")), r"entries\[1\]\.prob\[0\]\[2\].*must be a finite number"),
    (_set(["entries", 2, "mag", 1, 8], 256), r"entries\[2\]\.mag\[1\]\[8\] \(copy 1, Solarize\) = 256.0 is outside"),
    (_set(["entries", 2, "mag", 1, 8], None), r"entries\[2\]\.mag\[1\]\[8\] \(copy 1, Solarize\) is missing"),
    (_set(["entries", 2, "mag", 0, 5], 0.0), r"entries\[2\]\.mag\[0\]\[5\] \(copy 0, AutoContrast\) = 0.0 must be null"),
    (_set(["entries", 2, "mag", 0, 14], float("inf")), r"entries\[2\]\.mag\[0\]\[14\] \(copy 0, Cutout\) must be a finite number or null"),
    (_set(["entries", 0, "mag", 0, 0], -0.1), r"ShearX.*outside.*unsigned"),
    (_set(["provenance"], "me"), "provenance must be an object"),
    (_set(["provenance"], None), "provenance must be an object"),
    (_set(["extra"], 1), r"unknown field\(s\) \['extra'\]"),
    (_delete("ops"), r"missing field\(s\) \['ops'\]"),
    (_delete("entries"), r"missing field\(s\) \['entries'\]"),
]


@pytest.mark.parametrize(("mutate", "match"), JSON_ERRORS)
def test_json_validation(valid_dict, tmp_path, mutate, match):
    mutate(valid_dict)
    with pytest.raises(ValueError, match=match):
        Schedule.from_dict(valid_dict)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(valid_dict))
    with pytest.raises(ValueError, match=rf"bad\.json: .*{match}"):
        Schedule.load(path)


@pytest.mark.parametrize("data", [[], "schedule", 3, None])
def test_json_not_an_object(data):
    with pytest.raises(ValueError, match="a schedule must be a JSON object"):
        Schedule.from_dict(data)


def test_load_broken_json(tmp_path):
    path = tmp_path / "broken.json"
    make_schedule().save(path)
    path.write_text(path.read_text()[:-10])
    with pytest.raises(ValueError, match=r"broken\.json: not valid JSON"):
        Schedule.load(path)
    path.write_bytes(b"\xff\xfe{}")
    with pytest.raises(ValueError, match=r"broken\.json: cannot read"):
        Schedule.load(path)


def test_load_missing_file(tmp_path):
    with pytest.raises(ValueError, match=r"nope\.json: cannot read schedule file"):
        Schedule.load(tmp_path / "nope.json")
    with pytest.raises(ValueError, match="cannot read schedule file"):
        Schedule.load(tmp_path)  # a folder


# ---------------------------------------------------------------------------------------- epoch scaling
@pytest.mark.parametrize(
    ("S", "T", "expected"),
    [
        (4, 4, [0, 1, 2, 3]),
        (4, 10, [0, 0, 0, 1, 1, 2, 2, 2, 3, 3]),
        (4, 8, [0, 0, 1, 1, 2, 2, 3, 3]),
        (10, 4, [0, 2, 5, 7]),
        (3, 1, [0]),
        (1, 5, [0, 0, 0, 0, 0]),
    ],
)
def test_index_linear_scaling(S, T, expected):
    s = make_schedule(epochs=S)
    assert [s.index(e, T) for e in range(T)] == expected


def test_index_defaults_and_clamping():
    s = make_schedule(epochs=4)
    assert [s.index(e) for e in range(6)] == [0, 1, 2, 3, 3, 3]  # total_epochs None means S
    assert s.index(25, 10) == 3  # past the end: last entry
    assert s.index(np.int64(5), np.int32(10)) == 2
    assert s.index(torch.tensor(5), 10) == 2


@given(S=st.integers(1, 300), T=st.integers(1, 1000), e=st.integers(0, 2000))
def test_index_property(S, T, e):
    prob = np.zeros((S, 2, NUM_OPS))
    mag = np.full((S, 2, NUM_OPS), np.nan)
    for k, spec in enumerate(OPS):
        if spec.has_magnitude:
            mag[:, :, k] = spec.low
    s = Schedule(prob, mag)
    i = s.index(e, T)
    assert i == min(math.floor(e * S / T), S - 1)
    assert 0 <= i < S
    assert s.index(e + 1, T) >= i
    if T >= S:  # a run at least as long as the schedule visits every entry, in order
        assert sorted({s.index(t, T) for t in range(T)}) == list(range(S))


@pytest.mark.parametrize(
    ("epoch", "total", "match"),
    [
        (-1, None, "epoch must be an integer >= 0, got -1"),
        (1.0, None, "epoch must be an integer >= 0, got 1.0"),
        (True, None, "epoch must be an integer >= 0, got True"),
        ("1", None, "epoch must be an integer >= 0"),
        (None, None, "epoch must be an integer >= 0"),
        (0, 0, "total_epochs must be an integer >= 1, got 0"),
        (0, -5, "total_epochs must be an integer >= 1"),
        (0, 10.0, "total_epochs must be an integer >= 1"),
    ],
)
def test_index_errors(epoch, total, match):
    s = make_schedule()
    with pytest.raises(ValueError, match=match):
        s.index(epoch, total)
    with pytest.raises(ValueError, match=match):
        s.at(epoch, total)
    with pytest.raises(ValueError, match=match):
        s.table(epoch, total)


def test_at():
    s = make_schedule(epochs=4)
    prob, mag = s.at(5, 10)
    assert prob.dtype == mag.dtype == torch.float32
    assert prob.shape == mag.shape == (2, NUM_OPS)
    torch.testing.assert_close(prob, torch.tensor(s.prob[2], dtype=torch.float32))
    torch.testing.assert_close(mag, torch.tensor(s.mag[2], dtype=torch.float32), equal_nan=True)
    assert torch.isnan(mag[:, NO_MAG]).all() and not torch.isnan(prob).any()
    prob[0, 0] = 7.0  # a fresh tensor: editing it leaves the schedule alone
    assert s.prob[2, 0, 0] != 7.0


# ---------------------------------------------------------------------------------------- display, copies
def test_table_and_str():
    s = make_schedule(epochs=3)
    table = s.table(2)
    lines = table.splitlines()
    assert lines[0] == "entry 2 of 3"
    assert lines[1].split() == ["op", "p", "copy0", "m", "copy0", "p", "copy1", "m", "copy1"]
    rows = lines[3:]
    assert [r.split()[0] for r in rows] == list(OP_NAMES)
    for k, row in enumerate(rows):
        cells = row.split()[1:]
        assert float(cells[0]) == pytest.approx(s.prob[2, 0, k], abs=5e-4)
        assert float(cells[2]) == pytest.approx(s.prob[2, 1, k], abs=5e-4)
        if k in NO_MAG:
            assert cells[1] == cells[3] == "-"
        else:
            assert float(cells[1]) == pytest.approx(s.mag[2, 0, k], rel=1e-3)
    assert s.table(5, 6) == table
    text = str(s)
    header, rest = text.split("\n", 1)
    assert "'test'" in header and "3 epochs," in header and "0.2, 0.3, 0.5" in header
    assert "1 epoch," in str(make_schedule(epochs=1)).split("\n", 1)[0]
    assert rest == s.table(0)
    assert repr(s) == "Schedule(name='test', epochs=3, count_probs=(0.2, 0.3, 0.5))"


def test_equality_pickle_copy():
    s = make_schedule()
    assert s == make_schedule()
    assert s != make_schedule(seed=1)
    assert s != make_schedule(name="other")
    assert s != "test"
    for other in (pickle.loads(pickle.dumps(s)), copy.deepcopy(s)):
        assert other == s
        with pytest.raises(ValueError, match="read-only"):
            other.prob[0, 0, 0] = 0.0


# ---------------------------------------------------------------------------------------- shipped schedules
@pytest.fixture
def shipped(tmp_path, monkeypatch):
    """Pretend the package ships two schedules (the real folder stays untouched)."""
    folder = tmp_path / "policies"
    folder.mkdir()
    make_schedule(name="alpha", seed=1).save(folder / "alpha.json")
    make_schedule(name="beta", seed=2).save(folder / "beta.json")
    (folder / "README.md").write_text("not a schedule")
    (folder / "sub.json").mkdir()
    monkeypatch.setattr(pretrained, "_policy_dir", lambda: folder)
    return folder


def test_available_and_load_pretrained(shipped):
    assert pretrained.available_policies() == ["alpha", "beta"]
    assert pretrained.pretrained_path("beta").read_text() == (shipped / "beta.json").read_text()
    s = pretrained.load_pretrained("alpha")
    assert s.name == "alpha"
    assert s == Schedule.load(shipped / "alpha.json")


@pytest.mark.parametrize("name", ["gamma", "alpha.json", "", None])
def test_unknown_pretrained_lists_available(shipped, name):
    with pytest.raises(ValueError, match=r"Unknown policy .*shipped policies: \['alpha', 'beta'\]"):
        pretrained.load_pretrained(name)


def test_invalid_shipped_file_names_the_file(shipped):
    (shipped / "gamma.json").write_text("{}")
    with pytest.raises(ValueError, match=r"gamma\.json: missing field"):
        pretrained.load_pretrained("gamma")


def test_real_package_folder_lookup():
    names = pretrained.available_policies()
    assert isinstance(names, list) and names == sorted(names)
    for name in names:  # every shipped schedule must load and be named after its file
        assert pretrained.load_pretrained(name).name == name
    with pytest.raises(ValueError, match="Unknown policy 'no-such-policy'"):
        pretrained.load_pretrained("no-such-policy")


def test_float32_range_ends_are_accepted():
    # float32(0.3) and float32(0.2) are a hair above ShearX's and Cutout's float64 range ends: a saturated
    # float32 policy (as the search produces) must still make a schedule, at exactly the range ends.
    prob, mag = random_arrays(2)
    for k, spec in enumerate(OPS):
        if spec.has_magnitude:
            mag[0, :, k], mag[1, :, k] = spec.low, spec.high
    as32 = torch.tensor(mag, dtype=torch.float32)
    assert as32.double()[1, 0, 0].item() > 0.3
    s = Schedule(torch.tensor(prob, dtype=torch.float32), as32)
    np.testing.assert_allclose(s.mag, mag, rtol=1e-7)
    assert s.mag[1, 0, OP_NAMES.index("ShearX")] == 0.3 and s.mag[1, 1, OP_NAMES.index("Cutout")] == 0.2
    # Further out is an error, not a snap.
    mag[1, 0, 0] = 0.3 + 1e-6
    with pytest.raises(ValueError, match=r"ShearX\) = 0.30000\d+ is outside"):
        Schedule(prob, mag)


def test_every_shipped_schedule_names_the_search_that_made_it():
    """A shipped schedule is the output of a real, full-length search (the contract, section 4): its
    provenance says which command, code, device and seed made it, and it has one entry per search epoch."""
    for name in pretrained.available_policies():
        schedule = pretrained.load_pretrained(name)
        prov = schedule.provenance
        assert prov["command"].startswith("hba-augment search "), (name, prov["command"])
        assert prov["git_commit"] and prov["device"] and float(prov["wall_seconds"]) > 0, name
        assert int(prov["search_epochs"]) == schedule.epochs and "seed" in prov, name
