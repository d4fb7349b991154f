"""Benchmark helpers of issue 10: control_schedules.py, policy_quality.py's run records, search_ablation.py, augmentation_strength.py."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from hba_augment.functional import NUM_OPS, OP_NAMES, OPS
from hba_augment.pretrained import pretrained_path
from hba_augment.schedule import Schedule
from hba_augment.search.hparams import hparams_to_policy, init_hparams

_BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
_PBA_LOG = _BENCH.parents[1] / "shared" / "reference" / "pba" / "rcifar10_16_wrn.txt"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, _BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def cs():
    yield _load("control_schedules")
    sys.modules.pop("control_schedules", None)


@pytest.fixture(scope="module")
def pq():
    yield _load("policy_quality")
    sys.modules.pop("policy_quality", None)


def _pba_line(target: str, clone: str, t_epoch: int, c_epoch: int, old: list[int], new: list[int]) -> str:
    return repr([target, clone, t_epoch, c_epoch, old, new])


def test_pba_log_is_parsed_as_pba_does(cs, tmp_path):
    # Three updates: policy A until the first clone epoch (3), B for 4 epochs, C for 3, D to the end (12).
    a, b, c, d = ([v] * 60 for v in (0, 1, 2, 3))
    log = tmp_path / "log.txt"
    log.write_text("\n".join([
        _pba_line("0", "9", 2, 3, a, b),
        _pba_line("1", "0", 6, 7, b, c),
        _pba_line("2", "1", 9, 10, c, d),
    ]) + "\n")
    schedule = cs.parse_pba_log(log, 12)
    assert [p[0] for p in schedule] == [0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 3, 3]


def test_pba_level_semantics(cs):
    assert cs.pba_magnitude("Rotate", 7) == (21.0, False)
    assert cs.pba_magnitude("TranslateX", 5) == (5 / 32, False)
    assert cs.pba_magnitude("Solarize", 3) == (76.0, False)  # threshold 256 - 76 = 180
    assert cs.pba_magnitude("Solarize", 10) == (255.0, True)  # threshold 0: capped
    assert cs.pba_magnitude("Posterize", 0) == (4.0, False)  # PBA keeps 4 bits at level 0
    assert cs.pba_magnitude("Posterize", 10) == (8.0, False)  # 0 bits
    assert cs.pba_magnitude("Cutout", 3) == (6 / 32, False)
    assert cs.pba_magnitude("Cutout", 4) == (0.2, True)
    assert cs.pba_magnitude("Brightness", 5) == (pytest.approx(1.0), False)
    assert cs.pba_magnitude("Invert", 9) == (None, False)
    with pytest.raises(ValueError, match=r"0\.\.10"):
        cs.pba_magnitude("Rotate", 11)


@pytest.mark.skipif(not _PBA_LOG.exists(), reason=f"PBA reference log not found at {_PBA_LOG}")
def test_published_pba_schedule_converts(cs):
    s = cs.pba_schedule(_PBA_LOG, 200)
    assert s.epochs == 200
    raw = cs.parse_pba_log(_PBA_LOG, 200)
    # Spot-check one entry against the raw integers: slot i of copy c is (10 p, level).
    s_idx = 150
    for c in range(2):
        for i, op in enumerate(cs.PBA_OPS):
            p10, level = raw[s_idx][c * 30 + 2 * i], raw[s_idx][c * 30 + 2 * i + 1]
            k = OP_NAMES.index(op)
            assert s.prob[s_idx, c, k] == pytest.approx(p10 / 10)
            m, _ = cs.pba_magnitude(op, level)
            assert (np.isnan(s.mag[s_idx, c, k]) if m is None else s.mag[s_idx, c, k] == pytest.approx(m))
    assert s.prob[0].sum() == 0  # PBA's search starts from no augmentation


def test_initial_control_is_the_search_start(cs):
    prob, mag = hparams_to_policy(init_hparams(dtype=torch.float64))
    s = cs.initial_schedule()
    np.testing.assert_allclose(s.prob[0], prob.numpy())
    np.testing.assert_allclose(s.mag[0], mag.numpy())


def test_last_and_shuffled_controls(cs):
    rng = np.random.default_rng(0)
    prob = rng.uniform(0, 0.3, (5, 2, NUM_OPS))
    mag = np.array([[[rng.uniform(o.low, o.high) if o.has_magnitude else np.nan for o in OPS]] * 2] * 5)
    learned = Schedule(prob, mag, name="learned")
    last = cs.last_entry_schedule(learned)
    assert last.epochs == 1 and np.array_equal(last.prob[0], prob[-1])
    mean = cs.mean_schedule(learned)
    assert mean.epochs == 1 and np.allclose(mean.prob[0], prob.mean(0))
    assert np.allclose(mean.mag[0], mag.mean(0), equal_nan=True) and np.isnan(mean.mag[0, 0, 5])  # AutoContrast
    shuffled, perm = cs.shuffled_schedule(learned, seed=3)
    assert sorted(perm) == sorted(OP_NAMES) and all(a != b for a, b in zip(OP_NAMES, perm, strict=True))
    # Same probabilities per entry and copy, on other ops; relative magnitudes move with them.
    np.testing.assert_allclose(np.sort(shuffled.prob, axis=2), np.sort(prob, axis=2))
    for k, target in enumerate(perm):
        j = OP_NAMES.index(target)
        np.testing.assert_allclose(shuffled.prob[:, :, j], prob[:, :, k])
        if OPS[k].has_magnitude and OPS[j].has_magnitude:
            frac_in = (mag[:, :, k] - OPS[k].low) / (OPS[k].high - OPS[k].low)
            frac_out = (shuffled.mag[:, :, j] - OPS[j].low) / (OPS[j].high - OPS[j].low)
            np.testing.assert_allclose(frac_out, frac_in, atol=1e-12)


def test_delayed_control_is_the_same_walk_later_after_its_start(cs):
    from hba_augment.search.priors import prior_policy

    rng = np.random.default_rng(1)
    prob = rng.uniform(0, 0.3, (6, 2, NUM_OPS))
    mag = np.array([[[rng.uniform(o.low, o.high) if o.has_magnitude else np.nan for o in OPS]] * 2] * 6)
    learned = Schedule(prob, mag, name="learned", provenance={"init": "paper"})
    delayed = cs.delayed_schedule(learned, 2)
    start = prior_policy("paper")
    assert delayed.epochs == 6 and delayed.name == "learned-delayed2"
    np.testing.assert_array_equal(delayed.prob[:2], np.broadcast_to(start.prob, (2, 2, NUM_OPS)))
    np.testing.assert_array_equal(delayed.prob[2:], prob[:4])
    np.testing.assert_array_equal(delayed.mag[2:], mag[:4])
    for bad in (0, 6, True):
        with pytest.raises(ValueError, match="delay must be"):
            cs.delayed_schedule(learned, bad)
    with pytest.raises(ValueError, match="names no start"):
        cs.delayed_schedule(Schedule(prob, mag, name="bare"), 2)


def test_ramped_control_applies_ops_linearly_more_up_to_the_last_entry_and_holds_it(cs):
    from hba_augment.search.hyper_input import applied_probability

    rng = np.random.default_rng(2)
    prob = rng.uniform(0.2, 0.6, (3, 2, NUM_OPS))  # saturated: nearly K ops whenever K <= 2
    mag = np.array([[[rng.uniform(o.low, o.high) if o.has_magnitude else np.nan for o in OPS]] * 2] * 3)
    learned = Schedule(prob, mag, name="learned", count_probs=(0.2, 0.3, 0.5))
    ramped = cs.ramped_schedule(learned, 0.5, entries=10)
    assert ramped.epochs == 10 and ramped.name == "learned-ramp50" and tuple(ramped.count_probs) == (0.2, 0.3, 0.5)

    def ops(p):
        return float(applied_probability(torch.tensor(p, dtype=torch.float64), (0.2, 0.3, 0.5)).sum())

    full = ops(prob[-1])
    np.testing.assert_allclose([ops(p) for p in ramped.prob[:5]], np.arange(5) / 5 * full, atol=1e-6)
    assert ops(0.4 * prob[-1]) > 0.5 * full  # a linear ramp of the probabilities would not be linear in ops
    np.testing.assert_array_equal(ramped.prob[0], np.zeros((2, NUM_OPS)))
    np.testing.assert_array_equal(ramped.prob[5:], np.broadcast_to(prob[-1], (5, 2, NUM_OPS)))
    ratio = ramped.prob[3] / prob[-1]  # one scale for every slot: the mix of ops is kept
    np.testing.assert_allclose(ratio, ratio.flat[0])
    np.testing.assert_array_equal(ramped.mag, np.broadcast_to(mag[-1], (10, 2, NUM_OPS)))
    for bad in (0, 1.5, True, "0.5"):
        with pytest.raises(ValueError, match="ramp must be"):
            cs.ramped_schedule(learned, bad)
    with pytest.raises(ValueError, match="entries must be"):
        cs.ramped_schedule(learned, 0.5, entries=1)


def test_strength_control_moves_every_magnitude_from_its_identity_and_keeps_the_mix(cs):
    from hba_augment.functional import OPS

    rng = np.random.default_rng(0)
    low = np.array([o.low if o.has_magnitude else np.nan for o in OPS])
    high = np.array([o.high if o.has_magnitude else np.nan for o in OPS])
    mag = low + rng.random((3, 2, NUM_OPS)) * (high - low)
    prob = rng.random((3, 2, NUM_OPS))
    learned = Schedule(prob, mag, name="learned")
    ramped = cs.strength_ramped_schedule(learned, 0.5, entries=11)
    assert ramped.epochs == 11 and ramped.name == "learned-strength50"
    np.testing.assert_array_equal(ramped.prob, np.broadcast_to(prob[-1], (11, 2, NUM_OPS)))
    identity = np.array([o.identity if o.has_magnitude else np.nan for o in OPS])
    np.testing.assert_array_equal(ramped.mag[0], np.broadcast_to(identity, (2, NUM_OPS)))  # 0, or factor 1
    np.testing.assert_allclose(ramped.mag[5:], np.broadcast_to(mag[-1], (6, 2, NUM_OPS)))
    np.testing.assert_allclose(ramped.mag[2], identity + 0.4 * (mag[-1] - identity))
    assert np.isnan(ramped.mag[:, :, [o.name for o in OPS].index("Equalize")]).all()
    with pytest.raises(ValueError, match="ramp must be"):
        cs.strength_ramped_schedule(learned, 0)


def test_reordered_controls_keep_every_entry_and_change_only_their_order(cs):
    from hba_augment.functional import OPS

    rng = np.random.default_rng(1)
    prob = rng.random((6, 2, NUM_OPS))
    mag = np.broadcast_to([o.low if o.has_magnitude else np.nan for o in OPS], (6, 2, NUM_OPS))
    learned = Schedule(prob, mag, name="learned")
    rev = cs.reordered_schedule(learned, "reversed")
    np.testing.assert_array_equal(rev.prob, prob[::-1])
    shuffled = cs.reordered_schedule(learned, "shuffled", seed=3)
    order = shuffled.provenance["order"]
    assert sorted(order) == list(range(6)) and order != list(range(6)) and shuffled.name == "learned-time-shuffled3"
    np.testing.assert_array_equal(shuffled.prob, prob[order])
    assert cs.reordered_schedule(learned, "shuffled", seed=3).provenance["order"] == order  # seeded
    with pytest.raises(ValueError, match="order must be"):
        cs.reordered_schedule(learned, "sorted")
    with pytest.raises(ValueError, match="one entry"):
        cs.reordered_schedule(Schedule(prob[:1], mag[:1], name="one"), "reversed")


@pytest.mark.parametrize("part", ["probabilities", "magnitudes"])
def test_a_reordered_part_moves_and_the_other_stays_in_order(cs, part):
    rng = np.random.default_rng(2)
    prob = rng.random((7, 2, NUM_OPS))
    low = np.array([o.low if o.has_magnitude else np.nan for o in OPS])
    high = np.array([o.high if o.has_magnitude else np.nan for o in OPS])
    mag = low + rng.random((7, 2, NUM_OPS)) * (high - low)
    learned = Schedule(prob, mag, name="learned")
    whole = cs.reordered_schedule(learned, "shuffled", seed=4)
    half = cs.reordered_schedule(learned, "shuffled", seed=4, part=part)
    order = half.provenance["order"]
    assert order == whole.provenance["order"] and half.name == f"learned-time-shuffled4{cs.REORDER_PARTS[part]}"
    moved, kept = (half.prob, half.mag) if part == "probabilities" else (half.mag, half.prob)
    source_moved, source_kept = (prob, mag) if part == "probabilities" else (mag, prob)
    np.testing.assert_array_equal(moved, source_moved[order])
    np.testing.assert_array_equal(kept, source_kept)
    rev = cs.reordered_schedule(learned, "reversed", part=part)
    np.testing.assert_array_equal(rev.prob if part == "probabilities" else rev.mag, source_moved[::-1])
    with pytest.raises(ValueError, match="part must be one of"):
        cs.reordered_schedule(learned, "reversed", part="prob")


def test_smoothed_control_averages_a_centred_window_and_keeps_a_constant_schedule(cs):
    from hba_augment.functional import OPS

    lows = [o.low if o.has_magnitude else np.nan for o in OPS]
    highs = [o.high if o.has_magnitude else np.nan for o in OPS]
    prob = np.zeros((10, 2, NUM_OPS))
    prob[::2] = 0.5  # jitter: 0.5, 0, 0.5, 0, ...
    even = (np.arange(10) % 2 == 0)[:, None, None]
    mag = np.broadcast_to(np.where(even, np.asarray(highs), np.asarray(lows)), (10, 2, NUM_OPS))
    learned = Schedule(prob, mag, name="jitter")
    smooth = cs.smoothed_schedule(learned, 0.3)  # 3 entries: e-1, e, e+1
    assert smooth.name == "jitter-smooth30" and smooth.epochs == 10
    np.testing.assert_allclose(smooth.prob[1:-1, 0, 0], [1 / 3, 1 / 6] * 4)  # odd entries see two 0.5s, even one
    np.testing.assert_allclose(smooth.prob[0], 0.25)  # cut at the start: entries 0 and 1
    # Magnitudes weighted by probability: only the entries that may fire (the high ones) count.
    has = np.array([o.has_magnitude for o in OPS])
    np.testing.assert_allclose(smooth.mag[3][:, has], np.broadcast_to(np.asarray(highs)[has], (2, int(has.sum()))))
    assert np.isnan(smooth.mag[:, :, ~has]).all()
    constant = Schedule(np.full((5, 2, NUM_OPS), 0.2), np.broadcast_to(np.asarray(highs), (5, 2, NUM_OPS)), name="c")
    np.testing.assert_allclose(cs.smoothed_schedule(constant, 1.0).prob, constant.prob)
    with pytest.raises(ValueError, match="window must be"):
        cs.smoothed_schedule(learned, 0)
    with pytest.raises(ValueError, match="one entry"):
        cs.smoothed_schedule(Schedule(prob[:1], mag[:1], name="one"), 0.5)


def _random_schedule(rng: np.random.Generator, epochs: int, name: str) -> Schedule:
    low = np.array([o.low if o.has_magnitude else np.nan for o in OPS])
    high = np.array([o.high if o.has_magnitude else np.nan for o in OPS])
    mag = low + rng.random((epochs, 2, NUM_OPS)) * (high - low)
    return Schedule(rng.random((epochs, 2, NUM_OPS)), mag, name=name)


def test_averaged_control_is_the_entrywise_mean_and_keeps_a_shared_amount_profile(cs):
    from hba_augment.search import pbt

    rng = np.random.default_rng(0)
    targets = [(0.1, 0.2), (0.3, 0.5), (0.6, 0.4)]
    # Two searches that followed one profile: different mixes, the same amount at every entry.
    sides = []
    for name in ("a", "b"):
        raw = _random_schedule(rng, 3, name)
        held = [pbt.hold_amount(raw.prob[e], raw.mag[e], targets[e]) for e in range(3)]
        sides.append(Schedule(np.stack([h[0] for h in held]), np.stack([h[1] for h in held]), name=name))
    mean = cs.averaged_schedule(sides)
    assert mean.name == "a-avg2" and mean.epochs == 3 and mean.provenance["averaged"] == ["a", "b"]
    np.testing.assert_allclose(mean.prob, (sides[0].prob + sides[1].prob) / 2)
    has = np.array([o.has_magnitude for o in OPS])
    np.testing.assert_allclose(mean.mag[:, :, has], (sides[0].mag[:, :, has] + sides[1].mag[:, :, has]) / 2)
    assert np.isnan(mean.mag[:, :, ~has]).all()
    for e, target in enumerate(targets):  # the profile is kept: only the mix differs
        np.testing.assert_allclose(pbt.amount(mean.prob[e], mean.mag[e]), target, atol=1e-9)


def test_averaged_control_refuses_one_schedule_and_mismatched_ones(cs):
    rng = np.random.default_rng(1)
    a, longer = _random_schedule(rng, 3, "a"), _random_schedule(rng, 4, "longer")
    with pytest.raises(ValueError, match="at least two schedules"):
        cs.averaged_schedule([a])
    with pytest.raises(TypeError, match="list or tuple of Schedule"):
        cs.averaged_schedule([a, a.prob])
    with pytest.raises(ValueError, match="longer 4"):
        cs.averaged_schedule([a, longer])
    other = Schedule(a.prob, a.mag, name="k1", count_probs=[0.0, 1.0])
    with pytest.raises(ValueError, match="count_probs"):
        cs.averaged_schedule([a, other])


@pytest.mark.skipif(not _PBA_LOG.exists(), reason=f"PBA reference log not found at {_PBA_LOG}")
def test_average_option_writes_the_mean_of_the_learned_schedule_and_the_others(cs, tmp_path):
    rng = np.random.default_rng(2)
    paths = []
    for name in ("a", "b", "c"):
        paths.append(tmp_path / f"{name}.json")
        _random_schedule(rng, 5, name).save(paths[-1])
    out = tmp_path / "out"
    assert cs.main(["--learned", str(paths[0]), "--average", str(paths[1]), str(paths[2]), "--out", str(out)]) == 0
    written = Schedule.load(out / "averaged.json")
    expected = np.mean([Schedule.load(p).prob for p in paths], axis=0)
    assert written.name == "a-avg3"
    np.testing.assert_allclose(written.prob, expected, rtol=1e-5)  # the file keeps 6 significant digits
    assert cs.main(["--learned", str(paths[0]), "--out", str(tmp_path / "plain")]) == 0
    assert not (tmp_path / "plain" / "averaged.json").exists()


def test_mean_strength_weighs_each_slot_s_distance_from_identity_by_its_probability(cs):
    from hba_augment.functional import OPS

    names = [o.name for o in OPS]
    prob = np.zeros((2, 2, NUM_OPS))
    mag = np.array([[o.identity if o.has_magnitude else np.nan for o in OPS]] * 2)[None].repeat(2, axis=0)
    prob[1, 0, names.index("Rotate")], mag[1, 0, names.index("Rotate")] = 0.5, 15.0  # half of 30 degrees
    prob[1, 1, names.index("Contrast")], mag[1, 1, names.index("Contrast")] = 0.25, 0.1  # factor 0.1: strongest
    prob[1, 1, names.index("Equalize")] = 1.0  # no magnitude: left out
    strength = cs.mean_strength(Schedule(prob, mag, name="s"))
    assert np.isnan(strength[0]) and strength[1] == pytest.approx((0.5 * 0.5 + 0.25 * 1.0) / 0.75)


def test_amount_matched_control_takes_the_reference_s_amount_and_keeps_its_own_mix(cs):
    rng = np.random.default_rng(1)
    low = np.array([o.low if o.has_magnitude else np.nan for o in OPS])
    high = np.array([o.high if o.has_magnitude else np.nan for o in OPS])
    identity = np.array([o.identity if o.has_magnitude else np.nan for o in OPS])

    def random_schedule(name: str, p_scale: float, m_scale: float) -> Schedule:
        prob = p_scale * rng.random((4, 2, NUM_OPS))
        mag = np.clip(identity + m_scale * rng.uniform(-1, 1, (4, 2, NUM_OPS)) * (high - low), low, high)
        return Schedule(prob, mag, name=name)

    # A light schedule matched to a heavier one (more ops, stronger), and a heavy one matched to a light one.
    for learned, reference in ((random_schedule("learned", 0.02, 0.05), random_schedule("reference", 0.3, 0.3)),
                               (random_schedule("heavy", 0.5, 0.4), random_schedule("light", 0.01, 0.02))):
        matched = cs.amount_matched_schedule(learned, reference)
        assert matched.name == f"{learned.name}-amount-of-{reference.name}"
        np.testing.assert_allclose(cs.applied_ops(matched), cs.applied_ops(reference), rtol=0,
                                   atol=cs.OPS_TOLERANCE * 1.0001)
        np.testing.assert_allclose(cs.mean_strength(matched), cs.mean_strength(reference), rtol=1e-6)
        assert not np.allclose(cs.applied_ops(learned), cs.applied_ops(reference), rtol=1e-2)
        # Its own mix: one factor an entry on the probabilities (none reaches 1 here), and on the distances
        # from identity of the magnitudes that were not clipped.
        ratio = matched.prob / learned.prob
        np.testing.assert_allclose(ratio, ratio[:, :1, :1].repeat(2, 1).repeat(NUM_OPS, 2), rtol=1e-9)
        with np.errstate(invalid="ignore", divide="ignore"):  # NaN for the ops without a magnitude
            moved = (matched.mag - identity) / (learned.mag - identity)
        inside = (matched.mag > low) & (matched.mag < high) & np.isfinite(moved)
        for e in range(4):
            assert np.ptp(moved[e][inside[e]]) < 1e-9
        assert np.isnan(matched.mag[:, :, OP_NAMES.index("Equalize")]).all()
    # Matched to itself, a schedule is itself, also where its ops applied saturate (the shipped cifar10's
    # later entries; every 20th, for time): a factor that pushes every slot towards 1 would give nearly the same number, another mix.
    full = Schedule.load(pretrained_path("cifar10"))
    shipped = Schedule(full.prob[::20], full.mag[::20], name="cifar10-every-20th", count_probs=full.count_probs)
    assert (cs.applied_ops(shipped) > 1.29).sum() >= 5  # half of these entries saturate
    same = cs.amount_matched_schedule(shipped, shipped)
    np.testing.assert_array_equal(same.prob, shipped.prob)
    np.testing.assert_allclose(same.mag, shipped.mag, rtol=1e-6)
    with pytest.raises(ValueError, match="entries"):
        cs.amount_matched_schedule(learned, Schedule(reference.prob[:2], reference.mag[:2], name="short"))


def test_amount_matched_control_reaches_what_it_can_when_the_target_is_out_of_reach(cs):
    low = np.array([o.low if o.has_magnitude else np.nan for o in OPS])
    high = np.array([o.high if o.has_magnitude else np.nan for o in OPS])
    prob = np.zeros((1, 2, NUM_OPS))
    prob[0, 0, OP_NAMES.index("Rotate")] = 0.1  # one slot: its probability caps at 1
    learned = Schedule(prob, np.broadcast_to(low + 0.1 * (high - low), (1, 2, NUM_OPS)), name="one")
    reference = Schedule(np.full((1, 2, NUM_OPS), 0.9), np.broadcast_to(high, (1, 2, NUM_OPS)), name="all")
    matched = cs.amount_matched_schedule(learned, reference)
    assert matched.prob[0, 0, OP_NAMES.index("Rotate")] == 1.0 and matched.prob.sum() == 1.0
    assert matched.mag[0, 0, OP_NAMES.index("Rotate")] == pytest.approx(30.0)  # the range's end
    assert cs.applied_ops(matched)[0] < cs.applied_ops(reference)[0]
    # Within reach only with the top slot capped: it stays at 1 while the others keep growing.
    prob[0, 1, OP_NAMES.index("Solarize")] = 0.01
    two = Schedule(prob, learned.mag, name="two")
    matched = cs.amount_matched_schedule(two, Schedule(np.full((1, 2, NUM_OPS), 0.05), reference.mag, name="r"))
    assert matched.prob[0, 0, OP_NAMES.index("Rotate")] == 1.0 and 0.1 < matched.prob[0, 1, OP_NAMES.index("Solarize")] < 1
    np.testing.assert_allclose(cs.applied_ops(matched), cs.applied_ops(Schedule(np.full((1, 2, NUM_OPS), 0.05),
                                                                                 reference.mag, name="r")),
                               rtol=0, atol=cs.OPS_TOLERANCE * 1.0001)


def test_op_spread_is_one_for_all_ops_alike_and_zero_for_one_op(cs):
    from hba_augment.functional import OPS

    mag = np.broadcast_to([o.low if o.has_magnitude else np.nan for o in OPS], (3, 2, NUM_OPS))
    prob = np.zeros((3, 2, NUM_OPS))
    prob[1] = 0.3
    prob[2, 0, 4] = 0.8
    spread = cs.op_spread(Schedule(prob, mag, name="s"))
    assert np.isnan(spread[0]) and spread[1] == pytest.approx(1.0) and spread[2] == pytest.approx(0.0)


def test_op_shares_sum_to_one_and_follow_the_applied_probabilities(cs):
    mag = np.broadcast_to([o.low if o.has_magnitude else np.nan for o in OPS], (3, 2, NUM_OPS))
    prob = np.zeros((3, 2, NUM_OPS))
    prob[1] = 0.3
    prob[2, 0, 4] = 0.8  # one op alone
    prob[2, 1, 4] = 0.8  # its second copy: still that op's whole share
    schedule = Schedule(prob, mag, name="s")
    shares = cs.op_shares(schedule)
    assert shares.shape == (3, NUM_OPS) and np.isnan(shares[0]).all()
    np.testing.assert_allclose(shares[1], 1 / NUM_OPS)  # all ops alike
    assert shares[2, 4] == pytest.approx(1.0) and shares[2].sum() == pytest.approx(1.0)
    # A heavier op gets the larger share (the count distribution caps the ops applied, not the order).
    prob[1, 0, 14] = 0.9
    heavier = cs.op_shares(Schedule(prob, mag, name="s"))[1]
    assert heavier[14] == heavier.max() > 1 / NUM_OPS > heavier[0] and heavier.sum() == pytest.approx(1.0)


def test_profile_prints_op_shares_only_with_profile(cs, tmp_path, capsys):
    mag = np.broadcast_to([o.low if o.has_magnitude else np.nan for o in OPS], (4, 2, NUM_OPS))
    prob = np.full((4, 2, NUM_OPS), 0.2)
    prob[2:, :, OP_NAMES.index("Cutout")] = 1.0
    path = tmp_path / "s.json"
    Schedule(prob, mag, name="s").save(path)
    assert cs.main(["--learned", str(path), "--profile", "2", "--ops"]) == 0
    out = capsys.readouterr().out
    assert "by part: 0-1 2-3" in out
    cutout = next(line for line in out.splitlines() if line.strip().startswith("Cutout:")).split()[1:]
    assert float(cutout[0]) == pytest.approx(1 / NUM_OPS, abs=1e-3) and float(cutout[1]) > 1 / NUM_OPS
    with pytest.raises(SystemExit):
        cs.main(["--learned", str(path), "--ops", "--out", str(tmp_path / "o")])
    assert "--ops goes with --profile" in capsys.readouterr().err


def test_policy_items_and_labels(pq):
    assert pq._policy_arg("hba", "cifar10") == "hba:cifar10"
    assert pq._policy_arg("pba=hba:x/pba.json", "cifar10") == "hba:x/pba.json"
    assert pq._label("pba=hba:x/pba.json", "cifar10") == "pba"
    assert pq._label("randaugment", "cifar10") == "randaugment"
    with pytest.raises(Exception, match="unknown policies"):
        pq._policies("baseline,flip")


def test_run_records_are_reused_by_key_and_schedule_content(pq, tmp_path):
    sched = tmp_path / "s.json"
    sched.write_text("{}")
    cmd = ["python", "-m", "hba_augment", "train", "--data-dir", "/a/b", "--policy", f"hba:{sched}",
           "--seed", "0", "--out", "/x/y"]
    key = pq._run_key(cmd)
    assert "/a/b" not in key and "/x/y" not in key  # machine-specific paths are not part of a run's identity
    moved = [*cmd[:5], "/elsewhere", *cmd[6:]]
    assert pq._run_key(moved) == key
    # Speed-only flags train the same run: a record made without them is reused with them.
    assert pq._run_key([*cmd, "--cuda-graphs", "--compile"]) == key
    assert pq._run_key([*cmd, "--checkpoint-every", "0"]) == key  # how often a checkpoint is written
    assert pq._run_key([*cmd, "--threads", "2"]) == key  # how many threads share the work
    assert pq._run_key([*cmd, "--amp"]) != key
    sched.write_text('{"changed": 1}')
    assert pq._run_key(cmd) != key  # a changed schedule is trained again
    record = tmp_path / "rec.json"
    record.write_text(json.dumps({"key": pq._run_key(cmd), "wall_seconds": 1.0, "result": {"test_error": 12.5}}))
    run = pq._run_one(cmd, tmp_path / "run", record, {}, "label")  # reused: nothing is launched
    assert run == {"result": {"test_error": 12.5}, "wall_seconds": 1.0, "reused": True}
    # A record written while --threads was still part of a key is the same run on any number of threads.
    old_key = [*pq._run_key(cmd)[:-1], "--threads", "1", pq._run_key(cmd)[-1]]
    record.write_text(json.dumps({"key": old_key, "wall_seconds": 1.0, "result": {"test_error": 12.5}}))
    assert pq._run_one([*cmd, "--threads", "2"], tmp_path / "run", record, {}, "label")["reused"]
    record.write_text(json.dumps({"key": [*old_key[:-1], "--amp", old_key[-1]], "wall_seconds": 1.0,
                                  "result": {"test_error": 12.5}}))
    assert pq._reused(pq._run_key(cmd), record) is None  # another run's record (with --amp) is not reused


def test_a_new_run_record_names_the_commit_it_started_from(pq, tmp_path):
    # A stand-in trainer: writes the result file where --out says, as `hba-augment train` does.
    trainer = ("import json, pathlib, sys; out = pathlib.Path(sys.argv[sys.argv.index('--out') + 1]); "
               "(out / 'result.json').write_text(json.dumps({'test_error': 7.5}))")
    cmd = [sys.executable, "-c", trainer, "--policy", "none", "--seed", "0", "--out", str(tmp_path / "run")]
    record = tmp_path / "results" / "none-seed0.json"
    run = pq._run_one(cmd, tmp_path / "run", record, dict(os.environ), "none seed 0")
    assert run["result"] == {"test_error": 7.5} and not run["reused"]
    saved = json.loads(record.read_text())
    assert saved["key"] == pq._run_key(cmd)
    assert saved["code"]["commit"] == pq.git("rev-parse", "HEAD")
    assert saved["code"]["commit"] is None or len(saved["code"]["commit"]) == 40
    assert isinstance(saved["code"]["package_modified"], bool)
    assert pq._run_one(cmd, tmp_path / "run", record, {}, "none seed 0")["reused"]  # the record is reused


def test_report_only_tables_the_finished_runs_and_marks_the_rest(pq, tmp_path):
    argv = ["--policies", "none,baseline", "--seeds", "0,1", "--epochs", "3", "--out", str(tmp_path)]
    args = pq.build_parser().parse_args(argv)
    config = {"batch_size": 128, "lr": 0.1, "lr_schedule": "cosine", "wd": 5e-4, "package_version": "x",
              "torchvision_version": "y"}
    errors = {("none", 0): 40.0, ("none", 1): 42.0, ("baseline", 1): 30.0}  # baseline seed 0 not done yet
    for policy, _, seed, run_out, cmd in pq._jobs(args, tmp_path / "runs"):
        if (policy, seed) in errors:
            result = {"test_error": errors[(policy, seed)], "test_loss": 1.0, "wall_seconds": 9.0, "config": config,
                      "train_images": 10000, "test_images": 10000}
            record = tmp_path / "results" / f"{run_out.name}.json"
            record.parent.mkdir(exist_ok=True)
            # This invocation's 2 s (a resumed run's last leg) against the trainer's 9 s over all sessions.
            record.write_text(json.dumps({"key": pq._run_key(cmd), "wall_seconds": 2.0, "result": result}))
    # A record of other settings is not this table's run.
    (tmp_path / "results" / "baseline-seed0.json").write_text(json.dumps({"key": ["other"], "result": {}}))

    assert pq.main([*argv, "--report-only"]) == 0
    assert not (tmp_path / "runs").exists()  # nothing was trained
    report = json.loads((tmp_path / "policy_quality.json").read_text())
    assert (report["runs_done"], report["runs_planned"]) == (3, 4)
    rows = {row["policy"]: row for row in report["rows"]}
    assert rows["none"]["test_error_mean"] == 41.0 and rows["none"]["seeds"] == [0, 1]
    assert rows["baseline"]["test_errors"] == [30.0] and rows["baseline"]["seeds"] == [1]
    table = (tmp_path / "policy_quality.md").read_text()
    assert "| none | 41.00 ± 1.41 | 40.00, 42.00 | 1.0000 | 9 |" in table  # the trainer's wall time
    assert "| baseline | 30.00 | -, 30.00 |" in table
    assert "3 of 4 runs done" in table

    for record in (tmp_path / "results").iterdir():
        record.unlink()
    with pytest.raises(SystemExit, match="no finished run"):
        pq.main([*argv, "--report-only"])


@pytest.mark.parametrize(("order", "expected"), [
    ("policies", ["none seed 0", "none seed 1", "baseline seed 0", "baseline seed 1"]),
    ("seeds", ["none seed 0", "baseline seed 0", "none seed 1", "baseline seed 1"]),
])
def test_order_says_which_runs_start_first(pq, tmp_path, monkeypatch, order, expected):
    """``--order seeds`` starts every policy's first seed before any second one (a CPU campaign's session
    that ends early leaves pairs of seeds finished); the table keeps the policies' order either way."""
    started = []
    config = {"batch_size": 128, "lr": 0.1, "lr_schedule": "cosine", "wd": 5e-4, "package_version": "x",
              "torchvision_version": "y"}

    def fake_group(cmds, outs, records, env, labels, timeout=None, fuse=False):
        started.extend(labels)
        return [{"result": {"test_error": 10.0, "test_loss": 1.0, "wall_seconds": 1.0, "config": config,
                            "train_images": 64, "test_images": 64}, "wall_seconds": 1.0, "reused": False}
                for _ in cmds]

    monkeypatch.setattr(pq, "_run_group", fake_group)
    argv = ["--policies", "none,baseline", "--seeds", "0,1", "--epochs", "1", "--jobs", "1", "--order", order,
            "--out", str(tmp_path)]
    assert pq.main(argv) == 0
    assert started == expected
    rows = json.loads((tmp_path / "policy_quality.json").read_text())["rows"]
    assert [row["policy"] for row in rows] == ["none", "baseline"]


# ------------------------------------------------------------------------------ search_ablation.py
SEARCH_KEYS = ("model", "strategy", "epochs", "train_images", "val_images", "batch_size", "lr", "lr_schedule",
               "wd", "hparam_lr", "sigma", "t_train", "t_val", "val_bn", "init", "hyper_input", "seed", "preset",
               "dataset")


def _search_settings(cmd: list[str]) -> dict:
    """What ``hba-augment search <cmd>`` would search with, in the shipped schedule's provenance keys."""
    from hba_augment.search.cli import build_parser, config_from_args

    config = config_from_args(build_parser().parse_args(cmd), "cpu")
    values = {**vars(config), "train_images": config.train_size, "val_images": config.val_size}
    return {k: values[k] for k in SEARCH_KEYS}


def test_every_ablation_changes_exactly_its_setting_of_the_shipped_search():
    ablation = _load("search_ablation")
    try:
        shipped = Schedule.load(pretrained_path("cifar10")).provenance
        args = ablation.build_parser().parse_args([])
        for variant, extra in ablation.VARIANTS.items():
            cmd = ablation.search_command(variant, args, Path("/tmp/x"))
            settings = _search_settings(cmd[cmd.index("search") + 1:])
            # The shipped search predates val_bn, init and hyper_input: it ran with their defaults.
            was = {**shipped, "epochs": shipped["search_epochs"], "val_bn": shipped.get("val_bn", "batch"),
                   "init": shipped.get("init", "paper"), "hyper_input": shipped.get("hyper_input", "hparams")}
            changed = {k for k in SEARCH_KEYS if settings[k] != was[k]}
            flag = extra[0].removeprefix("--").replace("-", "_")
            assert changed == {flag}, (variant, changed)
            assert str(settings[flag]) == extra[1] or settings[flag] == float(extra[1])
    finally:
        sys.modules.pop("search_ablation", None)
        sys.modules.pop("policy_quality", None)


def test_every_ablation_reference_is_a_policy_that_exists(monkeypatch):
    ablation = _load("search_ablation")
    pq = ablation.policy_quality
    try:
        monkeypatch.chdir(ablation.REPO)  # the references' schedule paths are relative to the repository
        for name, item in ablation.REFERENCES.items():
            assert pq._label(item, "cifar10") == name, (name, item)
            if pq._base_policy(item) == "hba":
                pq._check_hba(pq._policy_arg(item, "cifar10")[4:])  # SystemExit if it cannot load
    finally:
        sys.modules.pop("search_ablation", None)
        sys.modules.pop("policy_quality", None)


# ------------------------------------------------------------------------ augmentation_strength.py
def test_strength_measure_on_known_transforms(cifar_images):
    strength = _load("augmentation_strength")
    try:
        images = cifar_images[:16]
        assert strength.measure(torch.nn.Identity(), images, 0) == (0.0, 1.0)
        inverted = (255 - images.float() - images.float()).abs().mean().item()
        assert strength.measure(lambda x: 255 - x, images, 0) == (pytest.approx(inverted), 0.0)
        # An HBA schedule follows the epoch, torchvision's policies do not.
        assert strength._transform("hba:cifar10", 100)[1] and not strength._transform("randaugment", 100)[1]
        with pytest.raises(SystemExit, match="unknown policy 'mixup'"):
            strength._transform("mixup", 100)
    finally:
        sys.modules.pop("augmentation_strength", None)


def test_strength_places_a_search_among_its_twins(data_dir, tmp_path, capsys):
    """``--twins-of``: the search and its twin nulls (the schedules pbt_null writes), each measured, and where
    the search sits among them."""
    archive = data_dir / "cifar-10-jpeg.tar.gz"
    if not archive.is_file():
        pytest.skip(f"CIFAR-10 JPEG copy not found at {archive}")
    strength = _load("augmentation_strength")
    try:
        folder = _BENCH / "results/proxy_population/searches/population-ta-held"
        out = tmp_path / "strength.md"
        assert strength.main(["--data-dir", str(archive), "--images", "20", "--at", "0,99", "--twins-of",
                              str(folder), "--count", "2", "--out", str(out)]) == 0
        rows = [line.split(" | ")[0].strip("| ") for line in out.read_text().splitlines() if line.startswith("| ")][1:]
        assert rows == ["population-ta-held", "twin-0", "twin-1"]
        assert "its 2 twins" in out.read_text() and "twins below the search" in capsys.readouterr().out
        twin = sys.modules["pbt_null"].twin_null_schedule(folder, 1)
        assert strength._transform(twin, 100)[1]
    finally:
        sys.modules.pop("augmentation_strength", None)


# ------------------------------------------------------------------------------ hypergradient signal
@pytest.fixture(scope="module")
def hs():
    yield _load("hypergradient_signal")
    sys.modules.pop("hypergradient_signal", None)


def _metrics_file(path: Path, grads: np.ndarray) -> Path:
    path.write_text("".join(json.dumps({"epoch": e, "hypergrad_mean": g.tolist()}) + "\n"
                            for e, g in enumerate(grads)))
    return path


def test_hypergradient_signal_tells_a_random_walk_from_a_push(hs, tmp_path):
    rng = np.random.default_rng(0)
    noise = rng.standard_normal((400, 54))
    windows = hs.window_statistics(hs.load_gradients(_metrics_file(tmp_path / "noise.jsonl", noise)), 20)
    assert len(windows) == 20 and windows[0]["first_epoch"] == 0 and windows[-1]["last_epoch"] == 399
    assert math.isnan(windows[0]["sign_kept"])
    # Noise: P(|t| > 2) = 0.06 with 19 degrees of freedom, and a sign kept half of the time.
    assert np.mean([w["t_over_2_fraction"] for w in windows]) == pytest.approx(0.06, abs=0.02)
    assert np.mean([w["sign_kept"] for w in windows[1:]]) == pytest.approx(0.5, abs=0.05)
    # A push of a fifth of the noise on half the hyperparameters, steady over the run: each window of 20
    # barely sees it, the whole run does, and its sign lasts.
    push = noise + np.where(np.arange(54) < 27, -0.2, 0.0)
    g = hs.load_gradients(_metrics_file(tmp_path / "push.jsonl", push))
    t = hs.whole_run_t(g)
    assert (t[:27] < -2).mean() > 0.9 and (np.abs(t[27:]) > 2).mean() < 0.15
    # P(a window's pushed mean is negative) = Phi(0.2 sqrt(20)) = 0.82, so a pushed sign is kept with
    # 0.82^2 + 0.18^2 = 0.70, and all 54 with (0.70 + 0.5) / 2 = 0.60 against noise's 0.5.
    kept = np.mean([w["sign_kept"] for w in hs.window_statistics(g, 20)[1:]])
    assert kept == pytest.approx(0.60, abs=0.04)
    text = hs.report(tmp_path / "push.jsonl", 20)
    assert "| 0-19 |" in text and "prob[0]." in text


def test_hypergradient_signal_compares_the_two_copies_of_each_op(hs):
    rng = np.random.default_rng(1)
    prob, mag = rng.standard_normal(15), rng.standard_normal(12)
    same = np.concatenate([prob, prob, mag, mag])
    assert hs.copy_agreement(same) == pytest.approx((1.0, 1.0))
    assert hs.copy_agreement(np.concatenate([prob, -prob, mag, -mag])) == pytest.approx((-1.0, -1.0))
    # Both copies of each probability pushed down (positive gradients) the same way, epoch by epoch; the
    # magnitudes' copies independent.
    p_epochs = prob + 3 + rng.standard_normal((20, 15))
    g = np.concatenate([p_epochs, p_epochs, rng.standard_normal((20, 24))], axis=1)
    row = hs.window_statistics(g, 20)[0]
    assert row["prob_t_mean"] > 5 and row["prob_copies_agree"] == pytest.approx(1.0)
    assert abs(row["mag_copies_agree"]) < 0.8


def test_hypergradient_signal_rejects_metrics_without_the_gradients(hs, tmp_path):
    old = tmp_path / "old.jsonl"
    old.write_text(json.dumps({"epoch": 0, "val_acc": 0.5}) + "\n")
    with pytest.raises(ValueError, match=r"old\.jsonl:1: no hypergrad_mean"):
        hs.load_gradients(old)
    with pytest.raises(ValueError, match="window must be at least 2"):
        hs.window_statistics(np.zeros((4, 54)), 1)
    with pytest.raises(SystemExit, match="no hypergrad_mean"):
        hs.main([str(old)])
