"""The population search (``--objective population``): PBA's explore and exploit steps, the lineage of the best
member, and whole tiny searches (command line, resume, determinism, processes)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pickle
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hba_augment import _runner
from hba_augment._space import MAGNITUDE_OPS, OP_RANGES
from hba_augment.cli import main
from hba_augment.datasets import load_dataset, reduced_split
from hba_augment.functional import OP_NAMES, OPS
from hba_augment.schedule import Schedule
from hba_augment.search import pbt
from hba_augment.search.loop import SearchConfig
from hba_augment.search.population import MEMBERS_FOLDER, PopulationConfig, run_population_search
from hba_augment.search.priors import prior_policy

pytestmark = pytest.mark.usefixtures("torch_single_thread")

_MAG = list(MAGNITUDE_OPS)
_LOW = np.array([OP_RANGES[k].low for k in _MAG])
_HIGH = np.array([OP_RANGES[k].high for k in _MAG])


def _fractions(prob: np.ndarray, mag: np.ndarray) -> np.ndarray:
    """The 54 values of a policy as fractions of their ranges."""
    return np.concatenate([prob.ravel(), ((mag[:, _MAG] - _LOW) / (_HIGH - _LOW)).ravel()])


# -------------------------------------------------------------------------------------------- explore
@settings(max_examples=50, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(["paper", "identity", "uniform:0.5", "trivialaugment"]))
def test_explore_stays_in_range_and_moves_by_levels(seed, init):
    prior = prior_policy(init)
    prob, mag = prior.prob.copy(), prior.mag.copy()
    new_prob, new_mag = pbt.explore(prob, mag, np.random.default_rng(seed), resample_prob=0.0)
    np.testing.assert_array_equal(prob, prior.prob)  # the inputs are not modified
    np.testing.assert_array_equal(mag, prior.mag)
    assert new_prob.shape == new_mag.shape == (2, 15)
    assert np.all((new_prob >= 0) & (new_prob <= 1))
    assert np.all((new_mag[:, _MAG] >= _LOW) & (new_mag[:, _MAG] <= _HIGH))
    assert np.isnan(new_mag[:, [k for k in range(15) if k not in _MAG]]).all()
    # Without resampling every value moves by 0-3 tenths of its range, or less where it hit an end.
    before, after = _fractions(prob, mag), _fractions(new_prob, new_mag)
    steps = (after - before) * 10
    at_end = np.isclose(after, 0) | np.isclose(after, 1)
    assert np.all(np.abs(steps) <= 3 + 1e-9)
    assert np.all(at_end | np.isclose(steps, np.round(steps)))


def test_explore_resamples_a_fifth_and_shifts_the_rest_uniformly():
    rng = np.random.default_rng(0)
    prior = prior_policy("uniform:0.45")  # every value at 0.45: no shift reaches an end of its range
    before = _fractions(prior.prob, prior.mag)
    moves = np.stack([_fractions(*pbt.explore(prior.prob, prior.mag, rng)) - before for _ in range(400)])
    steps = moves * 10
    on_grid = np.isclose(steps, np.round(steps), atol=1e-9) & (np.abs(steps) <= 3 + 1e-9)
    # A resampled value lands on a level with probability ~0, and on the shift grid only by chance.
    assert 0.18 < 1 - on_grid.mean() < 0.22
    k = np.abs(np.round(steps[on_grid]))
    counts = np.bincount(k.astype(int), minlength=4)
    # 0 is reached by a shift of 0 (1/4) and is the only level the two directions share.
    np.testing.assert_allclose(counts / counts.sum(), [0.25, 0.25, 0.25, 0.25], atol=0.02)
    shifted = steps[on_grid & (np.abs(steps) > 0.5)]
    assert 0.47 < (shifted > 0).mean() < 0.53  # both directions
    # Resampled values are uniform over the range.
    resampled = (before + moves)[~on_grid]
    assert 0.45 < resampled.mean() < 0.55 and resampled.min() < 0.05 and resampled.max() > 0.95


def test_explore_is_seeded():
    prior = prior_policy("trivialaugment")
    a = pbt.explore(prior.prob, prior.mag, np.random.default_rng(7))
    b = pbt.explore(prior.prob, prior.mag, np.random.default_rng(7))
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


@pytest.mark.parametrize("change, match", [
    (lambda p, m: (p[:1], m), "shape"),
    (lambda p, m: (p + 1, m), "probabilities must lie in"),
    (lambda p, m: (p, m * 100), "magnitudes must lie in"),
])
def test_explore_refuses_bad_policies(change, match):
    prior = prior_policy("paper")
    with pytest.raises(ValueError, match=match):
        pbt.explore(*change(prior.prob, prior.mag), np.random.default_rng(0))


@pytest.mark.parametrize("kwargs, match", [
    ({"resample_prob": 1.5}, "resample_prob"), ({"max_shift": -1}, "max_shift"), ({"levels": 0}, "levels"),
])
def test_explore_refuses_bad_settings(kwargs, match):
    prior = prior_policy("paper")
    with pytest.raises(ValueError, match=match):
        pbt.explore(prior.prob, prior.mag, np.random.default_rng(0), **kwargs)


# ------------------------------------------------------------------------------------------ selection
def test_truncation_selection_copies_the_top_quarter_into_the_bottom_quarter():
    scores = [0.50, 0.80, 0.10, 0.70, 0.30, 0.90, 0.20, 0.60]  # top: 5, 1; bottom: 6, 2
    donors = set()
    for seed in range(50):
        copies = pbt.truncation_selection(scores, np.random.default_rng(seed))
        assert [loser for loser, _ in copies] == [2, 6]
        assert {donor for _, donor in copies} <= {1, 5}
        donors.update(donor for _, donor in copies)
    assert donors == {1, 5}  # each top member is drawn


@pytest.mark.parametrize("scores, losers, top", [
    ([0.2, 0.9], [0], {1}),  # 2 members: the worse copies the better
    ([0.4, 0.1, 0.3, 0.2], [1], {0}),  # 4: one each
    ([0.5, float("nan"), 0.5, 0.5, 0.1], [1, 4], {0, 2}),  # NaN ranks last; ties go to the lower index
    ([0.3], [], set()),
])
def test_truncation_selection_sizes_ties_and_nan(scores, losers, top):
    copies = pbt.truncation_selection(scores, np.random.default_rng(0))
    assert [loser for loser, _ in copies] == losers
    assert {donor for _, donor in copies} <= top


def test_truncation_selection_refuses_bad_quantiles():
    for quantile in (0.0, 0.6, "x"):
        with pytest.raises(ValueError, match="quantile"):
            pbt.truncation_selection([0.1, 0.2], np.random.default_rng(0), quantile)


# -------------------------------------------------------------------------------------------- lineage
def test_lineage_follows_the_copies_back():
    # Round 1: member 2 copied 0. Round 2: member 1 copied 2. Round 3: member 3 copied 1.
    parents = [[0, 1, 2, 3], [0, 1, 0, 3], [0, 2, 2, 3], [0, 1, 2, 1]]
    assert pbt.lineage(parents, 3) == [0, 2, 1, 3]
    assert pbt.lineage(parents, 0) == [0, 0, 0, 0]
    assert pbt.lineage(parents, 2) == [0, 2, 2, 2]
    assert pbt.lineage(parents[:1], 1) == [1]
    with pytest.raises(ValueError, match="best"):
        pbt.lineage(parents, 4)
    with pytest.raises(ValueError, match=r"parents\[1\]"):
        pbt.lineage([[0, 1], [0, 5]], 0)
    with pytest.raises(ValueError, match="at least one round"):
        pbt.lineage([], 0)


def test_rounds_scale_pbas_interval():
    assert pbt.default_exploit_every(200) == 3
    assert pbt.default_exploit_every(20) == 1
    assert pbt.default_exploit_every(1000) == 15
    assert pbt.round_starts(7, 3) == [0, 3, 6]
    with pytest.raises(ValueError, match="every"):
        pbt.round_starts(7, 0)


def test_ranking_is_the_one_order_of_members():
    """Best first, NaN last, ties to the lower index: the order selection and the final best member share."""
    assert pbt.ranking([0.5, float("nan"), 0.7, 0.5, 0.9]) == [4, 2, 0, 3, 1]
    assert pbt.ranking([0.3, 0.3]) == [0, 1]
    with pytest.raises(ValueError, match="1-D"):
        pbt.ranking([[0.1, 0.2]])


@pytest.mark.parametrize(("setting", "value", "match"), [
    ("resample_prob", 1.5, "resample_prob"), ("max_shift", -1, "max_shift"), ("levels", 0, "levels"),
    ("quantile", 0.6, "quantile"), ("max_shift", True, "max_shift"), ("member_start", "spread", "member_start"),
    ("score_ema", 1.0, "score_ema"), ("score_ema", 0, "score_ema"), ("score_ema", True, "score_ema"),
    ("amount", "fixed", "amount must be one of"), ("resample", "near", "resample must be one of"),
    ("vary", "probabilities", "vary must be one of"),
])
def test_bad_population_settings_are_named(setting, value, match):
    with pytest.raises(ValueError, match=match):
        pbt.check_settings(**{setting: value})


# ------------------------------------------------------------------------------------- resample to the prior
def test_a_resample_to_the_prior_makes_the_uniform_resamples_draws_and_puts_the_priors_values():
    """``anchor``: where the uniform explore resampled a value, the anchored one puts the prior's there; every
    other value is the uniform explore's shift, and both consume the same draws."""
    prior = prior_policy("trivialaugment")
    anchor = pbt.resample_anchor("prior", prior_policy("trivialaugment"))
    np.testing.assert_array_equal(anchor[0], prior.prob)
    np.testing.assert_array_equal(anchor[1], prior.mag)
    assert pbt.resample_anchor("uniform", prior_policy("trivialaugment")) is None
    policy = pbt.explore(prior.prob, prior.mag, np.random.default_rng(0), max_shift=0, resample_prob=1.0)  # far away
    uniform_rng, anchored_rng = np.random.default_rng(5), np.random.default_rng(5)
    uniform = pbt.explore(*policy, uniform_rng, resample_prob=0.5)
    anchored = pbt.explore(*policy, anchored_rng, resample_prob=0.5, anchor=anchor)
    assert uniform_rng.random() == anchored_rng.random()
    for got, free, at_prior in ((anchored[0], uniform[0], prior.prob),
                                (pbt.mag_fractions(anchored[1]), pbt.mag_fractions(uniform[1]),
                                 pbt.mag_fractions(prior.mag))):
        differs = ~np.isclose(got, free)
        assert 0 < differs.sum() < got.size  # some values were resampled, not all
        np.testing.assert_allclose(got[differs], at_prior[differs])
    # Every value resampled: the prior itself; none: the uniform explore's shift.
    reset = pbt.explore(*policy, np.random.default_rng(1), resample_prob=1.0, anchor=anchor)
    np.testing.assert_allclose(reset[0], prior.prob)
    np.testing.assert_allclose(reset[1], prior.mag)
    shifted = pbt.explore(*policy, np.random.default_rng(1), resample_prob=0.0, anchor=anchor)
    expected = pbt.explore(*policy, np.random.default_rng(1), resample_prob=0.0)
    np.testing.assert_array_equal(shifted[0], expected[0])
    with pytest.raises(ValueError, match="resample must be one of"):
        pbt.resample_anchor("near", prior_policy("trivialaugment"))
    with pytest.raises(ValueError, match="shape"):
        pbt.explore(*policy, np.random.default_rng(1), anchor=(prior.prob[0], prior.mag))


# ------------------------------------------------------------------------------------------ magnitudes only
@given(seed=st.integers(0, 2**32 - 1), init=st.sampled_from(["paper", "uniform:0.3", "trivialaugment"]),
       hold=st.none() | st.tuples(st.floats(0.05, 0.95), st.floats(0.05, 0.95)))
@settings(max_examples=40, deadline=None)
def test_an_explore_of_magnitudes_only_keeps_the_probabilities_and_draws_as_one_of_all(seed, init, hold):
    """``vary="magnitudes"``: the probabilities stay the policy's (with ``hold``, shifted to it, as a held policy
    that explore did not touch), the magnitudes are those of ``vary="all"`` from the same stream, and both
    consume the same draws, so that a magnitudes-only search is paired with the full one of its seed."""
    prior = prior_policy(init)
    full_rng, mag_rng = np.random.default_rng(seed), np.random.default_rng(seed)
    full = pbt.explore(prior.prob, prior.mag, full_rng, hold=hold)
    only = pbt.explore(prior.prob, prior.mag, mag_rng, hold=hold, vary="magnitudes")
    assert full_rng.random() == mag_rng.random()
    if hold is None:
        np.testing.assert_array_equal(only[0], prior.prob)
        np.testing.assert_array_equal(only[1], full[1])
    else:
        kept = pbt.hold_amount(prior.prob, prior.mag, hold)
        np.testing.assert_allclose(only[0], kept[0], atol=1e-12)
        np.testing.assert_allclose(pbt.mag_fractions(only[1]), pbt.mag_fractions(full[1]), atol=1e-9)
        assert pbt.amount(*only) == pytest.approx(hold, abs=1e-12)


def test_a_walk_that_resamples_to_the_prior_stays_near_it():
    """The point of it: a chain of explores (a lineage with no selection) drifts away from a uniform resample's
    start, and far less from one that resamples to the prior; Invert, which the TrivialAugment-like prior all
    but leaves out, stays rare."""
    prior = prior_policy("trivialaugment")
    anchor = (prior.prob, prior.mag)
    invert = OP_NAMES.index("Invert")
    drift, inverts = {}, {}
    for name, kwargs in (("uniform", {}), ("prior", {"anchor": anchor})):
        rng, policy, distances, invert_p = np.random.default_rng(0), anchor, [], []
        for _ in range(400):
            policy = pbt.explore(*policy, rng, **kwargs)
            distances.append(np.abs(policy[0] - prior.prob).mean())
            invert_p.append(policy[0][:, invert].mean())
        drift[name], inverts[name] = np.mean(distances[50:]), np.mean(invert_p[50:])
    assert drift["prior"] < 0.7 * drift["uniform"]
    assert inverts["prior"] < 0.25 < inverts["uniform"]


# ------------------------------------------------------------------------------------------ held amount
_policies = st.tuples(st.integers(0, 2**32 - 1), st.sampled_from(["paper", "identity", "uniform:0.3", "trivialaugment"]),
                      st.integers(0, 5))


def _explored(seed: int, init: str, times: int) -> tuple[np.ndarray, np.ndarray]:
    """A policy ``times`` explore steps away from ``init`` (resampled values reach 0 and 1 often)."""
    prior, rng = prior_policy(init), np.random.default_rng(seed)
    prob, mag = prior.prob, prior.mag
    for _ in range(times):
        prob, mag = pbt.explore(prob, mag, rng, resample_prob=0.5)
    return prob, mag


@settings(max_examples=60, deadline=None)
@given(_policies, st.floats(0.01, 0.99), st.floats(0.01, 0.99))
def test_hold_amount_reaches_the_target_and_keeps_the_mix(policy, target_prob, target_mag):
    prob, mag = _explored(*policy)
    before = prob.copy(), mag.copy()
    held_prob, held_mag = pbt.hold_amount(prob, mag, (target_prob, target_mag))
    assert pbt.amount(held_prob, held_mag) == pytest.approx((target_prob, target_mag), abs=1e-12)
    assert np.array_equal(prob, before[0]) and np.array_equal(mag, before[1], equal_nan=True)
    frac, held_frac = pbt.mag_fractions(mag), pbt.mag_fractions(held_mag)
    assert np.all((held_prob >= 0) & (held_prob <= 1)) and np.all((held_frac >= 0) & (held_frac <= 1))
    assert np.isnan(held_mag[:, [k for k in range(15) if k not in MAGNITUDE_OPS]]).all()
    # One shift per group in logit space: a value clearly above another stays above it or level with it
    # (values that rounding tells apart by 1e-17 may come out in either order).
    for old, new in ((prob.ravel(), held_prob.ravel()), (frac.ravel(), held_frac.ravel())):
        i, j = np.triu_indices(len(old), 1)
        apart = np.abs(old[i] - old[j]) > 1e-9
        assert np.all(np.sign(old[i] - old[j])[apart] * (new[i] - new[j])[apart] >= -1e-12)


def test_a_policy_at_its_target_is_left_where_it_is():
    prior = prior_policy("uniform:0.3")
    prob, mag = pbt.hold_amount(prior.prob, prior.mag, pbt.amount(prior.prob, prior.mag))
    np.testing.assert_allclose(prob, prior.prob, atol=1e-9)
    np.testing.assert_allclose(mag, prior.mag, atol=1e-9)


@pytest.mark.parametrize("target", [(0.0, 0.5), (0.5, 1.0), (0.5,), "0.5", (0.5, True), (float("nan"), 0.5)])
def test_hold_amount_names_a_bad_target(target):
    prior = prior_policy("paper")
    with pytest.raises(ValueError, match="target must be a"):
        pbt.hold_amount(prior.prob, prior.mag, target)


def test_a_held_explore_makes_the_free_explores_draws_then_shifts_back():
    """Holding draws nothing: a held search makes the same explore draws as the free search of its seed."""
    prior = prior_policy("trivialaugment")
    targets = pbt.amount_targets("held", prior, [0, 3, 6])
    target = targets[0]
    assert targets == [target] * 3 and target == pytest.approx((prior.prob.mean(), 0.5))
    assert pbt.amount_targets("free", prior, [0, 3, 6]) is None
    free_rng, held_rng = np.random.default_rng(4), np.random.default_rng(4)
    free = pbt.explore(prior.prob, prior.mag, free_rng)
    held = pbt.explore(prior.prob, prior.mag, held_rng, hold=target)
    assert free_rng.random() == held_rng.random()
    expected = pbt.hold_amount(*free, target)
    np.testing.assert_array_equal(held[0], expected[0])
    np.testing.assert_array_equal(held[1], expected[1])
    assert pbt.amount(*free) != pytest.approx(target)  # the explore step alone moved the amount
    probs, mags = pbt.start_policies(prior.prob, prior.mag, 4, 3, hold=target)
    assert all(pbt.amount(p, m) == pytest.approx(target) for p, m in zip(probs, mags, strict=True))
    _, new_prob, new_mag, copies = pbt.exploit(probs, mags, [0.9, 0.1, 0.5, 0.6], 3, 7, hold=target)
    assert copies and all(pbt.amount(new_prob[loser], new_mag[loser]) == pytest.approx(target) for loser, _ in copies)
    with pytest.raises(ValueError, match="amount must be one of"):
        pbt.amount_targets("fixed", prior_policy("trivialaugment"), [0])


def _ramp(epochs: int, low: float = 0.1, high: float = 0.6) -> tuple[np.ndarray, np.ndarray]:
    """A profile: at epoch e every probability and magnitude fraction at a rising level, ``(epochs, 2, 15)``."""
    levels = np.linspace(low, high, epochs)
    policies = [prior_policy(f"uniform:{f}") for f in levels]
    return np.stack([p.prob for p in policies]), np.stack([p.mag for p in policies])


def test_amount_targets_follow_a_profile_at_each_rounds_first_epoch():
    prior = prior_policy("paper")
    prob, mag = _ramp(10)
    targets = pbt.amount_targets("profile", prior, [0, 3, 6, 9], (prob, mag))
    assert targets == [pytest.approx(pbt.amount(prob[e], mag[e])) for e in (0, 3, 6, 9)]
    assert targets[0] == pytest.approx((0.1, 0.1)) and targets[-1] == pytest.approx((0.6, 0.6))
    # A profile with no augmentation at all (--init zero's start) is kept a hair inside (0, 1).
    zero = prior_policy("zero")
    edge = pbt.amount_targets("profile", prior, [0], (zero.prob[None], zero.mag[None]))
    assert edge == [(pbt.AMOUNT_EDGE, pbt.AMOUNT_EDGE)]
    for mode, profile, match in (("profile", None, "amount 'profile' and no profile"),
                                 ("held", (prob, mag), "amount 'held' and a profile"),
                                 ("profile", (prob[:6], mag[:6]), "one \\(2, 15\\) policy per epoch of the search \\(10")):
        with pytest.raises(ValueError, match=match):
            pbt.amount_targets(mode, prior, [0, 3, 6, 9], profile)


def test_a_moving_hold_shifts_every_member_and_draws_what_a_fixed_one_draws():
    """``hold_all`` (``--amount profile``): the members that did not copy, and round 0's start, are shifted
    to the target too; the explore draws are those of the search without it."""
    prior = prior_policy("trivialaugment")
    target = (0.2, 0.3)
    probs, mags = pbt.start_policies(prior.prob, prior.mag, 4, 3, hold=target, hold_all=True)
    assert all(pbt.amount(p, m) == pytest.approx(target) for p, m in zip(probs, mags, strict=True))
    fixed = pbt.start_policies(prior.prob, prior.mag, 4, 3, hold=target)
    np.testing.assert_array_equal(probs[1:], fixed[0][1:])  # explored from the start, then held: the same
    np.testing.assert_array_equal(fixed[0][0], prior.prob)  # without hold_all the start is left as it is
    scores = [0.9, 0.1, 0.5, 0.6]
    moved = pbt.exploit(probs, mags, scores, 3, 7, hold=(0.4, 0.5), hold_all=True)
    plain = pbt.exploit(probs, mags, scores, 3, 7, hold=(0.4, 0.5))
    assert moved[0] == plain[0] and moved[3] == plain[3] and moved[3]
    assert all(pbt.amount(p, m) == pytest.approx((0.4, 0.5)) for p, m in zip(moved[1], moved[2], strict=True))
    losers = [loser for loser, _ in moved[3]]
    np.testing.assert_array_equal(moved[1][losers], plain[1][losers])
    np.testing.assert_array_equal(plain[1][0], probs[0])  # without hold_all a member that did not copy keeps its own


# --------------------------------------------------------------------------------------- whole searches
def _fake_cifar(root: Path, per_batch: int = 16) -> Path:
    """A CIFAR-10 folder of 5 x ``per_batch`` random images (class-coloured, so that there is something to
    learn), in the official pickle layout."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({"label_names": [f"c{i}" for i in range(10)]}, f)
    for b in range(1, 6):
        labels = rng.integers(0, 10, per_batch)
        data = rng.integers(0, 128, (per_batch, 3072)) + (labels[:, None] * 12)
        with open(folder / f"data_batch_{b}", "wb") as f:
            pickle.dump({"data": data.astype(np.uint8), "labels": labels.tolist()}, f)
    return root


def _config(cuda_graphs: bool = False, **kw) -> PopulationConfig:
    search = SearchConfig.from_preset("cifar10", **{"data_dir": "unused", "model": "wrn-10-1", "epochs": 4,
                                                    "train_size": 40, "val_size": 20, "batch_size": 20,
                                                    "init": "trivialaugment", "seed": 1,
                                                    "cuda_graphs": cuda_graphs})
    return PopulationConfig(**{"search": search, "population": 4, "exploit_every": 1, "population_procs": 0, **kw})


@pytest.fixture(scope="module")
def fake_data(tmp_path_factory):
    root = _fake_cifar(tmp_path_factory.mktemp("fake"))
    return reduced_split(load_dataset("cifar10", root), 40, 20, seed=1)


def _without_times(records):
    return [{k: v for k, v in r.items() if "seconds" not in k} for r in records]


def test_command_line_population_search_writes_a_schedule(tmp_path: Path, capsys):
    data_dir = _fake_cifar(tmp_path / "data")
    out = tmp_path / "run"
    args = ["search", "--objective", "population", "--population", "4", "--population-procs", "0",
            "--exploit-every", "1", "--dataset", "cifar10", "--data-dir", str(data_dir), "--model", "wrn-10-1",
            "--epochs", "5", "--train-size", "40", "--val-size", "20", "--batch-size", "20", "--init",
            "trivialaugment", "--seed", "2", "--device", "cpu", "--out", str(out), "--no-plot", "--no-progress"]
    start = time.perf_counter()
    assert main(args) == 0
    seconds = time.perf_counter() - start
    captured = capsys.readouterr()
    assert str(out / "schedule.json") in captured.out
    assert "round 5/5" in captured.err and "lineage of member" in captured.err
    schedule = Schedule.load(out / "schedule.json")
    prov = schedule.provenance
    assert schedule.epochs == 5 and schedule.name == "run"
    assert schedule.count_probs == pytest.approx((1 / 14, 13 / 14))
    assert (prov["objective"], prov["population"], prov["seed"], prov["exploit_every"], prov["rounds"]) == (
        "population", 4, 2, 1, 5)
    assert prov["command"].startswith("hba-augment search --objective population")
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["round"] for m in metrics] == list(range(5))
    assert all(len(m["val_acc"]) == 4 and len(m["copies"]) == 1 for m in metrics[:-1]) and metrics[-1]["copies"] == []
    # The schedule follows the lineage: each epoch's entry is the policy its lineage member trained with.
    chain = prov["lineage"]
    assert chain[-1] == prov["best_member"] and prov["final_val_acc"] == max(metrics[-1]["val_acc"])
    for r, m in enumerate(chain):
        assert schedule.prob[r].mean() == pytest.approx(metrics[r]["mean_prob"][m], abs=1e-5)
        if r:  # a member either kept its own network or copied the one of the member it names
            copied = {c["to"]: c["from"] for c in metrics[r - 1]["copies"]}
            assert chain[r - 1] == copied.get(m, m)
    # Round 0: member 0 trained with the start policy itself, the others with explored copies.
    start_prob = prior_policy("trivialaugment").prob.mean()
    assert metrics[0]["mean_prob"][0] == pytest.approx(start_prob)
    assert all(p != pytest.approx(start_prob) for p in metrics[0]["mean_prob"][1:])
    assert not (out / MEMBERS_FOLDER).exists()  # the members' files are removed at the end
    assert seconds < 30, f"the tiny population search took {seconds:.1f} s"
    # A finished search resumed is written again as it was, without training.
    assert main([*args, "--resume"]) == 0
    assert "resuming" in capsys.readouterr().err
    again = Schedule.load(out / "schedule.json")
    np.testing.assert_array_equal(again.prob, schedule.prob)
    np.testing.assert_array_equal(again.mag, schedule.mag)


def test_resume_continues_bit_for_bit(fake_data, tmp_path: Path):
    whole = run_population_search(_config(), tmp_path / "whole", data=fake_data, plot=False, log=lambda m: None)

    def stop_after_round_2(message: str) -> None:
        if message.startswith("round 2/"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_population_search(_config(), tmp_path / "cut", data=fake_data, plot=False, log=stop_after_round_2)
    assert not (tmp_path / "cut" / "schedule.json").exists()
    assert sorted(p.name for p in (tmp_path / "cut" / MEMBERS_FOLDER).iterdir()) == ["round_0001"]
    with pytest.raises(ValueError, match=r"--resume|resume=True"):
        run_population_search(_config(), tmp_path / "cut", data=fake_data, plot=False, log=lambda m: None)
    lines = []
    resumed = run_population_search(_config(), tmp_path / "cut", resume=True, data=fake_data,
                                    plot=False, log=lines.append)
    assert any("resuming" in line and "after round 2" in line for line in lines)
    np.testing.assert_array_equal(resumed.schedule.prob, whole.schedule.prob)
    np.testing.assert_array_equal(resumed.schedule.mag, whole.schedule.mag)
    assert _without_times(resumed.metrics) == _without_times(whole.metrics)
    assert resumed.schedule.provenance["sessions"] == 2
    # Other settings do not resume.
    with pytest.raises(ValueError, match="population"):
        run_population_search(_config(population=6), tmp_path / "cut", resume=True, data=fake_data, plot=False,
                              log=lambda m: None)


def test_a_checkpoint_written_before_member_start_existed_resumes(fake_data, tmp_path: Path):
    """Checkpoints of the searches run before ``member_start`` existed hold no such field; they ran with
    ``"explored"`` and resume as such, and only as such."""
    def stop_after_round_1(message: str) -> None:
        if message.startswith("round 1/"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_population_search(_config(), tmp_path / "cut", data=fake_data, plot=False, log=stop_after_round_1)
    path = tmp_path / "cut" / "checkpoint.pt"
    state = torch.load(path, weights_only=True)
    del state["config"]["member_start"]
    torch.save(state, path)
    with pytest.raises(ValueError, match="member_start: checkpoint 'explored' vs now 'same'"):
        run_population_search(_config(member_start="same"), tmp_path / "cut", resume=True, data=fake_data,
                              plot=False, log=lambda m: None)
    resumed = run_population_search(_config(), tmp_path / "cut", resume=True, data=fake_data, plot=False,
                                    log=lambda m: None)
    assert resumed.schedule.provenance["member_start"] == "explored"


def test_members_that_start_the_same_keep_the_start_in_the_schedule_until_a_copy(fake_data, tmp_path: Path):
    """``member_start="same"`` (PBA's): every member trains round 0 with the start policy itself, so the
    schedule's first round is the start, and a policy other than the start enters the schedule only through
    a copy (an explored policy), never before round 1."""
    result = run_population_search(_config(member_start="same"), tmp_path / "same", data=fake_data, plot=False,
                                   log=lambda m: None)
    start = prior_policy("trivialaugment")
    assert result.metrics[0]["mean_prob"] == pytest.approx([start.prob.mean()] * 4)
    schedule = result.schedule
    np.testing.assert_array_equal(schedule.prob[0], start.prob)
    np.testing.assert_array_equal(schedule.mag[0], start.mag)
    # The members still differ in their networks' seeds, so their accuracies are scored, not tied by construction.
    assert len(set(result.metrics[0]["train_loss"])) == 4
    assert schedule.provenance["member_start"] == "same"
    explored = run_population_search(_config(), tmp_path / "explored", data=fake_data, plot=False,
                                     log=lambda m: None)
    assert explored.schedule.provenance["member_start"] == "explored"
    assert explored.metrics[0]["mean_prob"][1:] != pytest.approx([start.prob.mean()] * 3)


def test_scored_on_their_weights_average_members_train_the_same_and_score_otherwise(fake_data, tmp_path: Path):
    """``score_ema``: the average is only what a member is scored on. Round 0 trains the same networks as a
    search scored on the weights (same seeds, same policies), the scores differ, the provenance says so, and a
    search cut after a round resumes bit for bit (the averages travel in the members' files)."""
    raw = run_population_search(_config(), tmp_path / "raw", data=fake_data, plot=False, log=lambda m: None)
    ema = run_population_search(_config(score_ema=0.5), tmp_path / "ema", data=fake_data, plot=False,
                                log=lambda m: None)
    assert ema.metrics[0]["train_loss"] == raw.metrics[0]["train_loss"]
    assert ema.metrics[0]["val_loss"] != raw.metrics[0]["val_loss"]
    assert ema.schedule.provenance["score_ema"] == 0.5 and raw.schedule.provenance["score_ema"] is None

    def stop_after_round_2(message: str) -> None:
        if message.startswith("round 2/"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_population_search(_config(score_ema=0.5), tmp_path / "cut", data=fake_data, plot=False,
                              log=stop_after_round_2)
    resumed = run_population_search(_config(score_ema=0.5), tmp_path / "cut", resume=True, data=fake_data,
                                    plot=False, log=lambda m: None)
    assert _without_times(resumed.metrics) == _without_times(ema.metrics)
    np.testing.assert_array_equal(resumed.schedule.prob, ema.schedule.prob)


def test_a_weights_average_follows_its_decay_and_copies_counts():
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    ema = _runner.WeightEMA(model, 0.75)
    before = [p.detach().clone() for p in ema.module.parameters()]
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    model(torch.randn(4, 3))  # BN: new running statistics and a batch count of 1
    ema.update()
    for avg, old, new in zip(ema.module.parameters(), before, model.parameters(), strict=True):
        torch.testing.assert_close(avg, 0.75 * old + 0.25 * new)
    bn_avg, bn = ema.module[1], model[1]
    torch.testing.assert_close(bn_avg.running_mean, 0.25 * bn.running_mean)  # from 0
    assert int(bn_avg.num_batches_tracked) == 1
    assert not any(p.requires_grad for p in ema.module.parameters())
    for bad in (0.0, 1.0, True, "0.9"):
        with pytest.raises(ValueError, match="decay must be a number in \\(0, 1\\)"):
            _runner.WeightEMA(model, bad)


@pytest.mark.parametrize("score_ema", [None, 0.5])
def test_members_replaying_captured_steps_search_as_eager_ones(fake_data, tmp_path: Path, score_ema):
    """--cuda-graphs: on the CPU the members run the same static-buffer steps uncaptured (batches of 16: two
    full ones and a short one of 8 per epoch); the search is the eager one but for the fused SGD's rounding.
    With ``score_ema`` the average's update is part of the step."""
    def config(**kw):
        c = _config(score_ema=score_ema, **kw)
        c.search.batch_size = 16
        return c

    eager = run_population_search(config(), tmp_path / "eager", data=fake_data, plot=False, log=lambda m: None)
    graphs = run_population_search(config(cuda_graphs=True), tmp_path / "graphs", data=fake_data, plot=False,
                                   log=lambda m: None)
    np.testing.assert_array_equal(graphs.schedule.prob, eager.schedule.prob)
    np.testing.assert_array_equal(graphs.schedule.mag, eager.schedule.mag)
    for a, b in zip(eager.metrics, graphs.metrics, strict=True):
        assert a["copies"] == b["copies"] and a["val_acc"] == b["val_acc"]
        np.testing.assert_allclose(a["val_loss"], b["val_loss"], rtol=1e-4)
        np.testing.assert_allclose(a["train_loss"], b["train_loss"], rtol=1e-4)
    assert graphs.schedule.provenance["cuda_graphs"] is True


def test_held_members_keep_the_starts_amount_and_the_free_searchs_draws(fake_data, tmp_path: Path):
    """``amount="held"``: every member of every round has the start's amount (mean probability and mean
    magnitude fraction); round 0's explored members are the free search's, shifted back; the provenance says
    so."""
    start = prior_policy("trivialaugment")
    target = pbt.amount(start.prob, start.mag)
    held = run_population_search(_config(amount="held"), tmp_path / "held", data=fake_data, plot=False,
                                 log=lambda m: None)
    for record in held.metrics:
        assert record["mean_prob"] == pytest.approx([target[0]] * 4)
    assert pbt.amount(held.schedule.prob[-1], held.schedule.mag[-1]) == pytest.approx(target, abs=1e-5)
    assert held.schedule.provenance["amount"] == "held"
    free = run_population_search(_config(), tmp_path / "free", data=fake_data, plot=False, log=lambda m: None)
    assert free.schedule.provenance["amount"] == "free" and free.schedule.provenance["vary"] == "all"
    assert free.metrics[0]["mean_prob"][1:] != pytest.approx([target[0]] * 3)


def test_members_follow_an_amount_profile_round_by_round(fake_data, tmp_path: Path):
    """``amount="profile"``: every member of round r has the profile's amount at the round's first epoch (the
    profile stretched to the search); the provenance records the file, its hash and the targets, and an edited
    profile does not resume."""
    path = tmp_path / "profile.json"
    Schedule(*_ramp(2), name="ramp", count_probs=(0.5, 0.5)).save(path)  # 2 entries stretched to 4 epochs
    config = _config(amount="profile", amount_profile=str(path))
    result = run_population_search(config, tmp_path / "s", data=fake_data, plot=False, log=lambda m: None)
    expected = [0.1, 0.1, 0.6, 0.6]
    for record, level in zip(result.metrics, expected, strict=True):
        assert record["mean_prob"] == pytest.approx([level] * 4, abs=1e-5)
        assert record["mean_mag_fraction"] == pytest.approx([level] * 4, abs=1e-5)
    prov = result.schedule.provenance
    assert prov["amount"] == "profile" and prov["amount_profile"] == str(path)
    assert prov["amount_profile_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert prov["amount_targets"] == [pytest.approx([level, level], abs=1e-6) for level in expected]

    def stop_after_round_1(message: str) -> None:
        if message.startswith("round 1/"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_population_search(config, tmp_path / "cut", data=fake_data, plot=False, log=stop_after_round_1)
    Schedule(*_ramp(2, 0.2), name="ramp", count_probs=(0.5, 0.5)).save(path)
    with pytest.raises(ValueError, match="amount_profile_sha256: checkpoint"):
        run_population_search(config, tmp_path / "cut", resume=True, data=fake_data, plot=False, log=lambda m: None)


def test_one_round_is_a_tournament_of_whole_trainings(fake_data, tmp_path: Path):
    """``exploit_every >= epochs``: one round, no copy; every member trains for the whole search with its
    own policy (member 0 the start, the others explored copies of it), and the schedule is the policy of the
    member with the best final validation accuracy, held for every epoch (docs/contract.md, section 6)."""
    config = _config(exploit_every=10)  # longer than the 4 epochs: the one round is cut to the search
    result = run_population_search(config, tmp_path / "t", data=fake_data, plot=False, log=lambda m: None)
    (record,) = result.metrics
    assert record["copies"] == []
    prov = result.schedule.provenance
    best = prov["best_member"]
    assert prov["rounds"] == 1 and prov["lineage"] == [best]
    assert prov["final_val_accs"] == record["val_acc"] and best == pbt.ranking(record["val_acc"])[0]
    schedule = result.schedule
    np.testing.assert_array_equal(schedule.prob, np.broadcast_to(schedule.prob[0], schedule.prob.shape))
    assert schedule.prob[0].mean() == pytest.approx(record["mean_prob"][best], abs=1e-6)
    assert len({round(p, 6) for p in record["mean_prob"]}) == 4  # four different candidates


def test_members_that_always_resample_to_the_prior_stay_at_it(fake_data, tmp_path: Path):
    """``resample="prior"`` reaches round 0's members and every exploit: with every value resampled, every
    member of every round holds the start policy; the provenance says so."""
    start = prior_policy("trivialaugment")
    result = run_population_search(_config(resample="prior", resample_prob=1.0), tmp_path / "s", data=fake_data,
                                   plot=False, log=lambda m: None)
    assert any(record["copies"] for record in result.metrics)
    for record in result.metrics:
        assert record["mean_prob"] == pytest.approx([start.prob.mean()] * 4)
    np.testing.assert_allclose(result.schedule.prob, np.broadcast_to(start.prob, result.schedule.prob.shape),
                               atol=1e-6)
    assert result.schedule.provenance["resample"] == "prior"


def test_a_magnitudes_only_search_keeps_the_starts_probabilities_and_selects_magnitudes(fake_data, tmp_path: Path):
    """``vary="magnitudes"`` reaches round 0's members and every exploit: every member of every round applies
    each op as often as the start, while the members' magnitudes differ; the provenance says so."""
    start = prior_policy("trivialaugment")
    result = run_population_search(_config(vary="magnitudes"), tmp_path / "s", data=fake_data, plot=False,
                                   log=lambda m: None)
    assert any(record["copies"] for record in result.metrics)
    for record in result.metrics:
        assert record["mean_prob"] == pytest.approx([start.prob.mean()] * 4)
        assert len({round(f, 6) for f in record["mean_mag_fraction"]}) > 1
    np.testing.assert_array_equal(result.schedule.prob, np.broadcast_to(start.prob, result.schedule.prob.shape))
    assert result.schedule.provenance["vary"] == "magnitudes"  # "all" by default: the held test's free search


def test_a_search_from_a_schedule_file_refines_its_last_entry(fake_data, tmp_path: Path):
    """``init`` as a schedule file: the members start at (and, resampled to the prior, stay at) the file's
    last entry, even where it holds probabilities of 0 and 1; the provenance names the file and its hash."""
    low = np.array([spec.low if spec.has_magnitude else np.nan for spec in OPS])
    prob = np.stack([np.zeros((2, 15)), np.tile([0.0, 1.0, 0.4], 10).reshape(2, 15)])
    path = tmp_path / "mine.json"
    Schedule(prob, np.stack([np.stack([low, low])] * 2), name="mine", count_probs=(0.5, 0.5)).save(path)
    config = _config(resample="prior", resample_prob=1.0)
    config.search = dataclasses.replace(config.search, init=str(path), count_probs=None)  # the file's, (0.5, 0.5)
    result = run_population_search(config, tmp_path / "s", data=fake_data, plot=False, log=lambda m: None)
    np.testing.assert_allclose(result.schedule.prob, np.broadcast_to(prob[-1], result.schedule.prob.shape),
                               atol=1e-9)
    prov = result.schedule.provenance
    assert prov["init"] == str(path) and prov["init_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert tuple(result.schedule.count_probs) == (0.5, 0.5)


def test_a_schedule_file_is_read_once_per_session_and_an_edited_one_does_not_resume(fake_data, tmp_path: Path):
    """A file edited during a session changes nothing of it (members resampled to the prior stay at the
    policy read at the start; the provenance hashes that file), and the next session refuses to resume."""
    path = tmp_path / "mine.json"
    start = Schedule.constant(*prior_policy("trivialaugment")[:2], name="mine", count_probs=(0.5, 0.5))
    start.save(path)
    original, digest = path.read_bytes(), hashlib.sha256(path.read_bytes()).hexdigest()
    config = _config(resample="prior", resample_prob=1.0, exploit_every=2)
    config.search = dataclasses.replace(config.search, init=str(path), count_probs=None)

    def edit_after_round_1(message: str) -> None:
        if message.startswith("round 1/"):
            Schedule.constant(start.prob[0] * 0.5, start.mag[0], name="edited", count_probs=(0.5, 0.5)).save(path)

    result = run_population_search(config, tmp_path / "whole", data=fake_data, plot=False, log=edit_after_round_1)
    assert any(record["copies"] for record in result.metrics)  # the second round's members were resampled
    np.testing.assert_allclose(result.schedule.prob, np.broadcast_to(start.prob[0], result.schedule.prob.shape),
                               atol=1e-9)
    assert result.schedule.provenance["init_sha256"] == digest

    def stop_after_round_1(message: str) -> None:
        if message.startswith("round 1/"):
            raise KeyboardInterrupt

    path.write_bytes(original)
    with pytest.raises(KeyboardInterrupt):
        run_population_search(config, tmp_path / "cut", data=fake_data, plot=False, log=stop_after_round_1)
    edit_after_round_1("round 1/")
    with pytest.raises(ValueError, match=f"init_sha256: checkpoint '{digest}' vs now '[0-9a-f]{{64}}'"):
        run_population_search(config, tmp_path / "cut", resume=True, data=fake_data, plot=False, log=lambda m: None)


def test_the_provenance_names_the_commit_the_search_started_with(fake_data, tmp_path: Path, monkeypatch):
    """The checkout may move on while a long search runs; the schedule names the code that ran it."""
    rounds = []
    monkeypatch.setattr(_runner, "source_commit", lambda: "abc1234+later" if rounds else "abc1234")
    result = run_population_search(_config(exploit_every=2), tmp_path / "s", data=fake_data, plot=False,
                                   log=lambda m: rounds.append(m) if m.startswith("round ") else None)
    assert rounds and result.schedule.provenance["git_commit"] == "abc1234"


def test_another_seed_gives_another_search(fake_data, tmp_path: Path):
    config = _config()
    config.search.epochs = 2
    a = run_population_search(config, tmp_path / "a", data=fake_data, plot=False, log=lambda m: None)
    config.search.seed = 5
    b = run_population_search(config, tmp_path / "b", data=fake_data, plot=False, log=lambda m: None)
    assert _without_times(a.metrics) != _without_times(b.metrics)


@pytest.mark.parametrize("kwargs, match", [
    ({"population": 1}, "population"),
    ({"population_procs": 5}, "population-procs|population_procs"),
    ({"population_lanes": 0}, "population_lanes"),
    ({"exploit_every": 0}, "exploit"),
    ({"quantile": 0.7}, "quantile"),
    ({"resample_prob": -0.1}, "resample_prob"),
    ({"member_start": "spread"}, "member_start must be one of"),
    ({"score_ema": 1.5}, "score_ema must be None or a number in \\(0, 1\\), got 1.5"),
    ({"amount": "fixed"}, "amount must be one of"),
    ({"amount": "profile"}, "amount='profile' needs amount_profile=SCHEDULE.json"),
    ({"amount_profile": "p.json"}, "amount_profile='p.json' goes with amount='profile' only, got amount='free'"),
    ({"amount": "profile", "amount_profile": "nowhere.json"},
     "amount_profile names a schedule file that does not exist: 'nowhere.json'"),
    ({"amount": "profile", "amount_profile": "profile.txt"},
     "amount_profile must be a schedule file ending in '.json', got 'profile.txt'"),
    ({"resample": "near"}, "resample must be one of"),
    ({"vary": "probabilities"}, "vary must be one of"),
])
def test_bad_population_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        _config(**kwargs).validate()


def test_compile_and_other_objectives_are_refused():
    config = _config()
    config.search.compile = True
    with pytest.raises(ValueError, match="compile"):
        config.validate()
    config = _config()
    config.search.objective = "teacher"
    with pytest.raises(ValueError, match="objective"):
        config.validate()


@pytest.mark.parametrize("extra, said", [
    (["--objective", "population", "--prior-decay", "1"], "--prior-decay 1.0 does not apply to --objective population"),
    (["--objective", "population", "--hparam-lr", "0.1"], "--hparam-lr"),
    (["--population", "4"], "--population 4 applies to --objective population only"),
    (["--objective", "teacher", "--exploit-every", "2"], "--exploit-every"),
    (["--objective", "population", "--population", "2", "--population-procs", "3"], "population-procs"),
    (["--population-lanes", "2"], "--population-lanes 2 applies to --objective population only"),
    (["--member-start", "same"], "--member-start same applies to --objective population only"),
    (["--score-ema", "0.99"], "--score-ema 0.99 applies to --objective population only"),
    (["--amount", "held"], "--amount held applies to --objective population only"),
    (["--amount-profile", "p.json"], "--amount-profile p.json applies to --objective population only"),
    (["--resample", "prior"], "--resample prior applies to --objective population only"),
    (["--vary", "magnitudes"], "--vary magnitudes applies to --objective population only"),
])
def test_command_line_refuses_options_of_the_other_objectives(tmp_path: Path, capsys, extra, said):
    args = ["search", "--data-dir", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o"), "--device", "cpu", *extra]
    assert main(args) == 2
    assert said in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(("extra", "said"), [
    (["--score-ema", "1.5"], "score_ema must be None or a number in (0, 1), got 1.5"),
    (["--amount", "profile"], "--amount profile needs --amount-profile SCHEDULE.json"),
])
def test_command_line_names_a_bad_population_setting(tmp_path: Path, capsys, extra, said):
    args = ["search", "--objective", "population", *extra, "--data-dir", str(tmp_path / "nowhere"),
            "--out", str(tmp_path / "o"), "--device", "cpu"]
    assert main(args) == 2
    assert said in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_population_needs_two_members(tmp_path: Path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["search", "--data-dir", "d", "--out", str(tmp_path / "o"), "--objective", "population",
              "--population", "1"])
    assert e.value.code == 2
    assert "at least 2 members" in capsys.readouterr().err


@pytest.mark.parametrize("kw", [
    # Spawned processes import torch afresh (about 5 s each on a small machine): marked slow.
    pytest.param({"population_procs": 2}, marks=pytest.mark.slow, id="processes"),
    # Members at the same time in threads (on a GPU, a stream each): every draw is a member's own.
    pytest.param({"population_lanes": 3}, id="lanes"),
])
def test_processes_and_lanes_give_the_in_process_search(fake_data, tmp_path: Path, kw):
    """Bit for bit on the CPU, whatever runs the members."""
    local = run_population_search(_config(), tmp_path / "local", data=fake_data, plot=False, log=lambda m: None)
    other = run_population_search(_config(**kw), tmp_path / "other", data=fake_data, plot=False, log=lambda m: None)
    np.testing.assert_array_equal(other.schedule.prob, local.schedule.prob)
    np.testing.assert_array_equal(other.schedule.mag, local.schedule.mag)
    assert _without_times(other.metrics) == _without_times(local.metrics)
    name, value = next(iter(kw.items()))
    assert other.schedule.provenance[name] == value


def test_a_worker_process_stops_when_its_driver_is_gone(fake_data, monkeypatch):
    """``serve`` in this process, with an inbox that stays empty and a parent reported dead: it returns
    (instead of waiting for a ``None`` that a killed driver never sends) after announcing itself."""
    import queue as queue_module

    from hba_augment.search import _member

    class _Dead:
        def is_alive(self) -> bool:
            return False

    class _Inbox:  # the images, then nothing more
        def __init__(self, *messages):
            self.messages = list(messages)

        def get(self, timeout=None):
            if not self.messages:
                raise queue_module.Empty
            return self.messages.pop(0)

    answers = []

    class _Out:
        def put(self, item):
            answers.append(item)

    monkeypatch.setattr(_member.multiprocessing, "parent_process", lambda: _Dead())
    as_numpy = tuple((d.images.numpy(), d.labels.numpy(), d.classes) for d in fake_data)
    _member.serve(_config().search, [0], 1, _Inbox(as_numpy), _Out())
    assert answers == [("ready", [0])]
    answers.clear()  # a driver gone before it sent the images: nothing to announce
    _member.serve(_config().search, [0], 1, _Inbox(), _Out())
    assert answers == []


def test_a_worker_that_dies_while_starting_stops_the_search_instead_of_hanging_it(tmp_path: Path):
    """A driver run as ``python -`` (its ``__main__`` is ``<stdin>``, which a 'spawn' process cannot import)
    starts workers that die at once. The search must stop with the worker's exit status, not block for good
    writing the images (more than a pipe holds) to a process that will never read them."""
    data_dir = _fake_cifar(tmp_path / "data")
    script = (
        "from hba_augment.cli import main\n"
        f"main(['search', '--objective', 'population', '--population', '2', '--population-procs', '2', "
        f"'--dataset', 'cifar10', '--data-dir', {str(data_dir)!r}, '--model', 'wrn-10-1', '--epochs', '1', "
        f"'--train-size', '40', '--val-size', '20', '--batch-size', '20', '--device', 'cpu', "
        f"'--out', {str(tmp_path / 'run')!r}, '--no-plot', '--no-progress'])\n"
    )
    # 40 training images of 3,072 bytes are more than a Linux pipe buffers (64 KiB): the old start blocked.
    done = subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert done.returncode != 0
    assert "population worker process" in done.stderr and "exited with status" in done.stderr


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize(("score_ema", "lanes"), [(None, 1), (0.5, 1), (None, 2)])
def test_on_cuda_members_capture_replay_and_recapture_after_an_exploit(fake_data, tmp_path: Path, score_ema,
                                                                       lanes):
    """Two members, rounds of one epoch: every round one copies the other (new momentum buffers, a new
    capture). The captured search ends near the eager one (CUDA is not bit-exact); with ``score_ema`` the
    average's update is captured too; with two lanes both members capture and replay at the same time, each
    on its own stream."""
    def config(**kw):
        c = _config(population=2, score_ema=score_ema, **kw)
        c.search.device, c.search.batch_size, c.search.amp = "cuda", 16, True
        return c

    eager = run_population_search(config(), tmp_path / "eager", data=fake_data, plot=False, log=lambda m: None)
    graphs = run_population_search(config(cuda_graphs=True, population_lanes=lanes), tmp_path / "graphs",
                                   data=fake_data, plot=False, log=lambda m: None)
    assert all(len(m["copies"]) == 1 for m in graphs.metrics[:-1])
    for a, b in zip(eager.metrics, graphs.metrics, strict=True):
        np.testing.assert_allclose(a["train_loss"], b["train_loss"], rtol=0.05)


def test_exploit_copies_each_loser_from_a_donor_with_an_explored_policy_and_leaves_its_inputs():
    start = prior_policy("trivialaugment")
    prob, mag = pbt.start_policies(start.prob, start.mag, 4, 3)
    assert np.array_equal(prob[0], start.prob) and not np.array_equal(prob[1], start.prob)
    before = prob.copy(), mag.copy()
    parents, new_prob, new_mag, copies = pbt.exploit(prob, mag, [0.9, 0.1, 0.5, 0.6], 3, 7)
    assert copies == [(1, 0)] and parents == [0, 0, 2, 3]  # the worst copies the best (4 members: q = 1)
    assert np.array_equal(prob, before[0]) and np.array_equal(mag, before[1], equal_nan=True)
    assert np.array_equal(new_prob[[0, 2, 3]], prob[[0, 2, 3]])
    expected = pbt.explore(prob[0], mag[0], _after_selection(3, 7))
    np.testing.assert_array_equal(new_prob[1], expected[0])
    np.testing.assert_array_equal(new_mag[1], expected[1])
    same, _ = pbt.start_policies(start.prob, start.mag, 4, 3, member_start="same")
    assert all(np.array_equal(p, start.prob) for p in same)
    chain_prob, _ = pbt.lineage_policies([prob, new_prob], [mag, new_mag], [0, 1], [0, 2], 5)
    assert np.array_equal(chain_prob[:2], [prob[0]] * 2) and np.array_equal(chain_prob[2:], [new_prob[1]] * 3)


def _after_selection(seed: int, r: int) -> np.random.Generator:
    """Round ``r``'s stream after truncation selection of 4 members has drawn its one donor."""
    rng = pbt.round_rng(seed, r)
    rng.integers(1)
    return rng
