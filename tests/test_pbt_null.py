"""benchmarks/pbt_null.py: a population search whose scores are noise (issue 20's null model for PBT)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from hba_augment.functional import OP_NAMES
from hba_augment.schedule import Schedule
from hba_augment.search import pbt
from hba_augment.search.priors import prior_policy

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import pbt_null  # noqa: E402
from control_schedules import PBA_LOG  # noqa: E402


def test_a_null_lineage_from_zero_can_only_climb_and_changes_at_rounds():
    rng = np.random.default_rng(0)
    prob, frac = pbt_null.null_lineage(pbt_null.pba_start(), pbt_null.pba_explore, pbt_null._pba_fractions, rng,
                                       population=8, epochs=30, every=3, explore_start=False)
    assert prob.shape == (30, 2, 15) and frac.shape == (30, 2, 12)
    assert np.all(prob[:3] == 0)  # round 0 is the start itself (PBA: every member at the start)
    # PBA's levels: probabilities in tenths up to 1, magnitudes in tenths up to 0.9.
    assert np.all(np.isin(np.round(prob * 10), np.arange(11))) and np.all(np.isin(np.round(frac * 10), np.arange(10)))
    # The policy only changes where a round starts.
    changed = [e for e in range(1, 30) if not np.array_equal(prob[e], prob[e - 1])]
    assert changed and all(e % 3 == 0 for e in changed)


def test_the_driver_s_start_explores_members_other_than_the_first():
    start = prior_policy("trivialaugment")
    firsts = set()
    for seed in range(6):
        prob, _ = pbt_null.null_lineage((start.prob, start.mag), pbt.explore, pbt_null._hba_fractions,
                                        np.random.default_rng(seed), population=4, epochs=3, every=3,
                                        explore_start=True)
        firsts.add(bool(np.array_equal(prob[0], start.prob)))
    assert firsts == {True, False}  # the lineage starts at member 0 (the start) or at an explored copy


def test_pba_explore_moves_by_at_most_three_levels_or_resamples():
    rng = np.random.default_rng(0)
    prob = np.full((2, 15), 5)
    mag = np.full((2, 12), 9)
    moved = [pbt_null.pba_explore(prob, mag, rng) for _ in range(200)]
    steps = np.concatenate([(p - prob).ravel() for p, _ in moved])
    # Only a resample (p 0.2) lands more than 3 levels away: on 0, 1, 9 or 10 (4 of 11 levels), p 0.073.
    assert 0.06 < np.mean(np.abs(steps) > 3) < 0.09
    assert all(m.max() <= 9 and m.min() >= 0 for _, m in moved)


def test_ramp_epoch_and_changes():
    mean = np.array([[0.0, 0.1, 0.3, 0.2], [0.0, 0.0, 0.0, 0.0]])
    assert pbt_null.ramp_epoch(mean).tolist() == [2, 4]
    prob = np.array([[0.0], [0.0], [0.5], [0.5]])
    mag = np.array([[np.nan], [np.nan], [np.nan], [0.2]])
    assert pbt_null.changes(prob, mag) == 2


def test_the_null_from_zero_ramps_up():
    sim = pbt_null.simulate("pba", 20, 0, population=16, explore_start=False)
    assert sim["prob"].shape == (20, 200) and np.all(sim["prob"][:, 0] == 0)
    assert sim["prob"][:, -1].mean() > 0.3 and sim["mag"][:, -1].mean() > 0.3


@pytest.mark.skipif(not PBA_LOG.exists(), reason=f"PBA reference log not found at {PBA_LOG}")
def test_pba_fractions_read_the_published_schedule():
    prob, mag = pbt_null.pba_fractions()
    assert prob.shape == mag.shape == (200, 2, 15)
    assert np.all(prob[0] == 0) and np.nanmax(mag[0]) == 0  # PBA starts at zero
    assert np.isnan(mag[:, :, [5, 6, 7]]).all() and not np.isnan(mag[:, :, 0]).any()
    assert np.all(np.isin(np.round(prob * 10), np.arange(11)))


def test_a_greedy_signal_holds_augmentation_back():
    null = pbt_null.simulate("pba", 20, 0, population=16, explore_start=False)
    greedy = pbt_null.simulate("pba", 20, 0, population=16, explore_start=False, greed=4.0)
    assert greedy["prob"][:, -1].mean() < null["prob"][:, -1].mean() - 0.2
    assert np.median(pbt_null.ramp_epoch(greedy["prob"])) > np.median(pbt_null.ramp_epoch(null["prob"]))


def test_a_null_schedule_is_the_lineage_of_the_search_s_own_explore():
    start = prior_policy("trivialaugment")
    schedule = pbt_null.null_schedule("trivialaugment", 3, population=4, epochs=20, every=2)
    assert schedule.epochs == 20 and schedule.count_probs == pytest.approx(start.count_probs)
    # The same draws as the report's fractions: raw is the same lineage, before the conversion.
    prob, frac = pbt_null.null_lineage((start.prob, start.mag), pbt.explore, pbt_null._hba_fractions,
                                       np.random.default_rng(3), population=4, epochs=20, every=2,
                                       explore_start=True)
    np.testing.assert_array_equal(schedule.prob, prob)
    np.testing.assert_allclose(pbt.mag_fractions(schedule.mag), frac)
    # Explore settings reach the walk: with no shift and no resampling, the schedule is its start.
    frozen = pbt_null.null_schedule("trivialaugment", 3, population=4, epochs=20, every=2, resample_prob=0.0,
                                    max_shift=0)
    assert np.array_equal(frozen.prob, np.broadcast_to(start.prob, frozen.prob.shape))


def test_a_held_null_keeps_the_start_s_amount_and_walks_the_free_null_s_draws():
    """``--amount held``: every epoch of the null has the start's amount; its draws are the free null's, so
    its lineage is the free one's (the same noise picks the same members) and only the values differ."""
    start = prior_policy("trivialaugment")
    target = pbt.amount(start.prob, start.mag)
    free = pbt_null.null_schedule("trivialaugment", 3, population=4, epochs=20, every=2)
    held = pbt_null.null_schedule("trivialaugment", 3, population=4, epochs=20, every=2, amount="held")
    assert held.provenance["amount"] == "held" and free.provenance["amount"] == "free"
    for e in range(20):
        assert pbt.amount(held.prob[e], held.mag[e]) == pytest.approx(target, abs=1e-9)
    changed = [e for e in range(1, 20) if not np.array_equal(free.prob[e], free.prob[e - 1])]
    assert changed == [e for e in range(1, 20) if not np.array_equal(held.prob[e], held.prob[e - 1])]
    assert pbt.amount(free.prob[-1], free.mag[-1]) != pytest.approx(target)


def test_a_null_that_resamples_to_the_prior_walks_the_uniform_null_s_draws_nearer_its_start():
    """``--resample prior``: the same draws (the same noise picks the same members, so the lineage changes at
    the same epochs), values resampled to the start's, so the schedule stays nearer the start."""
    start = prior_policy("trivialaugment")
    uniform = pbt_null.null_schedule("trivialaugment", 3, population=4, epochs=60, every=2)
    anchored = pbt_null.null_schedule("trivialaugment", 3, population=4, epochs=60, every=2, resample="prior")
    assert anchored.provenance["resample"] == "prior" and uniform.provenance["resample"] == "uniform"
    changed = [e for e in range(1, 60) if not np.array_equal(uniform.prob[e], uniform.prob[e - 1])]
    assert changed == [e for e in range(1, 60) if not np.array_equal(anchored.prob[e], anchored.prob[e - 1])]
    assert np.abs(anchored.prob - start.prob).mean() < np.abs(uniform.prob - start.prob).mean()


def test_a_null_of_members_that_start_the_same_keeps_the_start_for_its_first_round():
    """``member_start="same"`` (PBA's): the null's first round is the start itself, as the search's is."""
    start = prior_policy("paper")
    for seed in range(5):
        schedule = pbt_null.null_schedule("paper", seed, population=4, epochs=20, every=2, member_start="same")
        assert np.array_equal(schedule.prob[:2], np.broadcast_to(start.prob, (2, 2, 15)))
        assert schedule.provenance["member_start"] == "same"
    explored = [pbt_null.null_schedule("paper", seed, population=4, epochs=20, every=2) for seed in range(5)]
    assert any(not np.array_equal(s.prob[0], start.prob) for s in explored)
    with pytest.raises(ValueError, match="member_start"):
        pbt_null.null_schedule("paper", 0, population=4, epochs=20, every=2, member_start="spread")


def test_op_mix_measures_the_move_from_the_start():
    start = prior_policy("trivialaugment")
    held = np.broadcast_to(start.prob, (5, 2, 15)), np.broadcast_to(start.mag, (5, 2, 15))
    assert all(v == pytest.approx(0.0, abs=1e-12) for k, v in pbt_null.op_mix(*held, (start.prob, start.mag)).items()
               if "change" in k)
    prob = np.array(held[0])
    prob[:, :, 6] = 0.52  # Invert, 0.02 in the start, up by 0.5 in both copies at every epoch
    mix = pbt_null.op_mix(prob, held[1], (start.prob, start.mag))
    assert mix["ops' mean p: largest absolute change"] == pytest.approx(0.5)
    assert mix["ops' mean p: summed absolute change"] == pytest.approx(0.5)
    assert mix["mean p over all slots: absolute change"] == pytest.approx(0.5 / 15)


def test_selection_signal_sees_a_ranking_and_its_absence():
    strong = [{"val_acc": [0.70, 0.71, 0.72, 0.73], "mean_prob": [0.1, 0.2, 0.3, 0.4],
               "mean_mag_fraction": [0.4, 0.3, 0.2, 0.1]}] * 3
    signal = pbt_null.selection_signal(strong)
    assert signal["rho(val acc, mean p)"][0] == pytest.approx(1.0)
    assert signal["rho(val acc, mean magnitude)"][0] == pytest.approx(-1.0)
    assert signal["accuracy spread, last 10 rounds (points)"][0] == pytest.approx(3.0)
    rng = np.random.default_rng(0)
    noise = [{"val_acc": rng.random(8).tolist(), "mean_prob": rng.random(8).tolist(),
              "mean_mag_fraction": rng.random(8).tolist()} for _ in range(400)]
    rho, se = pbt_null.selection_signal(noise)["rho(val acc, mean p)"]
    assert abs(rho) < 3 * se


def test_a_null_search_is_not_flagged_against_its_own_null(tmp_path):
    """The report on a search's folder, run on a null schedule of the same settings: no statistic extreme."""
    import json

    schedule = pbt_null.null_schedule("trivialaugment", 5, population=4, epochs=40, every=2)
    schedule.provenance.update({"init": "trivialaugment", "search_epochs": 40, "command": "null"})
    schedule.save(tmp_path / "schedule.json")
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(
        {"val_acc": [0.5, 0.6, 0.7, 0.8], "mean_prob": [0.4, 0.5, 0.3, 0.6], "mean_mag_fraction": [0.5] * 4})
        for _ in range(20)))
    text = pbt_null.searched_report(tmp_path, 200, 0)
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| ops'") or line.startswith("| mean")]
    assert len(rows) == 5
    assert all(0.01 < float(row[-1].rstrip(" |")) < 0.99 for row in rows), text
    assert "rho(val acc, mean p) | 0.400 ± 0.000" in text  # ranks 1, 2, 0, 3 against 0, 1, 2, 3


def test_copy_noise_pairs_each_copier_with_its_donor_one_round_later():
    rounds = []
    for r in range(8):
        # Member 3 copies member 0 every round; one round later it scores 1 point below member 0 in the first
        # half and 3 above or below in the second. Member 2 copies member 3 in round 5: a donor that copied
        # itself, left out.
        acc = [0.5, 0.4, 0.4, 0.5 - (0.01 if r < 4 else 0.03 * (-1) ** r)]
        copies = [{"to": 3, "from": 0}] + ([{"to": 2, "from": 3}, {"to": 1, "from": 3}] if r == 5 else [])
        rounds.append({"val_acc": acc, "mean_prob": [0.1, 0.1, 0.1, 0.3], "copies": copies})
    parts = pbt_null.copy_noise(rounds, parts=2)
    assert [q["first round"] for q in parts] == [0, 4]
    assert [q["pairs"] for q in parts] == [3, 4]  # rounds 1-3 and 4-7 (round 0's copy shows in round 1)
    assert parts[0]["mean"] == pytest.approx(-1.0) and parts[0]["sd"] == pytest.approx(0.0, abs=1e-9)
    assert parts[1]["sd"] == pytest.approx(np.std([3, -3, 3, -3], ddof=1))
    assert parts[1]["mean p difference"] == pytest.approx(0.2)


def _agreement_rows(text: str) -> list[list[str]]:
    return [line.strip("| ").split(" | ") for line in text.splitlines()
            if line.startswith("| all epochs") or line.startswith("| second half")]


def test_a_search_agrees_with_itself_and_two_nulls_agree_by_chance(tmp_path):
    for seed in (3, 4):
        (tmp_path / f"{seed}").mkdir()
        pbt_null.null_schedule("paper", seed, population=4, epochs=40, every=2).save(tmp_path / f"{seed}" / "schedule.json")
    copy = Schedule.load(tmp_path / "3" / "schedule.json")
    (tmp_path / "copy").mkdir()
    Schedule(copy.prob, copy.mag, name="copy", count_probs=copy.count_probs,
             provenance=copy.provenance | {"seed": 5}).save(tmp_path / "copy" / "schedule.json")
    same = _agreement_rows(pbt_null.agreement_report([tmp_path / "3", tmp_path / "copy"], 200, 0))
    assert len(same) == 4
    assert all(float(row[2]) == pytest.approx(1.0) and float(row[-1]) == 0.0 for row in same)
    two = _agreement_rows(pbt_null.agreement_report([tmp_path / "3", tmp_path / "4"], 200, 0))
    assert all(0.01 < float(row[-1]) < 0.99 for row in two), two


def test_searches_of_one_seed_are_refused(tmp_path):
    """The driver keys every explore draw by the seed alone, so two searches of one seed share their walks."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        pbt_null.null_schedule("paper", 7, population=4, epochs=40 if name == "a" else 60,
                               every=2).save(tmp_path / name / "schedule.json")
    with pytest.raises(ValueError, match="different seeds; both ran with seed 7"):
        pbt_null.agreement_report([tmp_path / "a", tmp_path / "b"], 10, 0)


def test_the_null_s_own_drift_is_taken_out_of_the_agreement():
    """From the TrivialAugment-like start, the explore step alone moves some ops more than others; two null
    searches share that drift, so their raw preferences correlate, and less that drift they do not."""
    start = prior_policy("trivialaugment")
    rng = np.random.default_rng(0)
    prefs = np.array([pbt_null.op_preference(*pbt_null.null_lineage(
        (start.prob, start.mag), pbt.explore, pbt_null._hba_fractions, rng, population=4, epochs=40, every=2,
        explore_start=True, raw=True), (start.prob, start.mag))[:15] for _ in range(400)])
    raw = [np.corrcoef(a, b)[0, 1] for a, b in zip(prefs[::2], prefs[1::2], strict=True)]
    centred = prefs - prefs.mean(axis=0)
    less_drift = [np.corrcoef(a, b)[0, 1] for a, b in zip(centred[::2], centred[1::2], strict=True)]
    assert np.mean(raw) > 0.2
    assert abs(np.mean(less_drift)) < 0.05


def test_searches_of_other_settings_compare_against_nulls_of_their_own(tmp_path):
    """A 40-epoch 4-member search against a 60-epoch 8-member one: each side's null is of its own settings,
    so a null pair agrees by chance only (r centred on 0), and a schedule agrees with its own stretch."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "c").mkdir()
    short = pbt_null.null_schedule("paper", 0, population=4, epochs=40, every=2)
    short.save(tmp_path / "a" / "schedule.json")
    pbt_null.null_schedule("paper", 1, population=8, epochs=60, every=3).save(tmp_path / "b" / "schedule.json")
    text = pbt_null.agreement_report([tmp_path / "a", tmp_path / "b"], 300, 0)
    assert "Settings of `a`: 4 members, 40 epochs" in text and "Settings of `b`: 8 members, 60 epochs" in text
    rows = _agreement_rows(text)
    assert all(abs(float(row[3].split()[0])) < 0.05 for row in rows), rows  # the null's mean r
    stretched = short.provenance | {"population": 8, "search_epochs": 80, "exploit_every": 4, "seed": 2}
    type(short)(np.repeat(short.prob, 2, axis=0), np.repeat(short.mag, 2, axis=0), name="stretched",
                count_probs=short.count_probs, provenance=stretched).save(tmp_path / "c" / "schedule.json")
    rows = _agreement_rows(pbt_null.agreement_report([tmp_path / "a", tmp_path / "c"], 300, 0))
    assert all(float(row[2]) > 0.8 and float(row[-1]) < 0.01 for row in rows), rows


def _noise_profile_search(folder: Path, seed: int, push: float = 0.0, vary: str = "all") -> None:
    """A 24-epoch ``--amount profile`` search of ``seed`` whose scores were noise, written to ``folder``: the
    provenance such a search records (its targets a ramp) and :func:`pbt_null.replay`'s schedule. ``push``
    then moves ShearX, ShearY and TranslateX up and Color, Brightness and Sharpness down by that much, a
    preference that two such searches share. ``vary`` is the search's ``--vary``."""
    rounds = len(pbt.round_starts(24, 2))
    prov = {"objective": "population", "seed": seed, "init": "paper", "population": 4, "search_epochs": 24,
            "exploit_every": 2, "member_start": "explored", "amount": "profile", "resample": "uniform", "vary": vary,
            "amount_targets": [[float(a), float(a)] for a in np.linspace(0.05, 0.5, rounds)],
            "explore": {"resample_prob": pbt.EXPLORE_RESAMPLE_PROB, "max_shift": pbt.EXPLORE_MAX_SHIFT}}
    prob, mag, _ = pbt_null.replay(prov, np.random.default_rng(100 + seed).random((rounds, 4)))
    prob = prob.copy()
    prob[..., :3] += push
    prob[..., 11:14] -= push
    folder.mkdir()
    Schedule(np.clip(prob, 0.0, 1.0), mag, name=folder.name, count_probs=(0.2, 0.3, 0.5),
             provenance=prov).save(folder / "schedule.json")


def test_profile_searches_are_compared_against_their_twins(tmp_path):
    """An ``--amount profile`` search has no stand-alone null, so ``--agree`` and ``--pushes`` use its twins: two
    such searches that selected on noise agree by chance only, two that share a preference agree far more than
    their twins, and the drift table walks each search's twins."""
    for seed in (3, 4):
        _noise_profile_search(tmp_path / f"noise{seed}", seed)
        _noise_profile_search(tmp_path / f"push{seed}", seed, push=0.25)
    text = pbt_null.agreement_report([tmp_path / "noise3", tmp_path / "noise4"], 100, 0)
    assert "null is its twins" in text
    rows = _agreement_rows(text)
    assert len(rows) == 4 and all(0.01 < float(row[-1]) < 0.99 for row in rows), rows
    rows = _agreement_rows(pbt_null.agreement_report([tmp_path / "push3", tmp_path / "push4"], 100, 0))
    probs = [row for row in rows if row[1] == "ops' probabilities (15)"]
    assert all(float(row[2]) > 0.3 and float(row[-1]) < 0.05 for row in probs), probs
    text = pbt_null.pushes_report([tmp_path / "noise3", tmp_path / "noise4"], 20, 0)
    drift = [line for line in text.splitlines() if "a profile search has no stand-alone null" in line]
    assert len(drift) == 2 * len(pbt.RESAMPLES)
    assert sum("twins of seed 3" in line for line in drift) == sum("twins of seed 4" in line for line in drift) == 2
    assert all(0.0 <= float(line.strip("|").split(" | ")[2]) <= 1.0 for line in drift)


def test_a_magnitudes_only_search_is_compared_on_its_magnitudes_alone(tmp_path):
    """``--vary magnitudes`` keeps every op's probability at the start's, so ``--agree`` reads no agreement on
    probabilities into it (its r would be 0 against a null of zeros, p 1) and ``--pushes``, which places
    probabilities among twins, refuses it, where it would read as a push down on every op."""
    _noise_profile_search(tmp_path / "mags3", 3, vary="magnitudes")
    _noise_profile_search(tmp_path / "all4", 4)
    rows = _agreement_rows(pbt_null.agreement_report([tmp_path / "mags3", tmp_path / "all4"], 50, 0))
    probs = [row for row in rows if row[1] == "ops' probabilities (15)"]
    mags = [row for row in rows if row[1] == "magnitudes (12)"]
    assert len(probs) == len(mags) == 2
    assert all(row[2] == "-" and "`mags3` selects magnitudes only" in row[3] for row in probs), probs
    assert all(-1.0 <= float(row[2]) <= 1.0 and 0.0 <= float(row[-1]) <= 1.0 for row in mags), mags
    with pytest.raises(ValueError, match="mags3 does not select"):
        pbt_null.pushes_report([tmp_path / "mags3", tmp_path / "all4"], 10, 0)


def test_agreement_takes_two_folders(tmp_path):
    with pytest.raises(ValueError, match="two search folders, got 1"):
        pbt_null.agreement_report([tmp_path], 10, 0)
    with pytest.raises(SystemExit):
        pbt_null.main(["--agree", str(tmp_path)])


SEARCHES = REPO / "benchmarks" / "results"


@pytest.mark.parametrize("folder", [
    "proxy_population/searches/population-paper",  # scored on the weights, members at explored starts
    "proxy_population/searches/population-paper-ema",  # scored on the weights' average
    "proxy_population/searches/population-paper-same",  # --member-start same
    "paper_scale_cifar10/searches/population-paper4-s1",  # 200 epochs, a round every 3, seed 1
    "proxy_population/searches/population-ta-held",  # --amount held, from the TrivialAugment-like start
    "proxy_population/searches/population-ta-prior",  # --resample prior
])
def test_a_replay_with_the_recorded_scores_writes_the_search_s_schedule_again(folder):
    """Real searches of this package, their committed schedules and scores: the replay must be the driver."""
    import json

    searched = Schedule.load(SEARCHES / folder / "schedule.json")
    rounds = [json.loads(line) for line in (SEARCHES / folder / "metrics.jsonl").read_text().splitlines() if line]
    prob, mag, chain = pbt_null.replay(searched.provenance, [r["val_acc"] for r in rounds])
    assert chain == searched.provenance["lineage"]
    # Schedule files keep 6 significant digits.
    np.testing.assert_allclose(prob, searched.prob, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(mag, searched.mag, rtol=1e-5, atol=1e-6)


def test_a_twin_null_shares_the_search_s_draws_and_not_its_selection(tmp_path):
    folder = SEARCHES / "proxy_population/searches/population-paper"
    searched = Schedule.load(folder / "schedule.json")
    twins = [pbt_null.twin_null_schedule(folder, seed) for seed in (0, 1)]
    assert [t.name for t in twins] == ["twin-population-paper-0", "twin-population-paper-1"]
    assert all(t.provenance["seed"] == 0 and t.provenance["population"] == 4 for t in twins)
    assert [t.provenance["noise_seed"] for t in twins] == [0, 1]
    assert twins[0].provenance["lineage"] != twins[1].provenance["lineage"]  # noise picks other members
    # Round 0 runs the search's own members: the start and its explored copies, drawn from the seed alone.
    start = prior_policy("paper")
    round0 = [start.prob] + [pbt.explore(start.prob, start.mag, pbt.start_rng(0, m))[0] for m in (1, 2, 3)]
    for schedule in (searched, *twins):
        np.testing.assert_allclose(schedule.prob[0], round0[schedule.provenance["lineage"][0]], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="has 50 rounds; got scores for 3"):
        pbt_null.replay(searched.provenance, np.zeros((3, 4)))
    assert pbt_null.main(["--schedules", str(tmp_path), "--twin-of", str(folder), "--count", "2"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["twin-population-paper-0.json", "twin-population-paper-1.json"]
    with pytest.raises(SystemExit):
        pbt_null.main(["--twin-of", str(folder)])


def test_an_amount_matched_twin_augments_like_the_search_and_is_one_of_its_twins(tmp_path):
    """The matched twin is the twin (same draws, noise for scores) nearest the search in how much it augments
    at each epoch: nearer than the ordinary twin, and exactly the twin of its noise seed."""
    folder = SEARCHES / "proxy_population/searches/population-zero-same"
    searched = Schedule.load(folder / "schedule.json")
    matched = pbt_null.matched_twin_schedule(folder, 0, 40)
    prov = matched.provenance
    assert matched.name == "matched-twin-population-zero-same-0" and prov["candidates"] == 40
    assert 0 <= prov["noise_seed"] < 40
    twin = pbt_null.twin_null_schedule(folder, prov["noise_seed"])
    np.testing.assert_array_equal(matched.prob, twin.prob)
    assert prov["lineage"] == twin.provenance["lineage"]

    def distance(schedule):
        a, b = pbt_null.amount_curves(schedule.prob, schedule.mag), pbt_null.amount_curves(searched.prob, searched.mag)
        return float(np.sqrt(((a - b) ** 2).mean(axis=1).sum()))

    assert prov["amount_distance"] == pytest.approx(distance(matched), abs=1e-6)
    assert all(distance(matched) <= distance(pbt_null.twin_null_schedule(folder, s)) + 1e-12 for s in range(40))
    assert prov["amount_distance"] < prov["amount_distance_median"]
    # amount_curves is pbt.amount of every epoch's policy, computed at once.
    curves = pbt_null.amount_curves(searched.prob, searched.mag)
    for epoch in (0, 50, 99):
        np.testing.assert_allclose(curves[:, epoch], pbt.amount(searched.prob[epoch], searched.mag[epoch]))
    with pytest.raises(ValueError, match="candidates must be at least 1, got 0"):
        pbt_null.matched_twin_schedule(folder, 0, 0)
    assert pbt_null.main(["--schedules", str(tmp_path), "--twin-of", str(folder), "--match-amount", "5",
                          "--count", "2"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["matched-twin-population-zero-same-0.json",
                                                          "matched-twin-population-zero-same-5.json"]
    for bad in (["--twin-of", str(folder), "--schedules", str(tmp_path), "--match-amount", "0"],
                ["--schedules", str(tmp_path), "--match-amount", "5"]):
        with pytest.raises(SystemExit):
            pbt_null.main(bad)


def test_a_twin_null_sits_inside_its_own_twins_and_the_report_places_the_search(tmp_path):
    """A twin null, reported as a search, is a draw from the twins' distribution: not extreme. The report
    of a real search carries the twin table."""
    folder = SEARCHES / "proxy_population/searches/population-paper"
    twin = pbt_null.twin_null_schedule(folder, 3)
    (tmp_path / "twin").mkdir()
    twin.save(tmp_path / "twin" / "schedule.json")
    text = pbt_null.searched_report(tmp_path / "twin", 300, 0)
    rows = [line.strip("| ").split(" | ") for line in text.splitlines()
            if line.startswith("| mean p,") or line.startswith("| mean magnitude fraction, all")]
    assert len(rows) == 3
    assert all(0.01 < float(row[-1]) < 0.99 for row in rows), rows
    real = pbt_null.searched_report(folder, 50, 0)
    assert "twin nulls" in real and "| first epoch with mean p >= 0.25 | 54.000 |" in real


def test_the_report_of_a_held_search_leaves_out_what_its_selection_could_not_choose(tmp_path):
    """A search with ``--amount held`` (here its twin, reported as a search) augments as much as every twin by
    construction: the report says so instead of placing it among them."""
    twin = Schedule.load(SEARCHES / "proxy_population/controls/schedules/twin-population-ta-held-0.json")
    assert twin.provenance["amount"] == "held"
    (tmp_path / "held").mkdir()
    twin.save(tmp_path / "held" / "schedule.json")
    text = pbt_null.searched_report(tmp_path / "held", 20, 0)
    assert "Amount held" in text and "amount `held`" in text
    assert "twins below" not in text


def test_the_pushes_report_places_every_op_of_each_search_among_its_twins():
    """``--pushes``: one row per op with each search's place among its twins, and the drift of a walk with no
    signal under each resample, the walk that resamples to its start staying nearer it."""
    folders = [SEARCHES / "proxy_population/searches/population-paper",
               SEARCHES / "proxy_population/searches/population-ta-held"]
    text = pbt_null.pushes_report(folders, 20, 0)
    rows = [line for line in text.splitlines() if line.split(" | ")[0].lstrip("| ") in OP_NAMES]
    assert len(rows) == 15
    for row in rows:
        cells = row.strip("|").split(" | ")
        assert 0.0 <= float(cells[1]) <= 1.0 and 0.0 <= float(cells[3]) <= 1.0
    drift = {}
    for line in text.splitlines():
        cells = line.strip("|").split(" | ")
        if len(cells) == 5 and cells[1].strip("` ") in pbt.RESAMPLES and "start `trivialaugment`" in cells[0]:
            drift[cells[1].strip("` ")] = float(cells[2])
    assert drift["prior"] < drift["uniform"]
    with pytest.raises(ValueError, match="at least two search folders, got 1"):
        pbt_null.pushes_report(folders[:1], 20, 0)


@pytest.mark.parametrize("vary", pbt.VARIES)
def test_a_profile_search_replays_from_its_recorded_targets_and_its_twins_follow_them(tmp_path, data_dir, vary):
    """``--amount profile``: the replay needs no profile file (the provenance holds every round's target), writes
    the search's schedule again from its scores, and its twin nulls hold every round at the search's targets.
    The stand-alone null, whose one explore step cannot know the round, refuses it. With ``--vary magnitudes``
    (recorded too) every epoch of the twin holds the start's probabilities at its target."""
    import json

    import torch
    from conftest import load_cifar_batch

    from hba_augment.datasets import ImageData
    from hba_augment.search.loop import SearchConfig
    from hba_augment.search.population import PopulationConfig, run_population_search

    batch = data_dir / "cifar-10-batches-py" / "data_batch_1"
    if not batch.is_file():
        pytest.skip(f"lossless CIFAR-10 batch not found at {batch}")
    images, labels = load_cifar_batch(batch, 60)
    classes = [str(c) for c in range(10)]
    data = (ImageData(images[:40], torch.tensor(labels[:40]), classes),
            ImageData(images[40:60], torch.tensor(labels[40:60]), classes))
    levels = np.linspace(0.1, 0.6, 4)
    ramp = [prior_policy(f"uniform:{f}") for f in levels]
    profile = tmp_path / "ramp.json"
    Schedule(np.stack([p.prob for p in ramp]), np.stack([p.mag for p in ramp]), name="ramp",
             count_probs=(0.5, 0.5)).save(profile)
    search = SearchConfig.from_preset("cifar10", data_dir="unused", model="wrn-10-1", epochs=4, train_size=40,
                                      val_size=20, batch_size=20, init="trivialaugment", seed=2)
    config = PopulationConfig(search=search, population=4, exploit_every=1, population_procs=0, amount="profile",
                              amount_profile=str(profile), vary=vary)
    folder = tmp_path / "search"
    result = run_population_search(config, folder, data=data, plot=False, log=lambda m: None)
    profile.unlink()  # what follows reads the provenance only
    searched = Schedule.load(folder / "schedule.json")
    rounds = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line]
    prob, mag, chain = pbt_null.replay(searched.provenance, [r["val_acc"] for r in rounds])
    assert chain == result.schedule.provenance["lineage"]
    np.testing.assert_allclose(prob, searched.prob, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(mag, searched.mag, rtol=1e-5, atol=1e-6)
    twin = pbt_null.twin_null_schedule(folder, 0)
    assert twin.provenance["amount"] == "profile"
    assert twin.provenance["vary"] == vary
    for e, level in enumerate(levels):
        assert pbt.amount(twin.prob[e], twin.mag[e]) == pytest.approx((level, level), abs=1e-5)
    # A twin whose lineage stays with member 0 keeps the start's probabilities under either; over ten, only
    # a magnitudes-only search's twins all do.
    start = prior_policy("trivialaugment")
    kept = np.stack([pbt.hold_amount(start.prob, start.mag, (level, level))[0] for level in levels])
    twins = [pbt_null.twin_null_schedule(folder, k).prob for k in range(10)]
    assert all(np.allclose(p, kept, atol=1e-9) for p in twins) == (vary == "magnitudes")
    with pytest.raises(ValueError, match="its twin null"):
        pbt_null.null_schedule("trivialaugment", 0, population=4, epochs=4, every=1, amount="profile")
