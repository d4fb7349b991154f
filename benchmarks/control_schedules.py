"""Schedules to compare a learned HBA schedule against (issue 10, section 4); never shipped.

- ``pba``: PBA's published Reduced CIFAR-10 schedule (Ho et al. 2019; ``../shared/reference/pba/``), the
  same search space learned by population-based training, converted to this package's magnitudes.
- ``initial``: the search's initial policy (every hyperparameter at ``0.95 lo + 0.05 hi``, the contract, section 3)
  held for every epoch: what the search starts from.
- ``last``: the learned schedule's last entry held for every epoch: is the curriculum worth anything?
- ``mean``: the learned schedule's average over its entries held for every epoch: the same question for a
  schedule that wanders rather than ramps.
- ``delayed``: the learned schedule started ``--delay`` entries late, its search's start policy filling the
  first entries (its last ``--delay`` entries dropped): the same walk ramped later. Is it the ramp's timing
  that helps, rather than what the ramp reaches?
- ``ramped``: the learned schedule's last entry, its probabilities scaled down at the start so that the
  expected number of ops applied per image rises linearly from 0 at the first entry to the entry's own at
  the fraction ``--ramp`` of the entries, then held (magnitudes held throughout): the shape of PBA's
  schedule (no augmentation at first) given to any policy. Is it the ramp that helps a schedule, whatever
  the policy it ramps to? (The ops applied, not the probabilities, ramp linearly: with 30 slots and at most
  K ops per image, slot probabilities saturate: PBA's schedule applies no op for its first 12 epochs, then
  1.23 of its final 1.30 ops per image from epoch 12 on, where its mean probability is only 0.11.)
- ``strength``: the learned schedule's last entry, its probabilities held and every magnitude moved from the
  op's identity (its mildest setting: 0, or factor 1 for the four enhancers) at the first entry linearly to
  the entry's own at the fraction ``--strength-ramp`` of the entries, then held: mild images early, the
  policy's own at the end, the other common curriculum besides the op-count ramp above (which holds the
  magnitudes). Does it help a strong policy? (It is not PBA's curriculum: PBA's probability-weighted mean
  strength rises only from 0.38 in epochs 12-40 to 0.47 in 160-200, while its mean slot probability rises
  from 0.13 to 0.52.)
- ``reversed`` and ``time-shuffled``: the learned schedule's entries in reverse order, or in a random order
  (``--seed``): the same policies for the same number of epochs each. Against the schedule and its mean
  held, do they tell that the order of the policies matters (a curriculum), or only that they change over
  time? With ``--reorder-part probabilities`` (or ``magnitudes``) only that half of each entry moves, the
  other stays in the learned order: which half carries the order's effect? (On the CPU proxy PBA's schedule
  in a random order trained 1.5 points worse than in its own.)
- ``smoothed``: the learned schedule averaged over a centred moving window (``--smooth``, a fraction of its
  entries): its trend kept, its jitter from one entry to the next (PBA's explore steps) smoothed away. On
  the CPU proxy PBA's schedule in a random order trained 1.5 points worse than in its own order and 1.2
  worse than its time average held: is the jitter of a searched schedule costing it too?
- ``averaged`` (``--average SCHEDULE ...``): the entrywise mean of the learned schedule and others of its
  length (say, other seeds of its search): what their selections share stays, their independent walks partly
  cancel.
  Does a consensus of search seeds train better than each? Magnitudes are averaged unweighted, so searches
  that followed one amount profile average to that profile exactly.
- ``amount`` (``--match-amount REFERENCE``): the learned schedule with, at every entry, its
  probabilities scaled so that an image receives as many ops as under the reference's entry (the expected
  number applied), and every magnitude's distance from its op's identity scaled so that the
  probability-weighted mean strength is the reference's: the learned schedule's mix of ops and their relative
  strengths, with the reference's amount of augmentation over time. A searched schedule and its null
  differ in both (at paper scale ``population-paper4`` augments more early and less strongly late than its
  null): the null with the search's amount says which of the two its lead comes from.
- ``shuffled``: the learned schedule with its op identities permuted (same probabilities and relative
  magnitudes, wrong ops): is it the choice of ops that helps, or just the amount of augmentation?

PBA's level semantics (``pba/augmentation_transforms.py``, PARAMETER_MAX 10, 32x32 images; see the
reference README) in this package's magnitudes (the contract, section 1):

| PBA op | PBA level ``l`` | magnitude here |
|---|---|---|
| Rotate | ``int(3 l)`` degrees | the same, in [0, 30] |
| ShearX/Y | ``0.03 l`` | the same, in [0, 0.3] |
| TranslateX/Y | ``int(l)`` pixels | ``int(l) / 32`` (``round(m * 32)`` pixels) |
| Solarize | threshold ``256 - int(25.6 l)`` | strength ``int(25.6 l)``, capped at 255 (l = 10 inverted level 0 too) |
| Posterize | ``4 - int(0.4 l)`` bits | strength ``4 + int(0.4 l)`` (PBA keeps at most 4 bits) |
| Contrast/Color/Brightness/Sharpness | ``0.1 + 0.18 l`` | the same, in [0.1, 1.9] |
| Cutout | square of ``int(2 l)`` pixels | ``int(2 l) / 32``, capped at 0.2 (6 px): PBA's range reaches 20 px |

Only the two caps differ from PBA; :func:`pba_schedule` counts how often each applies (``provenance``).

Usage::

    python benchmarks/control_schedules.py --learned pretrained_policies/cifar10.json --out DIR
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

import numpy as np
import torch

from hba_augment.functional import NUM_OPS, OP_NAMES, OPS
from hba_augment.schedule import Schedule
from hba_augment.search.hyper_input import applied_probability
from hba_augment.search.priors import prior_policy

REPO = Path(__file__).resolve().parents[1]
PBA_DIR = REPO.parent / "shared" / "reference" / "pba"
#: PBA's published Reduced CIFAR-10 schedule log, which every PBA control here is read from.
PBA_LOG = PBA_DIR / "rcifar10_16_wrn.txt"
#: PBA's op order (``augmentation_transforms_hp.HP_TRANSFORMS``).
PBA_OPS = ("Rotate", "TranslateX", "TranslateY", "Brightness", "Color", "Invert", "Sharpness", "Posterize",
           "ShearX", "Solarize", "ShearY", "Equalize", "AutoContrast", "Cutout", "Contrast")
IMAGE_SIZE = 32
_LOW = np.array([s.low if s.has_magnitude else np.nan for s in OPS])
_HIGH = np.array([s.high if s.has_magnitude else np.nan for s in OPS])
_HAS_MAG = np.array([s.has_magnitude for s in OPS])
_IDENTITY = np.array([s.identity if s.has_magnitude else np.nan for s in OPS])
#: The farthest a magnitude can be from its op's identity: what a strength of 1 is (:func:`mean_strength`).
_SPAN = np.maximum(np.abs(_HIGH - _IDENTITY), np.abs(_LOW - _IDENTITY))
#: Entries of a ramped control: PBA's schedule has one per epoch of its 200-epoch search; 100 make the ramp
#: smooth enough for any run.
RAMP_ENTRIES = 100


def pba_magnitude(op: str, level: int) -> tuple[float | None, bool]:
    """PBA's level ``0..10`` of ``op`` as this package's magnitude, and whether a cap changed it."""
    if not 0 <= level <= 10:
        raise ValueError(f"PBA levels are 0..10, got {level} for {op}")
    if op in ("AutoContrast", "Invert", "Equalize"):
        return None, False
    if op == "Rotate":
        return float(int(3 * level)), False
    if op in ("ShearX", "ShearY"):
        return 0.03 * level, False
    if op in ("TranslateX", "TranslateY"):
        return int(level) / IMAGE_SIZE, False
    if op == "Solarize":
        strength = int(25.6 * level)
        return float(min(strength, 255)), strength > 255
    if op == "Posterize":
        return float(4 + int(0.4 * level)), False
    if op in ("Contrast", "Color", "Brightness", "Sharpness"):
        return 0.1 + 0.18 * level, False
    if op == "Cutout":
        size = int(2 * level) / IMAGE_SIZE
        return min(size, 0.2), size > 0.2
    raise ValueError(f"unknown PBA op {op!r}")


def parse_pba_log(path: Path, epochs: int) -> list[list[int]]:
    """The per-epoch policies of a PBA schedule log: ``epochs`` lists of 60 integers.

    Follows PBA's ``utils.parse_log`` / ``parse_log_schedule``: the surviving trial's policies, each held
    from one logged clone epoch to the next, the last one to the end.
    """
    rows = [ast.literal_eval(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = [[*r[:4], *(x["hp_policy"] if isinstance(x, dict) else x for x in r[4:6])] for r in rows]
    truncate = None
    for i in range(len(rows) - 1):  # "Sometimes files have extra lines in the beginning."
        if rows[i][0] != rows[i + 1][1]:
            truncate = i
    if truncate is not None:
        rows = rows[truncate + 1 :]
    segments = [(rows[0][3], rows[0][4])]
    for i in range(len(rows) - 1):
        segments.append((rows[i + 1][3] - rows[i][3], rows[i][5]))
    segments.append((epochs - rows[-1][3], rows[-1][5]))
    if sum(n for n, _ in segments) != epochs or any(n < 0 for n, _ in segments):
        raise ValueError(f"{path}: segments {[n for n, _ in segments]} do not cover {epochs} epochs")
    schedule = [list(policy) for n, policy in segments for _ in range(n)]
    if any(len(p) != 4 * NUM_OPS for p in schedule):
        raise ValueError(f"{path}: every PBA policy has {4 * NUM_OPS} integers")
    return schedule


def pba_schedule(path: Path = PBA_LOG, epochs: int = 200) -> Schedule:
    """PBA's published schedule as a :class:`Schedule` of ``epochs`` entries (magnitudes as in the table)."""
    policies = parse_pba_log(path, epochs)
    prob = np.zeros((epochs, 2, NUM_OPS))
    mag = np.full((epochs, 2, NUM_OPS), np.nan)
    capped = {"Solarize": 0, "Cutout": 0}
    for s, policy in enumerate(policies):
        for c in range(2):
            half = policy[c * 2 * NUM_OPS : (c + 1) * 2 * NUM_OPS]
            for i, op in enumerate(PBA_OPS):
                k = OP_NAMES.index(op)
                prob[s, c, k] = half[2 * i] / 10.0
                m, was_capped = pba_magnitude(op, half[2 * i + 1])
                if m is not None:
                    mag[s, c, k] = m
                if was_capped and prob[s, c, k] > 0:
                    capped[op] += 1
    return Schedule(prob, mag, name="pba-rcifar10", provenance={
        "source": f"PBA (Ho et al. 2019) published schedule {path.name}, arcelien/pba commit a9cc308d, Apache-2.0",
        "conversion": "benchmarks/control_schedules.py (level semantics in its docstring)",
        "capped_slot_epochs_with_p_above_0": capped,
        "note": "a comparison peer for benchmarks; never shipped",
    })


def initial_schedule() -> Schedule:
    """The search's initial policy (the contract, section 3: every value at 0.95 lo + 0.05 hi) as a 1-entry schedule."""
    frac = 0.05
    prob = np.full((1, 2, NUM_OPS), frac)
    mag = np.where(_HAS_MAG, 0.95 * _LOW + frac * _HIGH, np.nan)
    return Schedule(prob, np.broadcast_to(mag, (1, 2, NUM_OPS)), name="hba-initial",
                    provenance={"control": "the search's initial policy held constant (the contract, section 3)"})


def last_entry_schedule(learned: Schedule) -> Schedule:
    """``learned``'s last entry held for every epoch (one entry)."""
    return Schedule(learned.prob[-1:], learned.mag[-1:], name=f"{learned.name}-last", count_probs=learned.count_probs,
                    provenance={"control": f"last entry (of {learned.epochs}) of {learned.name} held constant"})


def mean_schedule(learned: Schedule) -> Schedule:
    """``learned``'s per-slot average over its entries held for every epoch (one entry): is it the schedule's
    variation over time that helps, or only the policy it averages to?"""
    return Schedule(learned.prob.mean(axis=0, keepdims=True), learned.mag.mean(axis=0, keepdims=True),
                    name=f"{learned.name}-mean", count_probs=learned.count_probs,
                    provenance={"control": f"the mean over the {learned.epochs} entries of {learned.name} held constant"})


def delayed_schedule(learned: Schedule, delay: int) -> Schedule:
    """``learned`` moved ``delay`` entries later: its search's start policy (``provenance["init"]``, a
    :func:`~hba_augment.search.priors.prior_policy` name) for the first ``delay`` entries, then ``learned``'s
    first ``epochs - delay`` entries; the same length, so the same epochs.

    Raises:
        ValueError: ``delay`` outside ``[1, epochs - 1]``, or ``learned`` names no start.
    """
    if isinstance(delay, bool) or not isinstance(delay, int) or not 1 <= delay < learned.epochs:
        raise ValueError(f"delay must be an int in [1, {learned.epochs - 1}], got {delay!r}")
    init = learned.provenance.get("init")
    if init is None:
        raise ValueError(f"{learned.name} names no start policy (provenance 'init'); a delayed schedule fills "
                         "its first entries with it")
    start = prior_policy(init)
    head = np.broadcast_to(start.prob, (delay, 2, NUM_OPS)), np.broadcast_to(start.mag, (delay, 2, NUM_OPS))
    prob = np.concatenate([head[0], learned.prob[:-delay]])
    mag = np.concatenate([head[1], learned.mag[:-delay]])
    return Schedule(prob, mag, name=f"{learned.name}-delayed{delay}", count_probs=learned.count_probs, provenance={
        "control": f"{learned.name} {delay} of {learned.epochs} entries late, its start {init!r} before it",
        "note": "a comparison control for benchmarks; never shipped"})


def _check_ramp(ramp: float, entries: int) -> None:
    """``ValueError`` unless ``ramp`` is in (0, 1] and ``entries`` >= 2 (the ramped controls' arguments)."""
    if isinstance(ramp, bool) or not isinstance(ramp, (int, float)) or not 0 < ramp <= 1:
        raise ValueError(f"ramp must be a fraction of the entries in (0, 1], got {ramp!r}")
    if isinstance(entries, bool) or not isinstance(entries, int) or entries < 2:
        raise ValueError(f"entries must be an int >= 2, got {entries!r}")


def ramped_schedule(learned: Schedule, ramp: float, entries: int = RAMP_ENTRIES) -> Schedule:
    """``learned``'s last entry over ``entries`` entries (``HBAPolicy`` stretches a schedule to a run's epochs,
    so the ramp is a fraction of any run), magnitudes held, probabilities scaled at entry ``e`` by the factor
    that makes the expected number of ops applied per image (:func:`~hba_augment.search.hyper_input.applied_probability`
    summed over the slots, under the schedule's ``count_probs``) ``min(1, e / (ramp * entries))`` times the
    entry's own: 0 at the first entry, the entry itself from ``ramp * entries`` on.

    Raises:
        ValueError: ``ramp`` not in (0, 1], or ``entries`` < 2.
    """
    _check_ramp(ramp, entries)
    last = torch.tensor(learned.prob[-1], dtype=torch.float64)  # a copy: schedule arrays are read-only

    def applied(scale: float) -> float:
        return float(applied_probability(scale * last, learned.count_probs).sum())

    full = applied(1.0)
    scales = []
    for e in range(entries):
        share = min(1.0, e / (ramp * entries))
        scales.append(share if share in (0, 1) else _bisect_increasing(applied, share * full, 1.0))
    prob = np.asarray(scales)[:, None, None] * learned.prob[-1]
    return Schedule(prob, np.broadcast_to(learned.mag[-1], (entries, 2, NUM_OPS)),
                    name=f"{learned.name}-ramp{round(100 * ramp)}", count_probs=learned.count_probs, provenance={
                        "control": f"the last entry of {learned.name}, ramped from no augmentation: the expected "
                                   f"number of ops applied per image rises linearly to the entry's over the first "
                                   f"{ramp:g} of {entries} entries (probabilities scaled), magnitudes held",
                        "note": "a comparison control for benchmarks; never shipped"})


def strength_ramped_schedule(learned: Schedule, ramp: float, entries: int = RAMP_ENTRIES) -> Schedule:
    """``learned``'s last entry over ``entries`` entries, probabilities held, every magnitude at entry ``e``
    ``identity + min(1, e / (ramp * (entries - 1))) * (m - identity)``: the op's identity (the contract,
    section 1: 0, or the enhancers' factor 1) at the first entry, the entry's own from ``ramp`` of the
    entries on. Ops without a magnitude (AutoContrast, Invert, Equalize) are unchanged.

    Raises:
        ValueError: ``ramp`` not in (0, 1], or ``entries`` < 2.
    """
    _check_ramp(ramp, entries)
    share = np.minimum(1.0, np.arange(entries) / (ramp * (entries - 1)))[:, None, None]
    mag = np.where(_HAS_MAG, _IDENTITY + share * (learned.mag[-1] - _IDENTITY), np.nan)
    return Schedule(np.broadcast_to(learned.prob[-1], (entries, 2, NUM_OPS)), mag,
                    name=f"{learned.name}-strength{round(100 * ramp)}", count_probs=learned.count_probs, provenance={
                        "control": f"the last entry of {learned.name}, probabilities held, magnitudes rising "
                                   f"linearly from each op's identity to the entry's over the first {ramp:.0%} of "
                                   f"its {entries} entries",
                        "note": "a comparison control for benchmarks; never shipped"})


def _bisect_increasing(f, target: float, high: float) -> float:
    """The ``x`` in ``[0, high]`` where the non-decreasing ``f`` reaches ``target`` (``high`` if it never does),
    to 1e-10 relative."""
    if f(high) <= target:
        return high
    low = 0.0
    while high - low > 1e-10 * max(1.0, high):
        mid = (low + high) / 2
        low, high = (mid, high) if f(mid) < target else (low, mid)
    return (low + high) / 2


def applied_ops(schedule: Schedule) -> np.ndarray:
    """Per entry, the expected number of ops an image receives
    (:func:`~hba_augment.search.hyper_input.applied_probability` summed over the slots)."""
    prob = torch.tensor(schedule.prob, dtype=torch.float64)
    return np.array([float(applied_probability(p, schedule.count_probs).sum()) for p in prob])


#: How close (in ops an image receives) :func:`amount_matched_schedule` brings an entry's ops applied to the
#: reference's: 0.1% of the 1.3 ops at which the default count distribution saturates.
OPS_TOLERANCE = 1e-3


def amount_matched_schedule(learned: Schedule, reference: Schedule) -> Schedule:
    """``learned`` with ``reference``'s amount of augmentation at every entry: entry ``e``'s probabilities
    scaled by one factor (capped at 1 a slot) so that :func:`applied_ops` is ``reference``'s at ``e`` (within
    :data:`OPS_TOLERANCE`, the factor closest to 1 that gets there), then
    every magnitude moved to ``identity + k (m - identity)`` (clipped to its op's range) with the one ``k``
    that makes :func:`mean_strength` ``reference``'s at ``e``. What stays ``learned``'s: which ops, in which
    proportions, and how strong each is relative to the others. Where the target is out of reach (every slot
    at 1, or every magnitude at its range's end), the entry gets as close as it can.

    Raises:
        ValueError: the two schedules differ in their number of entries or their ``count_probs``.
    """
    if learned.epochs != reference.epochs:
        raise ValueError(f"{learned.name} has {learned.epochs} entries and {reference.name} {reference.epochs}: "
                         "an amount is matched entry by entry")
    if tuple(learned.count_probs) != tuple(reference.count_probs):
        raise ValueError(f"count_probs differ ({learned.count_probs} against {reference.count_probs}): the "
                         "ops applied per image would not mean the same")
    ops_target, strength_target = applied_ops(reference), mean_strength(reference)
    prob = np.empty_like(learned.prob, dtype=float)
    mag = np.array(learned.mag, dtype=float)
    for e in range(learned.epochs):
        p = torch.tensor(learned.prob[e], dtype=torch.float64)
        if bool((p > 0).any()):
            def applied(c: float, p: torch.Tensor = p) -> float:
                return float(applied_probability((c * p).clamp(max=1.0), learned.count_probs).sum())

            # The ops applied saturate at the count distribution's mean, where any larger factor gives nearly
            # the same number but pushes every slot towards 1 and so flattens the mix: take the factor closest
            # to 1 that comes within OPS_TOLERANCE of the target. Past 1 / max(p) the top slots stay at 1 and
            # the others still grow, up to every slot at 1.
            target, own = float(ops_target[e]), applied(1.0)
            scale = 1.0
            if own < target - OPS_TOLERANCE:
                scale = _bisect_increasing(applied, target - OPS_TOLERANCE, 1.0 / float(p[p > 0].min()))
            elif own > target + OPS_TOLERANCE:
                scale = _bisect_increasing(applied, target + OPS_TOLERANCE, 1.0)
            prob[e] = np.minimum(scale * learned.prob[e], 1.0)
        else:  # nothing fires: no factor gives it an amount
            prob[e] = learned.prob[e]

        def strength(k: float, e: int = e) -> float:
            moved = np.clip(_IDENTITY + k * (learned.mag[e:e + 1] - _IDENTITY), _LOW, _HIGH)
            return float(_strength(prob[e:e + 1], moved)[0])

        own_strength = strength(1.0)
        if np.isfinite(strength_target[e]) and np.isfinite(own_strength) and own_strength > 0:
            # A factor of 1 / (the smallest nonzero strength) takes every moving magnitude to its range's end.
            each = np.abs(learned.mag[e] - _IDENTITY) / _SPAN
            reach = 1.0 / float(np.nanmin(np.where(each > 0, each, np.nan)))
            k = _bisect_increasing(strength, float(strength_target[e]), reach)
            mag[e] = np.clip(_IDENTITY + k * (learned.mag[e] - _IDENTITY), _LOW, _HIGH)
    mag = np.where(_HAS_MAG, mag, np.nan)
    return Schedule(prob, mag, name=f"{learned.name}-amount-of-{reference.name}", count_probs=learned.count_probs,
                    provenance={"control": f"{learned.name}'s ops and relative strengths with {reference.name}'s "
                                           "amount at every entry: the expected ops applied per image (probabilities "
                                           "scaled) and the probability-weighted mean strength (magnitudes' "
                                           "distances from identity scaled)",
                                "note": "a comparison control for benchmarks; never shipped"})


#: What :func:`reordered_schedule` moves of each entry, and the suffix its schedule's name gets.
REORDER_PARTS = {"both": "", "probabilities": "-prob", "magnitudes": "-mag"}


def reordered_schedule(learned: Schedule, order: str, seed: int = 0, part: str = "both") -> Schedule:
    """``learned``'s entries reversed (``order="reversed"``) or permuted at random (``"shuffled"``, with
    ``seed``): the same policies, each for as many epochs, in another order. With ``part="probabilities"``
    only the entries' probabilities move and the magnitudes stay in ``learned``'s order (``"magnitudes"``:
    the other way round), so that the two halves of the order's effect can be told apart.

    Raises:
        ValueError: an unknown ``order`` or ``part``, or a schedule of one entry.
    """
    if order not in ("reversed", "shuffled"):
        raise ValueError(f"order must be 'reversed' or 'shuffled', got {order!r}")
    if part not in REORDER_PARTS:
        raise ValueError(f"part must be one of {sorted(REORDER_PARTS)}, got {part!r}")
    if learned.epochs < 2:
        raise ValueError(f"{learned.name} has one entry: there is no order to change")
    index = (np.arange(learned.epochs)[::-1] if order == "reversed"
             else np.random.default_rng(seed).permutation(learned.epochs))
    how = "in reverse order" if order == "reversed" else f"in a random order (seed {seed})"
    suffix = ("reversed" if order == "reversed" else f"time-shuffled{seed}") + REORDER_PARTS[part]
    prob = learned.prob if part == "magnitudes" else learned.prob[index]
    mag = learned.mag if part == "probabilities" else learned.mag[index]
    what = "entries" if part == "both" else f"entries' {part} (the rest in its order)"
    return Schedule(prob, mag, name=f"{learned.name}-{suffix}", count_probs=learned.count_probs, provenance={
        "control": f"the {learned.epochs} {what} of {learned.name} {how}",
        "order": index.tolist(), "note": "a comparison control for benchmarks; never shipped"})


def smoothed_schedule(learned: Schedule, window: float) -> Schedule:
    """``learned`` averaged over a centred moving window of ``window`` of its entries (cut at its ends): each
    entry's probabilities the window's mean, each magnitude the window's mean weighted by that slot's
    probabilities (its plain mean where they are all 0). The trend over training is kept; the changes from
    one entry to the next (PBA's explore steps every 3 epochs) are smoothed away.

    Raises:
        ValueError: ``window`` not in (0, 1], or a schedule of one entry.
    """
    if isinstance(window, bool) or not isinstance(window, (int, float)) or not 0 < window <= 1:
        raise ValueError(f"window must be a fraction of the entries in (0, 1], got {window!r}")
    if learned.epochs < 2:
        raise ValueError(f"{learned.name} has one entry: there is nothing to smooth")
    half = max(1, round(window * learned.epochs)) // 2
    prob = np.empty_like(learned.prob)
    mag = np.array(learned.mag, dtype=float)
    for e in range(learned.epochs):
        part = slice(max(0, e - half), min(learned.epochs, e + half + 1))
        p, m = learned.prob[part], learned.mag[part]
        prob[e] = p.mean(axis=0)
        weight = p.sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            mag[e] = np.where(weight > 0, (p * m).sum(axis=0) / weight, m.mean(axis=0))
    mag = np.where(_HAS_MAG, mag, np.nan)
    return Schedule(prob, mag, name=f"{learned.name}-smooth{round(100 * window)}", count_probs=learned.count_probs,
                    provenance={"control": f"{learned.name} averaged over a centred moving window of {2 * half + 1} "
                                           f"of its {learned.epochs} entries (magnitudes weighted by probability)",
                                "note": "a comparison control for benchmarks; never shipped"})


def averaged_schedule(schedules: list[Schedule]) -> Schedule:
    """The entrywise mean of several schedules of one length (say, searches of one setting from different
    seeds): each entry's probabilities and magnitudes the plain mean of theirs.

    What the searches' selections share stays in the mean, and their independent walks partly cancel (the mean
    of two halves their variance), so the mean asks whether a consensus of search seeds trains better than
    either seed. Magnitudes are averaged unweighted (not
    by probability, as :func:`smoothed_schedule` does), so that the mean's amount (``pbt.amount``: mean
    probability, mean magnitude fraction, both linear) is the mean of theirs at every entry: searches that
    followed one ``--amount profile`` average to that profile exactly, and the mean differs from them in its
    mix only. A mean of mixes also tends to spread the ops more evenly (entropy is concave), which may help
    by itself; the same mean of their twins (noise for scores) is the control for that.

    Raises:
        TypeError: ``schedules`` is not a list or tuple of :class:`Schedule`.
        ValueError: fewer than two schedules, or schedules of different lengths or ``count_probs`` (named).
    """
    if not isinstance(schedules, (list, tuple)) or not all(isinstance(s, Schedule) for s in schedules):
        raise TypeError(f"schedules must be a list or tuple of Schedule, got {schedules!r}")
    if len(schedules) < 2:
        raise ValueError(f"an average takes at least two schedules, got {len(schedules)}")
    first = schedules[0]
    for other in schedules[1:]:
        if other.epochs != first.epochs:
            raise ValueError(f"schedules to average must have one length: {first.name} has {first.epochs} entries, "
                             f"{other.name} {other.epochs}")
        if other.count_probs != first.count_probs:
            raise ValueError(f"schedules to average must share count_probs: {first.name} has {first.count_probs}, "
                             f"{other.name} {other.count_probs}")
    names = [s.name for s in schedules]
    return Schedule(np.mean([s.prob for s in schedules], axis=0), np.mean([s.mag for s in schedules], axis=0),
                    name=f"{first.name}-avg{len(schedules)}", count_probs=first.count_probs,
                    provenance={"control": f"the entrywise mean of {', '.join(names)} (magnitudes unweighted)",
                                "averaged": names, "note": "a comparison control for benchmarks; never shipped"})


def mean_strength(schedule: Schedule) -> np.ndarray:
    """Per entry, the slots' mean strength weighted by their probabilities (NaN where no magnitude slot may
    fire): a magnitude's strength is its distance from the op's identity as a fraction of the farthest its
    range reaches (0 mildest, 1 strongest; ops without a magnitude left out)."""
    return _strength(schedule.prob, schedule.mag)


def _strength(prob: np.ndarray, mag: np.ndarray) -> np.ndarray:
    """:func:`mean_strength` of ``(entries, 2, NUM_OPS)`` arrays (no :class:`Schedule` built, for the bisection
    of :func:`amount_matched_schedule`)."""
    strength = np.abs(mag - _IDENTITY) / _SPAN
    weight = np.where(_HAS_MAG, prob, 0.0)
    total = weight.sum(axis=(1, 2))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, np.nansum(weight * strength, axis=(1, 2)) / total, np.nan)


def op_shares(schedule: Schedule) -> np.ndarray:
    """Per entry, each op's share of the ops an image is expected to receive, ``(entries, 15)`` in canonical
    order: its applied probability (:func:`~hba_augment.search.hyper_input.applied_probability`, both copies
    summed) over the sum of all 15 (a row of NaN where none fires)."""
    prob = torch.tensor(schedule.prob, dtype=torch.float64)
    applied = np.stack([applied_probability(p, schedule.count_probs).numpy().sum(axis=0) for p in prob])
    total = applied.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, applied / total, np.nan)


def op_spread(schedule: Schedule) -> np.ndarray:
    """Per entry, how evenly the ops an image is expected to receive spread over the 15 ops: the entropy of
    :func:`op_shares`, normalised to 1 for all ops alike and 0 for one op alone (NaN where none fires)."""
    share = op_shares(schedule)
    with np.errstate(invalid="ignore", divide="ignore"):
        entropy = -np.where(share > 0, share * np.log(share), 0.0).sum(axis=1) / np.log(NUM_OPS)
    return np.where(np.isfinite(share[:, 0]), entropy, np.nan)


def shuffled_schedule(learned: Schedule, seed: int = 0) -> tuple[Schedule, list[str]]:
    """``learned`` with op identities permuted: op ``k``'s probabilities and relative magnitudes go to op
    ``perm[k]``, at every entry and in both copies (a derangement: every op moves).

    A magnitude moves as its position in the range, ``(m - lo) / (hi - lo)``; an op without a magnitude
    hands over the mean position of the magnitude ops of its entry and copy.

    Returns:
        The schedule and ``perm`` as op names (``perm[k]`` receives op ``k``'s values).
    """
    rng = np.random.default_rng(seed)
    while True:
        perm = rng.permutation(NUM_OPS)
        if not np.any(perm == np.arange(NUM_OPS)):
            break
    frac = (learned.mag - _LOW) / (_HIGH - _LOW)  # NaN for the ops without a magnitude
    mean_frac = np.nanmean(frac, axis=2, keepdims=True)
    frac = np.where(_HAS_MAG, frac, mean_frac)
    prob = np.empty_like(learned.prob)
    new_frac = np.empty_like(frac)
    prob[:, :, perm] = learned.prob
    new_frac[:, :, perm] = frac
    mag = np.where(_HAS_MAG, _LOW + np.clip(new_frac, 0.0, 1.0) * (_HIGH - _LOW), np.nan)
    names = [OP_NAMES[j] for j in perm]
    return Schedule(prob, mag, name=f"{learned.name}-shuffled", count_probs=learned.count_probs, provenance={
        "control": f"{learned.name} with op identities permuted (seed {seed}): op k's values go to perm[k]",
        "perm": dict(zip(OP_NAMES, names, strict=True)),
    }), names


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--learned", required=True, help="the learned schedule (shipped name or JSON path)")
    p.add_argument("--pba-log", default=str(PBA_LOG), help="PBA schedule log")
    p.add_argument("--pba-epochs", type=int, default=200, help="epochs of PBA's search (its log's length)")
    p.add_argument("--seed", type=int, default=0, help="seed of the shuffled control's permutation")
    p.add_argument("--delay", type=int, help="also write delayed.json: the learned schedule this many entries late")
    p.add_argument("--ramp", type=float, help="also write ramped.json: the learned schedule's last entry, the "
                   "number of ops it applies per image ramped up from 0 over this fraction of the epochs")
    p.add_argument("--strength-ramp", type=float, help="also write strength.json: the learned schedule's last entry, "
                   "its magnitudes rising from the ops' identities over this fraction of the epochs")
    p.add_argument("--reorder", action="store_true",
                   help="also write reversed.json and time-shuffled.json (--seed): the learned schedule's entries in "
                   "reverse and in a random order")
    p.add_argument("--reorder-part", choices=sorted(REORDER_PARTS), default="both",
                   help="what --reorder moves of each entry (default: both; otherwise the files' names end in -prob "
                   "or -mag, as the schedules' do)")
    p.add_argument("--smooth", type=float, help="also write smoothed.json: the learned schedule averaged over a "
                   "centred moving window of this fraction of its entries")
    p.add_argument("--average", nargs="+", metavar="SCHEDULE", help="also write averaged.json: the entrywise mean "
                   "of the learned schedule and these (JSON paths) of its length")
    p.add_argument("--match-amount", metavar="REFERENCE", help="also write amount.json: the learned schedule's ops "
                   "with the reference schedule's (JSON path) amount of augmentation at every entry")
    p.add_argument("--profile", type=int, metavar="N",
                   help="only print the learned schedule's mean slot probability, ops applied per image (applied_ops), "
                   "mean strength (mean_strength) and "
                   "op spread (op_spread) over N equal parts of its entries")
    p.add_argument("--ops", action="store_true",
                   help="with --profile: also print each op's share of the ops applied (op_shares), mean over each part")
    p.add_argument("--out", help="folder for pba.json, initial.json, last.json, mean.json, shuffled.json "
                   "(and delayed.json, ramped.json, strength.json, smoothed.json, averaged.json, amount.json, reversed.json, "
                   "time-shuffled.json)")
    args = p.parse_args(argv)
    from hba_augment import pretrained

    learned = (pretrained.load_pretrained(args.learned) if args.learned in pretrained.available_policies()
               else Schedule.load(args.learned))
    if args.profile:
        strength, spread, applied = mean_strength(learned), op_spread(learned), applied_ops(learned)

        def mean(values: np.ndarray) -> float:
            return float(np.nanmean(values)) if np.isfinite(values).any() else float("nan")

        parts = np.array_split(np.arange(learned.epochs), min(args.profile, learned.epochs))
        for part in parts:
            print(f"entries {part[0]}-{part[-1]}: mean p {learned.prob[part].mean():.3f}, ops applied "
                  f"{applied[part].mean():.3f}, mean strength {mean(strength[part]):.3f}, op spread "
                  f"{mean(spread[part]):.3f}")
        if args.ops:
            shares = op_shares(learned)
            print("op share of the ops applied, by part: " + " ".join(f"{q[0]}-{q[-1]}" for q in parts))
            for k, name in enumerate(OP_NAMES):
                print(f"  {name}: " + " ".join(f"{mean(shares[q, k]):.3f}" for q in parts))
        return 0
    if args.ops:
        p.error("--ops goes with --profile")
    if args.out is None:
        p.error("--out is required (unless --profile)")
    reference = Schedule.load(args.match_amount) if args.match_amount else None
    averaged = [Schedule.load(path) for path in args.average or ()]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    shuffled, perm = shuffled_schedule(learned, args.seed)
    part = REORDER_PARTS[args.reorder_part]
    for name, schedule in (("pba", pba_schedule(Path(args.pba_log), args.pba_epochs)), ("initial", initial_schedule()),
                           ("last", last_entry_schedule(learned)), ("mean", mean_schedule(learned)),
                           ("shuffled", shuffled),
                           *((("delayed", delayed_schedule(learned, args.delay)),) if args.delay else ()),
                           *((("ramped", ramped_schedule(learned, args.ramp)),) if args.ramp is not None else ()),
                           *((("strength", strength_ramped_schedule(learned, args.strength_ramp)),)
                             if args.strength_ramp is not None else ()),
                           *((("smoothed", smoothed_schedule(learned, args.smooth)),) if args.smooth is not None
                             else ()),
                           *((("averaged", averaged_schedule([learned, *averaged])),) if averaged else ()),
                           *((("amount", amount_matched_schedule(learned, reference)),)
                             if reference is not None else ()),
                           *(((f"reversed{part}", reordered_schedule(learned, "reversed", part=args.reorder_part)),
                              (f"time-shuffled{part}",
                               reordered_schedule(learned, "shuffled", args.seed, args.reorder_part)))
                             if args.reorder else ())):
        schedule.save(out / f"{name}.json")
        ops = schedule.prob.sum(axis=(1, 2))
        print(f"{name}: {schedule.epochs} entries, expected fired slots per entry (sum of p) "
              f"{ops.min():.2f}..{ops.max():.2f} -> {out / (name + '.json')}")
    print("shuffled permutation:", ", ".join(f"{a}->{b}" for a, b in zip(OP_NAMES, perm, strict=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
