"""How much of a PBT schedule could be chance? A population search with no signal, against PBA's schedule.

Issue 20's hypothesis: a population search learns where its members' validation accuracies say which policy
trains the better network, but with a few members scored on a few thousand images every 3 epochs, those
differences may be mostly noise (one binomial standard error at 80% accuracy on 5,000 images is 0.57
points). Then the schedule it writes, the lineage of the final best member, is the path of PBA's explore
step under random selection: a random walk in each hyperparameter, clipped at the ends of its range. From
PBA's start (every probability and magnitude 0) a clipped walk can only drift up, so a *ramp* (little
augmentation early, more later) needs no signal at all.

This script runs that null model: truncation selection and the lineage of :mod:`hba_augment.search.pbt`,
with PBA's own explore on its integer levels (probabilities 0..10, magnitudes 0..9, every level 0 at the
start: ``pba/search.py``, ``pba/setup.py``) for PBA's setting, and this package's explore for its own
searches; the population's scores are independent random numbers every round, so selection carries no
information. It reports, over many replicates, the lineage's mean
probability and mean magnitude fraction at a few epochs (mean and 5-95% band), beside the same numbers of
PBA's published Reduced CIFAR-10 schedule (16 WRN-40-2 trials, 200 epochs; read in PBA's own level space:
probability ``p / 10``, magnitude ``level / 10``), and, at the last epoch, how unequal the ops are (the
standard deviation over the 15 ops of each op's mean probability over its two copies): with no signal, ops
are exchangeable, so a learned preference for some ops shows as more spread than the null's.

Where PBA's numbers lie inside the null's bands, that statistic of its schedule is what a search without
signal also produces. No network is trained; it runs in seconds.

Four more uses of the same null, for this package's own population searches:

- ``--searched DIR``: a finished search (``DIR/schedule.json``, ``DIR/metrics.jsonl``) against null searches of
  its own settings: is what its schedule changed more than its explore step's drift, and did its members'
  validation accuracies rank with their policies' strength at all?
- ``--agree DIR DIR``: two finished searches (say, two seeds of one setting): do they prefer the same ops
  more than two null searches do (an ``--amount profile`` search's null is its twins)? A selection that
  follows a signal steers both the same way.
- ``--pushes DIR DIR ...``: several finished searches: which ops does selection move the same way from its
  own walk? Each op's probability in each search is placed among the search's twin nulls.
- ``--schedules DIR``: null schedules of one search setting, to train as controls beside the searched one
  (``gpu_campaign.py`` writes one per population search as ``null:<search>``); with ``--twin-of SEARCH``, its
  twin nulls (its own explore draws, noise for its scores), and with ``--match-amount N`` too, the one of N
  twins that augments most like the search at every epoch, so that training it beside the search separates
  what selection chose of *which* ops from *how much* augmentation.

Usage::

    python benchmarks/pbt_null.py --replicates 1000 --out benchmarks/results/pbt_null.md
    python benchmarks/pbt_null.py --searched runs/population-ta --out runs/population-ta/null.md
    python benchmarks/pbt_null.py --agree runs/population-ta runs/population-ta-seed1 --out runs/agreement.md
    python benchmarks/pbt_null.py --schedules runs/nulls --count 3 --init trivialaugment --population 4 \
        --epochs 100 --every 2
    python benchmarks/pbt_null.py --schedules runs/nulls --twin-of runs/population-ta --match-amount 2000 --count 1
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import sys
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from hba_augment._runner import source_commit
from hba_augment._space import MAGNITUDE_OPS, NUM_COPIES, NUM_OPS
from hba_augment.functional import OP_NAMES
from hba_augment.schedule import Schedule
from hba_augment.search import pbt
from hba_augment.search.priors import prior_policy

sys.path.insert(0, str(Path(__file__).resolve().parent))
from control_schedules import PBA_LOG, PBA_OPS, parse_pba_log

#: PBA's Reduced CIFAR-10 search: 16 trials, 200 epochs, an exploit every 3 epochs.
PBA_POPULATION, PBA_EPOCHS, PBA_EVERY = 16, 200, 3
REPORT_EPOCHS = (0, 10, 25, 50, 100, 150, 199)
#: A schedule's "ramp epoch": the first epoch whose mean probability (or magnitude fraction) reaches this.
RAMP_LEVEL = 0.25
#: Greedy signals tried beside the null (see :func:`null_lineage`).
GREEDS = (0.0, 0.5, 1.0, 2.0, 4.0)


def pba_fractions(path: Path = PBA_LOG, epochs: int = PBA_EPOCHS) -> tuple[np.ndarray, np.ndarray]:
    """PBA's published schedule in its own level space: ``(prob, mag)`` fractions, ``(epochs, 2, 15)`` each, in
    this package's op order; the three ops without a magnitude get NaN magnitudes."""
    policies = np.asarray(parse_pba_log(path, epochs), dtype=np.float64).reshape(epochs, NUM_COPIES, len(PBA_OPS), 2)
    order = [PBA_OPS.index(name) for name in OP_NAMES]  # PBA's op order -> this package's
    prob = policies[:, :, order, 0] / 10.0
    mag = policies[:, :, order, 1] / 10.0
    mag[:, :, [k for k in range(NUM_OPS) if k not in MAGNITUDE_OPS]] = np.nan
    return prob, mag


#: PBA's explore (``pba/search.py``): probabilities on levels 0..10, magnitudes on 0..9; a value is resampled
#: uniformly with probability 0.2, else shifted by 0-3 levels in a random direction and clipped.
PBA_PROB_TOP, PBA_MAG_TOP, PBA_RESAMPLE, PBA_MAX_SHIFT = 10, 9, 0.2, 3

Policy = tuple[np.ndarray, np.ndarray]
Explore = Callable[[np.ndarray, np.ndarray, np.random.Generator], Policy]


def _pba_levels(levels: np.ndarray, top: int, rng: np.random.Generator) -> np.ndarray:
    resample = rng.random(levels.shape) < PBA_RESAMPLE
    fresh = rng.integers(0, top + 1, size=levels.shape)
    amount = rng.integers(0, PBA_MAX_SHIFT + 1, size=levels.shape)
    down = rng.random(levels.shape) < 0.5
    shifted = np.where(down, np.maximum(0, levels - amount), np.minimum(top, levels + amount))
    return np.where(resample, fresh, shifted)


def pba_explore(prob: np.ndarray, mag: np.ndarray, rng: np.random.Generator) -> Policy:
    """PBA's own explore step on integer levels: ``prob`` ``(2, 15)`` in 0..10, ``mag`` ``(2, 12)`` in 0..9."""
    return _pba_levels(prob, PBA_PROB_TOP, rng), _pba_levels(mag, PBA_MAG_TOP, rng)


def pba_start() -> Policy:
    """PBA's starting policy (``pba/setup.py``): every level 0."""
    return np.zeros((NUM_COPIES, NUM_OPS), dtype=np.int64), np.zeros((NUM_COPIES, len(MAGNITUDE_OPS)), dtype=np.int64)


def _pba_fractions(prob: np.ndarray, mag: np.ndarray) -> Policy:
    return prob / 10.0, mag / 10.0  # as PBA's log is read (pba_fractions)


def _hba_fractions(prob: np.ndarray, mag: np.ndarray) -> Policy:
    return prob, pbt.mag_fractions(mag)


def _steps(cfg: dict) -> dict:
    """The explore settings of a search of the settings ``cfg`` (:func:`_null_settings`), as keyword arguments
    of :func:`~hba_augment.search.pbt.explore`, :func:`~hba_augment.search.pbt.start_policies` and
    :func:`~hba_augment.search.pbt.exploit`, less what is held (:func:`_holds`)."""
    prior = prior_policy(cfg["init"])
    return {"resample_prob": cfg["resample_prob"], "max_shift": cfg["max_shift"],
            "anchor": pbt.resample_anchor(cfg["resample"], prior), "vary": cfg["vary"]}


def _holds(cfg: dict, starts: Sequence[int]) -> list[tuple[float, float]] | None:
    """What a search of the settings ``cfg`` held each round's policies to (``None``: free). A ``--amount
    profile`` search recorded its targets (``amount_targets``), so that no profile file is needed here."""
    if cfg["amount"] == "profile":
        if len(cfg["amount_targets"]) != len(starts):
            raise ValueError(f"amount_targets holds {len(cfg['amount_targets'])} rounds, the search has {len(starts)}")
        return [tuple(t) for t in cfg["amount_targets"]]
    return pbt.amount_targets(cfg["amount"], prior_policy(cfg["init"]), starts)


def _explore_of(cfg: dict) -> Explore:
    """This package's explore step (:func:`hba_augment.search.pbt.explore`) with the settings ``cfg`` of a search
    (:func:`_null_settings`): what a ``--amount held`` search holds, what a ``--resample prior`` one resamples to.
    A ``--amount profile`` search's hold moves from round to round, which this one step cannot know: its null
    is its twin (:func:`twin_null_schedule`)."""
    if cfg["amount"] == "profile":
        raise ValueError("a null of an --amount profile search is its twin null (--twin-of SEARCH): its targets "
                         "move from round to round")
    hold = pbt.amount_targets(cfg["amount"], prior_policy(cfg["init"]), [0])
    return functools.partial(pbt.explore, **_steps(cfg), hold=None if hold is None else hold[0])


def null_lineage(start: Policy, explore: Explore, fractions: Callable[[np.ndarray, np.ndarray], Policy],
                 rng: np.random.Generator, *, population: int, epochs: int, every: int,
                 explore_start: bool, greed: float = 0.0, raw: bool = False) -> Policy:
    """One population search whose scores are pure noise: the final best member's lineage, per epoch.

    Args:
        start: the starting policy, in ``explore``'s representation.
        explore: the explore step (:func:`hba_augment.search.pbt.explore`, or :func:`pba_explore`).
        fractions: a policy of that representation as ``(prob, mag)`` fractions of the ranges, ``(2, 15)``
            and ``(2, 12)``.
        rng: every draw (explore, scores, donors).
        population: members.
        epochs, every: the search's length and epochs per round.
        explore_start: members 1.. start at explored copies of the start (this package's driver) instead of
            at the start itself (PBA's).
        greed: a greedy signal instead of none: each score is a uniform draw minus ``greed`` times the
            member's mean probability (less augmentation scores higher, as a short horizon favours).
        raw: return the lineage in ``explore``'s own representation instead of as fractions (to write it
            as a schedule, :func:`null_schedule`).

    Returns:
        ``(prob, mag_fraction)``: ``(epochs, 2, 15)`` and ``(epochs, 2, 12)``; with ``raw``, ``(prob, mag)``
        per epoch in ``explore``'s representation.
    """
    members = [start] + [explore(*start, rng) if explore_start else start for _ in range(1, population)]
    starts = pbt.round_starts(epochs, every)
    plans, parents = [list(members)], [list(range(population))]
    for _ in starts[1:]:
        strength = np.array([fractions(*member)[0].mean() for member in members])
        copies = pbt.truncation_selection(rng.random(population) - greed * strength, rng)
        row = list(range(population))
        for loser, donor in copies:
            row[loser] = donor
            members[loser] = explore(*plans[-1][donor], rng)
        parents.append(row)
        plans.append(list(members))
    best = int(rng.integers(population))  # the last scores are noise too
    chain = pbt.lineage(parents, best)
    bounds = [*starts, epochs]
    per_round = [plans[r][m] if raw else fractions(*plans[r][m]) for r, m in enumerate(chain)]
    lengths = [bounds[r + 1] - bounds[r] for r in range(len(starts))]
    prob = np.concatenate([np.repeat(p[None], n, 0) for (p, _), n in zip(per_round, lengths, strict=True)])
    mag = np.concatenate([np.repeat(m[None], n, 0) for (_, m), n in zip(per_round, lengths, strict=True)])
    return prob, mag


def null_schedule(init: str, seed: int, *, population: int, epochs: int, every: int,
                  resample_prob: float = pbt.EXPLORE_RESAMPLE_PROB, max_shift: int = pbt.EXPLORE_MAX_SHIFT,
                  count_probs: tuple[float, ...] | None = None,
                  member_start: str = pbt.DEFAULT_MEMBER_START, amount: str = "free",
                  resample: str = "uniform", vary: str = "all") -> Schedule:
    """The schedule a population search of this package writes when its scores carry no signal.

    The same start (``init``; members 1.. at explored copies of it, or at it, as ``member_start`` says),
    explore (:func:`hba_augment.search.pbt.explore`),
    truncation selection and lineage as ``hba-augment search --objective population``, with noise for scores. Trained like a searched schedule, it is the control that says whether a search's
    gain came from its selection or from the variation its explore step alone puts into a schedule.

    Args:
        init: the search's ``--init``.
        seed: seeds every draw.
        population, epochs, every: the search's ``--population``, ``--epochs`` and epochs per round.
        resample_prob, max_shift: its explore step's settings.
        count_probs: its ``count_probs`` if it overrode the prior's (``None``: the prior's).
        member_start: its ``--member-start``, one of :data:`~hba_augment.search.pbt.MEMBER_STARTS`.
        amount: its ``--amount``, one of :data:`~hba_augment.search.pbt.AMOUNTS`.
        resample: its ``--resample``, one of :data:`~hba_augment.search.pbt.RESAMPLES`.
        vary: its ``--vary``, one of :data:`~hba_augment.search.pbt.VARIES`.
    """
    pbt.check_settings(member_start=member_start, amount=amount, resample=resample, vary=vary)
    prior = prior_policy(init)
    rng = np.random.default_rng(seed)
    explore = _explore_of({"init": init, "resample_prob": resample_prob, "max_shift": max_shift, "amount": amount,
                           "resample": resample, "vary": vary})
    prob, mag = null_lineage((prior.prob, prior.mag), explore, _hba_fractions, rng, population=population,
                             epochs=epochs, every=every, explore_start=member_start == "explored", raw=True)
    counts = prior.count_probs if count_probs is None else tuple(count_probs)
    return Schedule(prob, mag, name=f"null-{init.replace(':', '-')}-{seed}", count_probs=counts,
                    provenance={"control": "a population search whose scores are noise (benchmarks/pbt_null.py)",
                                "init": init, "seed": seed, "population": population, "search_epochs": epochs,
                                "exploit_every": every, "member_start": member_start, "amount": amount,
                                "resample": resample, "vary": vary,
                                "explore": {"resample_prob": resample_prob, "max_shift": max_shift},
                                "note": "a comparison control for benchmarks; never shipped"})


def _null_settings(prov: dict) -> dict:
    """The provenance fields a null search depends on (not the score, not the seed)."""
    explore = prov.get("explore", {})
    return {"init": prov["init"], "population": prov["population"], "search_epochs": prov["search_epochs"],
            "exploit_every": prov["exploit_every"],
            # Searches from before --member-start existed ran with "explored" and do not record it.
            "member_start": prov.get("member_start", "explored"),
            # and before --amount, with "free".
            "amount": prov.get("amount", "free"),
            **({"amount_targets": prov["amount_targets"]} if prov.get("amount") == "profile" else {}),
            # and before --resample, with "uniform".
            "resample": prov.get("resample", "uniform"),
            # and before --vary, with "all".
            "vary": prov.get("vary", "all"),
            "resample_prob": explore.get("resample_prob", pbt.EXPLORE_RESAMPLE_PROB),
            "max_shift": explore.get("max_shift", pbt.EXPLORE_MAX_SHIFT)}


def replay(prov: dict, scores: Sequence[Sequence[float]]) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """The schedule a population search of ``prov``'s settings *and seed* writes when its members score
    ``scores`` (one row per round): the driver's own steps with its own draws (:func:`~hba_augment.search.pbt.start_policies`,
    :func:`~hba_augment.search.pbt.exploit`, :func:`~hba_augment.search.pbt.lineage_policies`). With the scores the search recorded, it writes the search's
    schedule again (tested); with noise for scores, the search's *twin null*: the explore draws the search
    made, without its signal.

    Returns:
        ``(prob, mag, lineage)``: per epoch, ``(epochs, 2, 15)`` each in this package's values, and the
        final best member's lineage (one member per round).
    """
    cfg = _null_settings(prov)
    seed, n = prov["seed"], cfg["population"]
    prior = prior_policy(cfg["init"])
    steps = _steps(cfg)
    starts = pbt.round_starts(cfg["search_epochs"], cfg["exploit_every"])
    holds, hold_all = _holds(cfg, starts), cfg["amount"] == "profile"
    prob, mag = pbt.start_policies(prior.prob, prior.mag, n, seed, member_start=cfg["member_start"], **steps,
                                   hold=None if holds is None else holds[0], hold_all=hold_all)
    if len(scores) != len(starts):
        raise ValueError(f"a search of {cfg['search_epochs']} epochs, a round every {cfg['exploit_every']}, has "
                         f"{len(starts)} rounds; got scores for {len(scores)}")
    probs, mags, parents, plan_parents = [], [], [], list(range(n))
    for r, row in enumerate(scores):
        probs.append(prob)
        mags.append(mag)
        parents.append(plan_parents)
        if r + 1 < len(starts):  # the driver does not exploit after its last round
            plan_parents, prob, mag, _ = pbt.exploit(prob, mag, row, seed, r,
                                                     quantile=prov.get("truncation_quantile", pbt.TRUNCATION_QUANTILE),
                                                     **steps, hold=None if holds is None else holds[r + 1],
                                                     hold_all=hold_all)
    chain = pbt.lineage(parents, pbt.ranking(scores[-1])[0])
    return (*pbt.lineage_policies(probs, mags, chain, starts, cfg["search_epochs"]), chain)


def _twin_noise(cfg: dict, seed: int) -> np.ndarray:
    """The scores of the twin null of noise seed ``seed``: uniform noise, ``(rounds, population)``."""
    rounds = len(pbt.round_starts(cfg["search_epochs"], cfg["exploit_every"]))
    return np.random.default_rng(seed).random((rounds, cfg["population"]))


def twin_null_schedule(folder: Path, seed: int) -> Schedule:
    """The twin null of the population search in ``folder``: :func:`replay` of its settings and seed with
    uniform noise (drawn from ``seed``) for every round's scores. It shares the search's explore draws, so
    trained beside the search it is a paired control: what the search's selection added to its own walk."""
    searched = Schedule.load(folder / "schedule.json")
    prov = searched.provenance
    cfg = _null_settings(prov)
    prob, mag, chain = replay(prov, _twin_noise(cfg, seed))
    return Schedule(prob, mag, name=f"twin-{folder.name}-{seed}", count_probs=searched.count_probs,
                    provenance={"control": "the twin null of a population search: its own explore draws, noise for "
                                "its scores (benchmarks/pbt_null.py)", "search": str(folder),
                                # "seed" is whose draws it makes (the search's), as in a search's provenance.
                                "seed": prov["seed"], "noise_seed": seed, "lineage": chain, **cfg,
                                "note": "a comparison control for benchmarks; never shipped"})


def amount_curves(prob: np.ndarray, mag: np.ndarray) -> np.ndarray:
    """How much a per-epoch schedule (``(epochs, 2, 15)`` each, this package's values) augments at each epoch:
    ``(2, epochs)``, :func:`~hba_augment.search.pbt.amount` of every epoch's policy at once (its mean
    probability and mean magnitude fraction)."""
    return np.stack([np.asarray(prob).mean(axis=(1, 2)), pbt.mag_fractions(mag).mean(axis=(1, 2))])


def matched_twin_schedule(folder: Path, seed: int, candidates: int) -> Schedule:
    """The twin null of the population search in ``folder`` (:func:`twin_null_schedule`, noise seeds ``seed``
    ... ``seed + candidates - 1``) that augments most like the search at every epoch: the least root mean
    square distance between the two schedules' :func:`amount_curves`.

    Selection can win over an ordinary twin by choosing *how much* to augment (searches on the CPU proxy
    augmented less than most of their twins, and that proxy rewards less augmentation) or by choosing *which*
    ops when. Trained beside the search, this twin holds the first (nearly) equal, so what is left between
    them is the second.
    """
    if candidates < 1:
        raise ValueError(f"candidates must be at least 1, got {candidates}")
    searched = Schedule.load(folder / "schedule.json")
    prov = searched.provenance
    cfg = _null_settings(prov)
    target = amount_curves(searched.prob, searched.mag)
    distances = []
    for s in range(seed, seed + candidates):
        prob, mag, _ = replay(prov, _twin_noise(cfg, s))
        distances.append(float(np.sqrt(((amount_curves(prob, mag) - target) ** 2).mean(axis=1).sum())))
    best = int(np.argmin(distances))
    twin = twin_null_schedule(folder, seed + best)
    provenance = {**twin.provenance,
                  "control": "the amount-matched twin null of a population search: of its twin nulls (its own explore "
                             "draws, noise for its scores), the one whose per-epoch mean probability and mean magnitude "
                             "fraction are nearest the search's (benchmarks/pbt_null.py)",
                  "candidates": candidates, "amount_distance": round(distances[best], 6),
                  "amount_distance_median": round(float(np.median(distances)), 6)}
    return Schedule(twin.prob, twin.mag, name=f"matched-twin-{folder.name}-{seed}", count_probs=twin.count_probs,
                    provenance=provenance)


def ramp_epoch(mean: np.ndarray, level: float = RAMP_LEVEL) -> np.ndarray:
    """The first epoch at which each row of ``mean`` (``(..., epochs)``) reaches ``level`` (``epochs`` if never)."""
    reached = np.asarray(mean) >= level
    return np.where(reached.any(axis=-1), reached.argmax(axis=-1), reached.shape[-1])


def changes(prob: np.ndarray, mag: np.ndarray) -> int:
    """How many times a per-epoch schedule ``(epochs, ...)`` changes its policy."""
    flat = np.concatenate([np.asarray(prob).reshape(len(prob), -1), np.nan_to_num(np.asarray(mag)).reshape(len(mag), -1)], 1)
    return int((np.diff(flat, axis=0) != 0).any(axis=1).sum())


def op_spread(prob: np.ndarray) -> float:
    """Standard deviation over the 15 ops of each op's probability averaged over its two copies."""
    return float(np.asarray(prob).mean(axis=-2).std())


def simulate(init: str, replicates: int, seed: int, *, population: int, explore_start: bool,
             greed: float = 0.0) -> dict[str, np.ndarray]:
    """``replicates`` null searches from ``init``: ``"pba"`` (PBA's search: its zero start and its explore on
    integer levels) or a ``--init`` name (this package's search: that prior, :func:`~hba_augment.search.pbt.explore`).
    Returns each lineage's per-epoch mean probability and mean magnitude fraction, ``(replicates, epochs)``,
    and its last-epoch op spread and number of policy changes."""
    if init == "pba":
        start, explore, fractions = pba_start(), pba_explore, _pba_fractions
    else:
        prior = prior_policy(init)
        start, explore, fractions = (prior.prob, prior.mag), pbt.explore, _hba_fractions
    rng = np.random.default_rng(seed)
    mean_prob, mean_mag, spread, changed = [], [], [], []
    for _ in range(replicates):
        prob, mag = null_lineage(start, explore, fractions, rng, population=population, epochs=PBA_EPOCHS,
                                 every=PBA_EVERY, explore_start=explore_start, greed=greed)
        mean_prob.append(prob.mean(axis=(1, 2)))
        mean_mag.append(mag.mean(axis=(1, 2)))
        spread.append(op_spread(prob[-1]))
        changed.append(changes(prob, mag))
    return {"prob": np.array(mean_prob), "mag": np.array(mean_mag), "spread": np.array(spread),
            "changes": np.array(changed)}


def _band(values: np.ndarray) -> str:
    lo, hi = np.percentile(values, [5, 95])
    return f"{values.mean():.3f} [{lo:.3f}, {hi:.3f}]"


def report(replicates: int, seed: int) -> str:
    pba_prob, pba_mag = pba_fractions()
    pba = {"prob": pba_prob.mean(axis=(1, 2)), "mag": np.nanmean(pba_mag, axis=(1, 2))}
    nulls = {
        "PBA's search (zero start, its explore), 16 members": simulate("pba", replicates, seed,
                                                                        population=PBA_POPULATION,
                                                                        explore_start=False),
        "TrivialAugment-like start, 8 members (the queued population-ta)": simulate(
            "trivialaugment", replicates, seed + 1, population=8, explore_start=True),
        "paper's start, 4 members, --member-start explored (population-paper4)": simulate(
            "paper", replicates, seed + 4, population=4, explore_start=True),
        "paper's start, 4 members, --member-start same": simulate(
            "paper", replicates, seed + 5, population=4, explore_start=False),
    }
    commit = source_commit()
    lines = [
        "# A population search with no signal, beside PBA's published schedule (`benchmarks/pbt_null.py`)",
        "",
        f"- Command: `python benchmarks/pbt_null.py --replicates {replicates} --seed {seed}`",
        f"- Commit: {commit or 'unknown'}; machine: {platform.machine()} {platform.system()}, numpy only (no training)",
        f"- Date: {datetime.now(timezone.utc).isoformat(timespec='seconds')}",
        f"- Null model: {PBA_EPOCHS} epochs, an exploit every {PBA_EVERY}, truncation selection "
        "(`hba_augment.search.pbt`), scores independent uniform noise every round; the schedule is the lineage "
        "of a random final member. Explore: PBA's own on its integer levels for PBA's setting, this package's "
        f"(`pbt.explore`) for its searches. {replicates} replicates; each cell: mean [5%, 95%].",
        "- PBA: `rcifar10_16_wrn.txt`, read as fractions of its own levels (probability p/10, magnitude l/10).",
        "",
        "Mean probability over the 30 slots:",
        "",
        "| epoch | PBA's schedule | " + " | ".join(f"null: {name}" for name in nulls) + " |",
        "|---|---|" + "---|" * len(nulls),
    ]
    for e in REPORT_EPOCHS:
        lines.append(f"| {e} | {pba['prob'][e]:.3f} | " + " | ".join(_band(n["prob"][:, e]) for n in nulls.values()) + " |")
    lines += ["", "Mean magnitude fraction over the 24 magnitude slots:", "",
              "| epoch | PBA's schedule | " + " | ".join(f"null: {name}" for name in nulls) + " |",
              "|---|---|" + "---|" * len(nulls)]
    for e in REPORT_EPOCHS:
        lines.append(f"| {e} | {pba['mag'][e]:.3f} | " + " | ".join(_band(n["mag"][:, e]) for n in nulls.values()) + " |")
    lines += ["", f"First epoch with mean probability >= {RAMP_LEVEL} (PBA's schedule: "
              f"{int(ramp_epoch(pba['prob']))}):", "", "| null | mean [5%, 95%] |", "|---|---|"]
    lines += [f"| {name} | {_band(ramp_epoch(n['prob']).astype(float))} |" for name, n in nulls.items()]
    zero = nulls["PBA's search (zero start, its explore), 16 members"]
    lines += ["", "PBA's schedule against the null of PBA's search (fraction of null replicates at "
              "least as extreme, one-sided):", "",
              "| statistic | PBA | null: mean [5%, 95%] | null at least as extreme |", "|---|---|---|---|"]
    stats = [
        (f"first epoch with mean probability >= {RAMP_LEVEL}", ramp_epoch(pba["prob"]), ramp_epoch(zero["prob"])),
        (f"first epoch with mean magnitude fraction >= {RAMP_LEVEL}", ramp_epoch(pba["mag"]), ramp_epoch(zero["mag"])),
        ("policy changes over the 200 epochs", changes(pba_prob, pba_mag), zero["changes"]),
        ("last epoch: std over the 15 ops of each op's probability (mean of its two copies)", op_spread(pba_prob[-1]),
         zero["spread"]),
    ]
    for name, value, null in stats:
        lines.append(f"| {name} | {float(value):.3g} | {_band(null.astype(float))} | {(null >= value).mean():.3f} |")
    lines += ["", f"With a greedy signal instead (each score a uniform draw minus `greed` times the member's mean "
              f"probability; {replicates // 4} replicates each): which greed makes PBA's probabilities ramp as late as "
              "they did, and what the same greed does from the TrivialAugment-like start:", "",
              "| greed | PBA's search: first epoch with mean p >= 0.25 | its mean p at epoch 199 | "
              "TA-like start, 8 members: mean p at epoch 50 | at epoch 199 |", "|---|---|---|---|---|"]
    for greed in GREEDS:
        g_pba = simulate("pba", replicates // 4, seed + 2, population=PBA_POPULATION, explore_start=False, greed=greed)
        g_ta = simulate("trivialaugment", replicates // 4, seed + 3, population=8, explore_start=True, greed=greed)
        lines.append(f"| {greed:g} | {_band(ramp_epoch(g_pba['prob']).astype(float))} | {_band(g_pba['prob'][:, -1])} | "
                     f"{_band(g_ta['prob'][:, 50])} | {_band(g_ta['prob'][:, -1])} |")
    lines.append(f"\n(PBA's schedule: first epoch with mean p >= 0.25 is {int(ramp_epoch(pba['prob']))}, mean p at "
                 f"epoch 199 {pba['prob'][-1]:.3f}.)\n")
    return "\n".join(lines)


def op_mix(prob: np.ndarray, mag: np.ndarray, start: Policy) -> dict[str, float]:
    """How far a per-epoch schedule (``(epochs, 2, 15)`` each, this package's values) moved from ``start``,
    averaged over its epochs: per op, the mean probability over time and both copies, and per magnitude slot,
    the mean fraction of its range."""
    op = np.asarray(prob).mean(axis=(0, 1))
    move = op - np.asarray(start[0]).mean(axis=0)
    frac = pbt.mag_fractions(mag).mean(axis=0)
    return {
        "ops' mean p: summed absolute change": float(np.abs(move).sum()),
        "ops' mean p: largest absolute change": float(np.abs(move).max()),
        "ops' mean p: std over the 15 ops": float(op.std()),
        "mean p over all slots: absolute change": float(abs(np.asarray(prob).mean() - np.asarray(start[0]).mean())),
        "magnitude fractions: summed absolute change (24 slots)":
            float(np.abs(frac - pbt.mag_fractions(start[1])).sum()),
        "mean magnitude fraction: absolute change": float(abs(frac.mean() - pbt.mag_fractions(start[1]).mean())),
    }


def _ranks(x: np.ndarray) -> np.ndarray:
    return np.argsort(np.argsort(x)).astype(float)  # ties (rare for accuracies of 10,000 images) ranked by order


def selection_signal(rounds: list[dict]) -> dict[str, tuple[float, float]]:
    """From a population search's ``metrics.jsonl`` rounds: whether its members' validation accuracies rank
    with their policies' strength (per round, Spearman's rho between ``val_acc`` and each member's mean
    probability, resp. mean magnitude fraction; mean and standard error over rounds), and how far apart
    the members' accuracies are (max - min, points, first and last ten rounds)."""
    rho_p = np.array([np.corrcoef(_ranks(np.array(r["val_acc"])), _ranks(np.array(r["mean_prob"])))[0, 1]
                      for r in rounds])
    rho_m = np.array([np.corrcoef(_ranks(np.array(r["val_acc"])), _ranks(np.array(r["mean_mag_fraction"])))[0, 1]
                      for r in rounds])
    spread = np.array([100 * (max(r["val_acc"]) - min(r["val_acc"])) for r in rounds])

    def mean_se(x: np.ndarray) -> tuple[float, float]:
        x = x[np.isfinite(x)]
        return float(x.mean()), float(x.std(ddof=1) / np.sqrt(len(x)))

    return {"rho(val acc, mean p)": mean_se(rho_p), "rho(val acc, mean magnitude)": mean_se(rho_m),
            "accuracy spread, first 10 rounds (points)": mean_se(spread[:10]),
            "accuracy spread, last 10 rounds (points)": mean_se(spread[-10:])}


def copy_noise(rounds: list[dict], parts: int = 4) -> list[dict[str, float]]:
    """How far apart one round leaves two members that started it from the same weights: after a copy in
    round ``r`` (``to`` took ``from``'s weights), their validation accuracies after round ``r + 1`` differ by
    the round's noise (their own random streams) plus what their policies did (the copy's explored policy
    against the donor's). Donors that themselves copied in round ``r`` are left out. Per consecutive
    ``parts`` of the search: pairs, the standard deviation and the mean of ``acc[to] - acc[from]`` (points)
    and the mean of ``mean_prob[to] - mean_prob[from]``."""
    pairs = []  # (round, accuracy difference, mean-probability difference)
    for r in range(len(rounds) - 1):
        copies = rounds[r].get("copies", [])
        copiers = {c["to"] for c in copies}
        for c in copies:
            if c["from"] in copiers:
                continue
            acc, prob = rounds[r + 1]["val_acc"], rounds[r + 1]["mean_prob"]
            pairs.append((r + 1, 100 * (acc[c["to"]] - acc[c["from"]]), prob[c["to"]] - prob[c["from"]]))
    out = []
    for q in range(parts):
        lo, hi = q * len(rounds) / parts, (q + 1) * len(rounds) / parts
        sel = np.array([(d, dp) for r, d, dp in pairs if lo <= r < hi]).reshape(-1, 2)
        out.append({"first round": int(np.ceil(lo)), "pairs": len(sel),
                    "sd": float(np.std(sel[:, 0], ddof=1)) if len(sel) > 1 else float("nan"),
                    "mean": float(sel[:, 0].mean()) if len(sel) else float("nan"),
                    "mean p difference": float(sel[:, 1].mean()) if len(sel) else float("nan")})
    return out


def amounts(prob: np.ndarray, mag: np.ndarray) -> dict[str, float]:
    """How much a per-epoch schedule (``(epochs, 2, 15)`` each, this package's values) augments: its mean
    probability (all epochs, second half), mean magnitude fraction, and the epoch its mean probability first
    reaches :data:`RAMP_LEVEL`."""
    per_epoch, mag_per_epoch = amount_curves(prob, mag)
    return {"mean p, all epochs": float(per_epoch.mean()),
            "mean p, second half": float(per_epoch[len(per_epoch) // 2:].mean()),
            "mean magnitude fraction, all epochs": float(mag_per_epoch.mean()),
            f"first epoch with mean p >= {RAMP_LEVEL}": float(ramp_epoch(per_epoch))}


def twin_policies(prov: dict, replicates: int, seed: int) -> Iterator[Policy]:
    """``(prob, mag)`` per epoch of ``replicates`` twin nulls of a search: :func:`replay` of its settings and
    seed with every round's scores uniform noise drawn from one stream seeded by ``seed``."""
    cfg = _null_settings(prov)
    rounds = len(pbt.round_starts(cfg["search_epochs"], cfg["exploit_every"]))
    rng = np.random.default_rng(seed)
    for _ in range(replicates):
        yield replay(prov, rng.random((rounds, cfg["population"])))[:2]


def twin_amounts(prov: dict, replicates: int, seed: int) -> list[dict[str, float]]:
    """:func:`amounts` of ``replicates`` :func:`twin_policies` of a search."""
    return [amounts(prob, mag) for prob, mag in twin_policies(prov, replicates, seed)]


def searched_report(folder: Path, replicates: int, seed: int) -> str:
    """A population search's schedule (``folder/schedule.json``) and rounds (``folder/metrics.jsonl``)
    against ``replicates`` null searches of its own settings: is what it wrote more than its explore step's
    drift, and did its selection see its policies at all?"""
    schedule = Schedule.load(folder / "schedule.json")
    prov = schedule.provenance
    prior = prior_policy(prov["init"])
    start = (prior.prob, prior.mag)
    cfg = _null_settings(prov)
    resample_prob, max_shift, member_start = cfg["resample_prob"], cfg["max_shift"], cfg["member_start"]
    explore = _explore_of(cfg)
    observed = op_mix(schedule.prob, schedule.mag, start)
    rng = np.random.default_rng(seed)
    nulls = [op_mix(*null_lineage(start, explore, _hba_fractions, rng, population=prov["population"],
                                  epochs=prov["search_epochs"], every=prov["exploit_every"],
                                  explore_start=member_start == "explored",
                                  raw=True), start) for _ in range(replicates)]
    lines = [f"# `{prov.get('command', folder)}` against a search with no signal (`benchmarks/pbt_null.py --searched`)",
             "",
             f"- Null: {replicates} searches of its settings ({prov['population']} members, {prov['search_epochs']} "
             f"epochs, a round every {prov['exploit_every']}, start `{prov['init']}`, members' start "
             f"`{member_start}`, amount `{cfg['amount']}`, resample `{cfg['resample']}`, explore resample "
             f"{resample_prob}, max shift {max_shift}) whose scores are noise; seed {seed}.",
             f"- Command: `python benchmarks/pbt_null.py --searched {folder} --replicates {replicates} --seed {seed}`",
             f"- Commit: {source_commit() or 'unknown'}; numpy only (no training); "
             f"date: {datetime.now(timezone.utc).isoformat(timespec='seconds')}", "",
             "What the schedule changed, averaged over its epochs, against the null (mean [5%, 95%]; the fraction "
             "of null searches that changed at least as much):", "",
             "| statistic | searched | null | null at least as large |", "|---|---|---|---|"]
    for name, value in observed.items():
        null = np.array([n[name] for n in nulls])
        lines.append(f"| {name} | {value:.3f} | {_band(null)} | {(null >= value).mean():.3f} |")
    # A search's draws are its seed's (a twin's too); an independent null's "seed" seeds its own stream.
    held = cfg["amount"] == "held"
    if held:
        lines += ["", "Amount held (`--amount held`): every member of every round had the start's mean probability "
                  "and mean magnitude fraction, so how much the schedule augments is not the selection's to choose, "
                  "and the twins' amount table and the ranks of accuracy against strength do not apply."]
    elif prov.get("objective") == "population" or "noise_seed" in prov:
        twins = twin_amounts(prov, replicates, seed)
        lines += ["", f"How much it augments, against {replicates} twin nulls: replays of this search with its own "
                  "explore draws (its seed) and noise for its scores, so that only the selection differs. Where "
                  "the search sits in the twins' spread is what its selection chose beyond its draws "
                  "(mean [5%, 95%]; the fraction of twins below it):", "",
                  "| statistic | searched | twins | twins below |", "|---|---|---|---|"]
        for name, value in amounts(schedule.prob, schedule.mag).items():
            twin = np.array([t[name] for t in twins])
            lines.append(f"| {name} | {value:.3f} | {_band(twin)} | {(twin < value).mean():.3f} |")
    metrics = folder / "metrics.jsonl"
    rounds = ([json.loads(line) for line in metrics.read_text(encoding="utf-8").splitlines() if line.strip()]
              if metrics.exists() else [])
    if rounds and not held:
        lines += ["", f"Selection ({len(rounds)} rounds): do the members' validation accuracies rank with their "
                  "policies' strength? (Spearman's rho per round, mean ± standard error over rounds)", "",
                  "| statistic | mean ± se |", "|---|---|"]
        lines += [f"| {name} | {m:.3f} ± {se:.3f} |" for name, (m, se) in selection_signal(rounds).items()]
    noise = copy_noise(rounds) if rounds else []
    if any(q["pairs"] for q in noise):
        score = "an average of its weights" if prov.get("score_ema") else "its weights"
        lines += ["", "Score noise: a member that copied and its donor start the next round from the same weights, "
                  f"each scored on {score}; how far apart that round leaves them (`acc[copier] - acc[donor]`, "
                  "points), by quarter of the search:", "",
                  "| rounds from | pairs | sd | mean | mean p, copier - donor |", "|---|---|---|---|---|"]
        lines += [f"| {q['first round']} | {q['pairs']} | {q['sd']:.2f} | {q['mean']:+.2f} | "
                  f"{q['mean p difference']:+.3f} |" for q in noise]
    return "\n".join(lines) + "\n"


def op_preference(prob: np.ndarray, mag: np.ndarray, start: Policy, part: slice = slice(None)) -> np.ndarray:
    """What a per-epoch schedule (``(epochs, 2, 15)`` each, this package's values) prefers, over the epochs
    ``part``: per op, its mean probability over those epochs and both copies minus the start's, then per
    magnitude op, its mean fraction of the range minus the start's; ``(15 + 12,)``."""
    prob, mag = np.asarray(prob)[part], np.asarray(mag)[part]
    op = prob.mean(axis=(0, 1)) - np.asarray(start[0]).mean(axis=0)
    frac = pbt.mag_fractions(mag).mean(axis=(0, 1)) - pbt.mag_fractions(start[1]).mean(axis=0)
    return np.concatenate([op, frac])


#: The parts of a schedule whose preferences :func:`agreement_report` compares.
AGREEMENT_PARTS = {"all epochs": (0.0, 1.0), "second half": (0.5, 1.0)}


def _settings_text(cfg: dict) -> str:
    return (f"{cfg['population']} members, {cfg['search_epochs']} epochs, a round every {cfg['exploit_every']}, "
            f"start `{cfg['init']}`, members' start `{cfg['member_start']}`, amount `{cfg['amount']}`, resample "
            f"`{cfg['resample']}`, " + ("" if cfg["vary"] == "all" else f"vary `{cfg['vary']}`, ") + "explore "
            f"resample {cfg['resample_prob']}, max shift {cfg['max_shift']}")


def agreement_report(folders: list[Path], replicates: int, seed: int) -> str:
    """Do two population searches (say, two seeds of one setting) prefer the same ops?

    Selection that follows a signal steers independent searches the same way; selection on noise leaves
    their preferences independent, and only the explore step's own asymmetries (clipping, a start that is not
    the same for every op) can make them agree. So the statistic is the correlation between the two
    schedules' :func:`op_preference` vectors (probabilities and magnitudes separately), each less the mean
    preference of null searches of its own settings (what its explore step alone prefers), against the same
    correlation between ``replicates`` pairs of independent null searches, one of each search's settings.
    The settings may differ (a proxy's search against a paper-scale one); preferences are averages over
    each schedule's own epochs, so schedules of different lengths compare.

    An ``--amount profile`` search has no stand-alone null (its targets move from round to round), so its side
    of each null pair is one of its twins (:func:`twin_policies`: its own explore draws, noise for its scores),
    and its drift is its twins' mean preference, never pooled with the other side's: twins are drawn given one
    seed's walk, so each search's twins centre where that walk leads."""
    if len(folders) != 2:
        raise ValueError(f"--agree takes two search folders, got {len(folders)}")
    schedules = [Schedule.load(Path(f) / "schedule.json") for f in folders]
    seeds = [s.provenance.get("seed") for s in schedules]
    if seeds[0] is not None and seeds[0] == seeds[1]:
        # The driver draws each member's start and each round's selection and explore from streams keyed by
        # the seed alone (population.py), so two searches of one seed share their walks, whatever else differs.
        raise ValueError(f"--agree needs searches of different seeds; both ran with seed {seeds[0]}, so their "
                         "explore steps drew the same numbers and their schedules agree without any signal")
    settings = [_null_settings(s.provenance) for s in schedules]
    starts = [(prior.prob, prior.mag) for prior in (prior_policy(cfg["init"]) for cfg in settings)]
    rng = np.random.default_rng(seed)

    def null(cfg: dict, start: Policy) -> Policy:
        return null_lineage(start, _explore_of(cfg), _hba_fractions, rng,
                            population=cfg["population"], epochs=cfg["search_epochs"], every=cfg["exploit_every"],
                            explore_start=cfg["member_start"] == "explored", raw=True)

    def corr(a: np.ndarray, b: np.ndarray) -> float:
        # A preference vector with no spread (a schedule that never moved) agrees with nothing.
        return float(np.corrcoef(a, b)[0, 1]) if a.std() > 0 and b.std() > 0 else 0.0

    profile = [cfg["amount"] == "profile" for cfg in settings]
    twins = [twin_policies(s.provenance, replicates, seed + 1 + i) if held else None
             for i, (s, held) in enumerate(zip(schedules, profile, strict=True))]
    pairs = [[next(twins[i]) if profile[i] else null(cfg, start)
              for i, (cfg, start) in enumerate(zip(settings, starts, strict=True))] for _ in range(replicates)]
    probs = "ops' probabilities (15)"
    what = {probs: slice(0, NUM_OPS), "magnitudes (12)": slice(NUM_OPS, None)}
    # A `--vary magnitudes` search never selects its ops' probabilities (every member holds the start's, at the
    # round's amount), so they agree with nothing: their r would read 0 against a null of zeros, a p of 1
    # that says nothing. Only the magnitudes are compared.
    only_mags = [f"`{Path(f).name}`" for f, cfg in zip(folders, settings, strict=True) if cfg["vary"] == "magnitudes"]
    if settings[0] == settings[1]:
        described = [f"- Settings of both: {_settings_text(settings[0])}."]
    else:
        described = [f"- Settings of `{Path(f).name}`: {_settings_text(cfg)}."
                     for f, cfg in zip(folders, settings, strict=True)]
    lines = [f"# Do `{folders[0]}` and `{folders[1]}` prefer the same ops? (`benchmarks/pbt_null.py --agree`)", "",
             *described,
             "- Statistic: Pearson's r between the two schedules' preferences (per op, its mean over the epochs "
             "and both copies minus the start's, less the mean preference of null searches of its settings); "
             f"null: {replicates} pairs of independent null searches, one of each search's settings, seed {seed}"
             + ("; an `--amount profile` search's null is its twins (its own explore draws, noise for its scores), "
                "and its preference is taken less its own twins' mean." if any(profile) else "."),
             f"- Command: `python benchmarks/pbt_null.py --agree {folders[0]} {folders[1]} --replicates {replicates} "
             f"--seed {seed}`",
             f"- Commit: {source_commit() or 'unknown'}; numpy only (no training); "
             f"date: {datetime.now(timezone.utc).isoformat(timespec='seconds')}", "",
             "| epochs | preference | r | null: mean [5%, 95%] | null at least as large |", "|---|---|---|---|---|"]
    for part_name, (lo, hi) in AGREEMENT_PARTS.items():
        parts = [slice(int(lo * cfg["search_epochs"]), int(hi * cfg["search_epochs"])) for cfg in settings]
        sides = [np.array([op_preference(*pair[i], start, part) for pair in pairs])
                 for i, (start, part) in enumerate(zip(starts, parts, strict=True))]
        # What each explore step alone prefers, from its start: one estimate per setting.
        drifts = [side.mean(axis=0) for side in sides]
        if settings[0] == settings[1] and not any(profile):
            drifts = [np.mean(drifts, axis=0)] * 2
        searched = [op_preference(schedule.prob, schedule.mag, start, part) - drift
                    for schedule, start, part, drift in zip(schedules, starts, parts, drifts, strict=True)]
        nulls = [side - drift for side, drift in zip(sides, drifts, strict=True)]
        for name, sel in what.items():
            if name == probs and only_mags:
                lines.append(f"| {part_name} | {name} | - | not defined: {' and '.join(only_mags)} selects "
                             "magnitudes only (`--vary magnitudes`) | - |")
                continue
            r = corr(searched[0][sel], searched[1][sel])
            null_r = np.array([corr(a[sel], b[sel]) for a, b in zip(*nulls, strict=True)])
            lines.append(f"| {part_name} | {name} | {r:+.3f} | {_band(null_r)} | {(null_r >= r).mean():.3f} |")
    lines += ["", "Each search's preferences over all epochs (mean probability over both copies minus its start's; "
              "magnitude fraction minus its start's, `-` for an op without a magnitude):", "",
              "| op | " + " | ".join(f"p: {Path(f).name}" for f in folders) + " | "
              + " | ".join(f"magnitude: {Path(f).name}" for f in folders) + " |", "|---|---|---|---|---|"]
    searched = [op_preference(s.prob, s.mag, start) for s, start in zip(schedules, starts, strict=True)]
    for k, op in enumerate(OP_NAMES):
        mags = [f"{v[NUM_OPS + MAGNITUDE_OPS.index(k)]:+.3f}" if k in MAGNITUDE_OPS else "-" for v in searched]
        lines.append(f"| {op} | {searched[0][k]:+.3f} | {searched[1][k]:+.3f} | {mags[0]} | {mags[1]} |")
    return "\n".join(lines) + "\n"


def twin_op_means(prov: dict, replicates: int, seed: int) -> np.ndarray:
    """Each op's probability (mean over the epochs and both copies) in ``replicates`` :func:`twin_policies` of a
    search: ``(replicates, 15)``."""
    return np.array([prob.mean(axis=(0, 1)) for prob, _ in twin_policies(prov, replicates, seed)])


def pushes_report(folders: list[Path], replicates: int, seed: int) -> str:
    """What selection pushes against, op by op, over several population searches.

    For each search and op: the fraction of its twin nulls (its own explore draws, noise for its scores) that
    give the op less probability than the search does, over all epochs. With a selection that sees nothing
    each fraction is uniform on [0, 1], so an op whose mean fraction over the searches is far from 0.5 is
    one that selection moves the same way from whatever walk its seed drew. Then, for each distinct setting
    among the searches, how far a walk with no signal drifts from its start with each kind of resample
    (:data:`~hba_augment.search.pbt.RESAMPLES`); for an ``--amount profile`` search, which has no stand-alone
    null, its twins under each resample."""
    if len(folders) < 2:
        raise ValueError(f"--pushes takes at least two search folders, got {len(folders)}")
    schedules = [Schedule.load(Path(f) / "schedule.json") for f in folders]
    for f, schedule in zip(folders, schedules, strict=True):
        # Its probabilities are its twins' exactly, so no twin lies below it on any op: it would read as a push
        # down on every op, which it never made.
        if _null_settings(schedule.provenance)["vary"] == "magnitudes":
            raise ValueError(f"--pushes places ops' probabilities, which {f} does not select (it varies "
                             "magnitudes only, --vary magnitudes)")
    below, share_below, twin_mean, searched = [], [], [], []
    for schedule in schedules:
        twins = twin_op_means(schedule.provenance, replicates, seed)
        op = np.asarray(schedule.prob).mean(axis=(0, 1))
        below.append((twins < op).mean(axis=0))
        # Shares of the total: most searches augment less than their twins overall, which pushes every op down.
        share_below.append((twins / twins.sum(axis=1, keepdims=True) < op / op.sum()).mean(axis=0))
        twin_mean.append(twins.mean(axis=0))
        searched.append(op)
    below, share_below = np.array(below), np.array(share_below)
    twin_mean, searched = np.array(twin_mean), np.array(searched)
    names = [Path(f).name for f in folders]
    # The mean of n uniforms has standard deviation 1 / sqrt(12 n).
    sd = 1 / np.sqrt(12 * len(folders))
    lines = ["# What selection pushes against, op by op (`benchmarks/pbt_null.py --pushes`)", "",
             f"- Searches: {', '.join(f'`{f}`' for f in folders)}.",
             f"- Statistic: per search and op, the fraction of {replicates} twin nulls (seed {seed}) that give the op "
             "less probability (mean over the epochs and both copies) than the search. Under a selection that sees "
             f"nothing it is uniform on [0, 1]: the mean over {len(folders)} searches is 0.5 ± {sd:.3f} (one sd); "
             "z = (mean - 0.5) / sd. The same for the op's *share* of the 15 ops' total probability, which "
             "an overall cut in augmentation does not move. Searches of one seed share their explore draws "
             "(not their scores), so they are not independent draws of that null, and with 15 ops one |z| near "
             "2 is expected by chance.",
             f"- Command: `python benchmarks/pbt_null.py --pushes {' '.join(str(f) for f in folders)} "
             f"--replicates {replicates} --seed {seed}`",
             f"- Commit: {source_commit() or 'unknown'}; numpy only (no training); "
             f"date: {datetime.now(timezone.utc).isoformat(timespec='seconds')}", "",
             "| op | twins below: p | z | twins below: share | z | " + " | ".join(names) + " |",
             "|---|---|---|---|---|" + "---|" * len(names)]
    order = np.argsort(share_below.mean(axis=0))
    for k in order:
        cells = [f"{below[i, k]:.2f} ({searched[i, k]:.2f} vs {twin_mean[i, k]:.2f})" for i in range(len(names))]
        lines.append(f"| {OP_NAMES[k]} | {below[:, k].mean():.2f} | {(below[:, k].mean() - 0.5) / sd:+.1f} | "
                     f"{share_below[:, k].mean():.2f} | {(share_below[:, k].mean() - 0.5) / sd:+.1f} | "
                     + " | ".join(cells) + " |")
    lines += ["", "(Each search's cell: the fraction of twins below in probability, then the op's probability in the "
              "search vs its twins' mean.)", "", "How far a walk with no signal drifts from its start (a null search of each setting, "
              f"{replicates} replicates; means over the epochs): mean |p - start| over the 30 probabilities, mean "
              "|f - start| over the 24 magnitude fractions, and Invert's probability (the TrivialAugment-like start all but "
              "leaves it out):",
              "", "| setting | resample | mean abs(p - start) | mean abs(f - start) | Invert's p (start's) |",
              "|---|---|---|---|---|"]
    rare, seen = OP_NAMES.index("Invert"), []
    for schedule in schedules:
        prov = schedule.provenance
        cfg = _null_settings(prov)
        held = cfg["amount"] == "profile"
        # A profile search's walk follows its own targets, which no stand-alone null knows: its twins walk
        # instead, and they are its seed's, so the seed is part of what is distinct.
        key = {k: v for k, v in cfg.items() if k != "resample"} | ({"seed": prov["seed"]} if held else {})
        if key in seen:
            continue
        seen.append(key)
        prior = prior_policy(cfg["init"])
        start_f = pbt.mag_fractions(prior.mag)
        for resample in pbt.RESAMPLES:
            if held:
                walks = [(p, pbt.mag_fractions(m)) for p, m in twin_policies({**prov, "resample": resample},
                                                                              replicates, seed)]
            else:
                rng = np.random.default_rng(seed)
                walks = [null_lineage((prior.prob, prior.mag), _explore_of({**cfg, "resample": resample}),
                                      _hba_fractions, rng, population=cfg["population"],
                                      epochs=cfg["search_epochs"], every=cfg["exploit_every"],
                                      explore_start=cfg["member_start"] == "explored")
                         for _ in range(replicates)]
            prob = np.array([w[0] for w in walks])
            frac = np.array([w[1] for w in walks])
            setting = _settings_text({**cfg, "resample": resample}) + (
                f" (twins of seed {prov['seed']}: a profile search has no stand-alone null)" if held else "")
            lines.append(f"| {setting} | `{resample}` | "
                         f"{np.abs(prob - prior.prob).mean():.3f} | "
                         f"{np.abs(frac - start_f).mean():.3f} | {prob[..., rare].mean():.3f} "
                         f"({prior.prob[:, rare].mean():.2f}) |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--replicates", type=int, default=1000, help="null searches per setting (default: 1000)")
    p.add_argument("--seed", type=int, default=0, help="seed of every draw (default: 0)")
    p.add_argument("--out", help="also write the table to this Markdown file")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--schedules", metavar="DIR",
                   help="instead of the report, write --count null schedules (null-<init>-<seed>.json) of one "
                        "search setting (--init, --population, --epochs, --every) to DIR")
    p.add_argument("--count", type=int, default=3, help="null schedules to write (seeds --seed, --seed + 1, ...)")
    p.add_argument("--twin-of", metavar="SEARCH",
                   help="with --schedules: write twin nulls of the population search in the folder SEARCH instead "
                        "(twin-<search>-<seed>.json): its settings and its own explore draws, noise for its scores")
    p.add_argument("--match-amount", type=int, metavar="N",
                   help="with --twin-of: write, for each of --count, the one of N twin nulls that augments most like "
                        "the search at every epoch (matched-twin-<search>-<first seed>.json)")
    p.add_argument("--init", default="trivialaugment", help="the search's --init (default: trivialaugment)")
    p.add_argument("--population", type=int, default=4, help="the search's --population (default: 4)")
    p.add_argument("--epochs", type=int, default=100, help="the search's --epochs (default: 100)")
    p.add_argument("--every", type=int, default=2, help="epochs per round (default: 2, the 100-epoch search's)")
    p.add_argument("--member-start", choices=pbt.MEMBER_STARTS, default=pbt.DEFAULT_MEMBER_START,
                   help=f"the search's --member-start (default: {pbt.DEFAULT_MEMBER_START})")
    p.add_argument("--amount", choices=pbt.AMOUNTS, default="free", help="the search's --amount (default: free)")
    p.add_argument("--resample", choices=pbt.RESAMPLES, default="uniform",
                   help="the search's --resample (default: uniform)")
    p.add_argument("--vary", choices=pbt.VARIES, default="all", help="the search's --vary (default: all)")
    mode.add_argument("--searched", metavar="DIR",
                   help="instead of the report, test the population search in DIR (its schedule.json and "
                        "metrics.jsonl) against --replicates null searches of its own settings")
    mode.add_argument("--agree", nargs=2, metavar="DIR",
                   help="instead of the report, test whether two population searches (their schedule.json) prefer "
                        "the same ops more than --replicates pairs of null searches of their settings do")
    mode.add_argument("--pushes", nargs="+", metavar="DIR",
                   help="instead of the report, place each op's probability in several population searches among "
                        "--replicates twin nulls of each: which ops does selection push the same way?")
    args = p.parse_args(argv)
    if args.replicates < 2:
        p.error(f"--replicates must be at least 2, got {args.replicates}")
    if args.count < 1:
        p.error(f"--count must be at least 1, got {args.count}")
    if args.twin_of and not args.schedules:
        p.error("--twin-of needs --schedules DIR (where to write the twin nulls)")
    if args.match_amount is not None and not args.twin_of:
        p.error("--match-amount needs --twin-of SEARCH")
    if args.match_amount is not None and args.match_amount < 1:
        p.error(f"--match-amount must be at least 1, got {args.match_amount}")
    if args.schedules:
        out = Path(args.schedules)
        out.mkdir(parents=True, exist_ok=True)
        pool = args.match_amount or 1
        for seed in range(args.seed, args.seed + args.count * pool, pool):
            if args.match_amount:
                schedule = matched_twin_schedule(Path(args.twin_of), seed, args.match_amount)
            elif args.twin_of:
                schedule = twin_null_schedule(Path(args.twin_of), seed)
            else:
                schedule = null_schedule(args.init, seed, population=args.population, epochs=args.epochs,
                                         every=args.every, member_start=args.member_start, amount=args.amount,
                                         resample=args.resample, vary=args.vary)
            path = out / f"{schedule.name}.json"
            schedule.save(path)
            print(f"{path}: mean p {schedule.prob.mean():.3f}, "
                  f"mean magnitude fraction {pbt.mag_fractions(schedule.mag).mean():.3f}")
        return 0
    if args.searched:
        text = searched_report(Path(args.searched), args.replicates, args.seed)
    elif args.pushes:
        try:
            text = pushes_report([Path(f) for f in args.pushes], args.replicates, args.seed)
        except ValueError as e:
            p.error(str(e))
    elif args.agree:
        try:
            text = agreement_report([Path(f) for f in args.agree], args.replicates, args.seed)
        except ValueError as e:
            p.error(str(e))
    else:
        text = report(args.replicates, args.seed)
    print(text)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
