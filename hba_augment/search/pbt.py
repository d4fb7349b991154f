"""The steps of Population-Based Training (Jaderberg et al. 2017) as PBA uses them (Ho et al., ICML 2019),
in HBA's policy space: explore, truncation selection, and the lineage of the final best member.

Plain numpy, no torch: the driver of :mod:`~hba_augment.search.population` calls these once per round,
and the tests check them on hand-made numbers.

A *policy* here is a pair ``(prob, mag)`` of ``(2, 15)`` float64 arrays, copy x op in canonical order:
probabilities in [0, 1], unsigned magnitudes in each op's schedule range and NaN for the three ops without
one (the contract, sections 1-4).

PBA's explore (``pba/search.py``) works on discrete levels: each probability on 11 levels (0, 0.1, ..., 1)
and each magnitude on 10; with probability 0.2 a value is resampled uniformly, otherwise it is shifted by
0, 1, 2 or 3 levels (uniformly) in a random direction and clipped. HBA's space is continuous, so values
are handled as fractions ``f`` of their range (a probability is its own fraction): a resample draws ``f``
uniformly from [0, 1], a shift adds ``k / 10`` with ``k`` uniform in {0, 1, 2, 3} and a random sign, and
``f`` is clipped to [0, 1]. A shift therefore moves a value by at most 30% of its range, as PBA's do.

*Held amount* (``--amount held``, not PBA's): a policy's *amount* is its mean probability over the 30 slots
and the mean fraction of their ranges of its 24 magnitudes (:func:`amount`). Selection that ranks members
after one round favours less augmentation (measured: ``benchmarks/RESULTS.md``, "What the searches'
selection chooses"), whatever trains the better network in the end. With the amount held, every explored
policy is shifted back to the start's amount (:func:`hold_amount`), so that selection can choose the mix of
ops and magnitudes but not those two means. It does not hold how much images change: the mix sets that as
much as the means do (measured: ``benchmarks/RESULTS.md``, "Holding the amount"). The shift draws nothing: a
held search makes the same explore draws as a free one of its seed.

*Amount profile* (``--amount profile``, not PBA's): the held amount moves. Each round's target is a given
schedule's amount at the round's first epoch (:func:`amount_targets`), and every member, not only the explored
ones, is shifted to it as the round starts (``hold_all``), so that every member of a round augments as much
as the profile does then, and selection chooses the mix only, under an amount over time that the user chose
(measured reason: ``benchmarks/RESULTS.md``, "The second amount cell's seed 0"). It draws nothing either.

*Resampling to the prior* (``--resample prior``, not PBA's): PBA's resample draws a value uniformly over its
range, so the explore walk forgets its start: with no signal at all, a lineage from the TrivialAugment-like
start gives Invert, which that start all but leaves out, about the probability of any other op, and selection
is left to push it back, as six of the ten searches measured did (``benchmarks/RESULTS.md``, "What selection
pushes against"). With ``resample="prior"`` a resampled value returns to the ``init`` policy's value instead
(:func:`resample_anchor`): the walk is pulled back to its start, so a search with no signal stays near it,
and what selection keeps away from the start is what it saw. It draws the same numbers as a uniform
resample, so such a search is paired with the uniform one of its seed.

*Magnitudes only* (``vary="magnitudes"``, ``--vary magnitudes``, not PBA's): explore varies the 24 magnitudes
and leaves the 30 probabilities at the explored policy's, so that every member applies each op as often as
the start does (with a held amount or a profile, the start's probabilities shifted to the target) and
selection chooses how strong each op is, not which ops apply. Why: two profile searches of the CPU proxy
agreed on their magnitudes (r +0.65 over the second half) and not on their probabilities (r +0.09;
``benchmarks/RESULTS.md``, "Do the two seeds' selections agree?"). It makes the probabilities' draws and drops
them, so such a search makes the same magnitude draws as the one of its seed that varies all values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from hba_augment._space import MAGNITUDE_OPS, NUM_COPIES, NUM_OPS, OP_RANGES
from hba_augment.search.priors import Prior

__all__ = [
    "AMOUNTS",
    "AMOUNT_EDGE",
    "DEFAULT_MEMBER_START",
    "DEFAULT_POPULATION",
    "EXPLORE_LEVELS",
    "EXPLORE_MAX_SHIFT",
    "EXPLORE_RESAMPLE_PROB",
    "MEMBER_STARTS",
    "RESAMPLES",
    "TRUNCATION_QUANTILE",
    "VARIES",
    "amount",
    "amount_targets",
    "check_settings",
    "default_exploit_every",
    "exploit",
    "explore",
    "hold_amount",
    "lineage",
    "lineage_policies",
    "mag_fractions",
    "ranking",
    "resample_anchor",
    "round_rng",
    "round_starts",
    "start_policies",
    "start_rng",
    "truncation_selection",
]

#: PBA's probability of resampling a hyperparameter instead of shifting it.
EXPLORE_RESAMPLE_PROB = 0.2
#: PBA's largest shift, in levels.
EXPLORE_MAX_SHIFT = 3
#: Levels per range: a shift of one level moves a value by a tenth of its range.
EXPLORE_LEVELS = 10
#: Members of a population search when none is given: what one H100 trains side by side in a call.
DEFAULT_POPULATION = 8
#: How the members of round 0 start. ``"explored"``: member 0 at the start policy, every other member at an
#: explored copy of it, so that the first round already compares policies. ``"same"``: every member at the
#: start policy, as PBA's search does (``pba/setup.py`` gives every trial the all-zero policy; policies
#: change only when a member copies another), so that the lineage keeps the start until a member that
#: copied wins. Without signal that only delays the ramp a little (docs/contract.md, section 6).
MEMBER_STARTS = ("explored", "same")
#: The members' start when none is given: the one the measured searches ran with.
DEFAULT_MEMBER_START = "explored"
#: How the members' amount of augmentation may move (module docstring). ``"free"``: as PBA, explore moves
#: every value and selection keeps whatever scores best; ``"held"``: every explored policy is shifted back to
#: the start's amount, so that selection chooses the mix only; ``"profile"``: every member is shifted, each
#: round, to a given schedule's amount at the round's first epoch.
AMOUNTS = ("free", "held", "profile")
#: A target amount is kept this far inside (0, 1): :func:`hold_amount` cannot reach a mean of exactly 0 or 1
#: (a profile that starts with no augmentation at all, as ``--init zero`` does, has one).
AMOUNT_EDGE = 1e-3
#: Where explore's resample puts a value (module docstring). ``"uniform"``: a uniform draw over its range, as
#: PBA; ``"prior"``: the ``init`` policy's value, so that the walk returns to its start.
RESAMPLES = ("uniform", "prior")
#: Which values explore varies (module docstring). ``"all"``: every probability and magnitude, as PBA;
#: ``"magnitudes"``: the magnitudes only, the probabilities kept.
VARIES = ("all", "magnitudes")
#: PBT's truncation selection: the bottom quarter copies the top quarter.
TRUNCATION_QUANTILE = 0.25
# PBA perturbs every 3 epochs of a 200-epoch search.
_PBA_INTERVAL, _PBA_EPOCHS = 3, 200

_SHAPE = (NUM_COPIES, NUM_OPS)
_MAG = list(MAGNITUDE_OPS)
_LOW = np.array([OP_RANGES[k].low for k in _MAG], dtype=np.float64)
_HIGH = np.array([OP_RANGES[k].high for k in _MAG], dtype=np.float64)


# The driver's streams, keyed by the search's seed alone: a resumed search draws the same numbers, and a
# replay of a finished search (benchmarks/pbt_null.py) can draw them again. Changing them changes every
# searched schedule of a seed.
_START_STREAM, _ROUND_STREAM = 1, 2


def start_rng(seed: int, member: int) -> np.random.Generator:
    """The draws of ``member``'s explored starting policy in a population search of ``seed``."""
    return np.random.default_rng([seed, _START_STREAM, member])


def round_rng(seed: int, r: int) -> np.random.Generator:
    """The draws of round ``r``'s exploit in a population search of ``seed``: each loser's donor
    (:func:`truncation_selection`), then its explored policy (:func:`explore`), in that order."""
    return np.random.default_rng([seed, _ROUND_STREAM, r])


def default_exploit_every(epochs: int) -> int:
    """Epochs per round when ``--exploit-every`` is not given: PBA's 3 epochs per 200, scaled to ``epochs``
    (rounded, at least 1). A 200-epoch search gets 3 (67 rounds); a 20-epoch one gets 1."""
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs must be a positive int, got {epochs!r}")
    return max(1, round(_PBA_INTERVAL * epochs / _PBA_EPOCHS))


def round_starts(epochs: int, every: int) -> list[int]:
    """The first epoch of each round: ``[0, every, 2 every, ...]`` below ``epochs`` (the last round may be short)."""
    for name, value in (("epochs", epochs), ("every", every)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    return list(range(0, epochs, every))


def _check_policy(prob: np.ndarray, mag: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    prob = np.asarray(prob, dtype=np.float64)
    mag = np.asarray(mag, dtype=np.float64)
    if prob.shape != _SHAPE or mag.shape != _SHAPE:
        raise ValueError(f"prob and mag must have shape {_SHAPE}, got {prob.shape} and {mag.shape}")
    if not np.all((prob >= 0) & (prob <= 1)):
        raise ValueError(f"probabilities must lie in [0, 1], got {prob[~((prob >= 0) & (prob <= 1))].tolist()}")
    inner = mag[:, _MAG]
    if not np.all((inner >= _LOW) & (inner <= _HIGH)):
        raise ValueError(f"magnitudes must lie in their ops' ranges, got {inner.tolist()}")
    return prob, mag


def mag_fractions(mag: np.ndarray) -> np.ndarray:
    """The 12 magnitudes of each copy as fractions of their ranges, ``(..., 2, 12)``."""
    return (np.asarray(mag, dtype=np.float64)[..., _MAG] - _LOW) / (_HIGH - _LOW)


def amount(prob: np.ndarray, mag: np.ndarray) -> tuple[float, float]:
    """A policy's amount of augmentation: ``(mean probability, mean magnitude fraction)``, over the 30 slots and
    the 24 magnitudes. For the four enhancers a fraction is a level, as in PBA's space, not a strength (their
    identity factor 1 is the middle of the range)."""
    prob, mag = _check_policy(prob, mag)
    return float(prob.mean()), float(mag_fractions(mag).mean())


# Values are moved in logit space, so that none leaves (0, 1) and their order within a group is kept; the
# ends are pulled in by _EDGE so that a value at 0 or 1 can move too.
_EDGE = 1e-6
#: The shift is found by Newton's method inside a bracket that every step narrows (a step that would leave it
#: bisects instead), to a mean within _SHIFT_TOLERANCE of the target: 6 steps at the median and at most 11 over
#: 3,000 random policies and targets (thirty-ninth session), where bisection took 80.
_SHIFT_TOLERANCE = 1e-15
_SHIFT_STEPS = 100


def _shift_to_mean(frac: np.ndarray, target: float) -> np.ndarray:
    clipped = np.clip(frac, _EDGE, 1 - _EDGE)
    logits = np.log(clipped) - np.log1p(-clipped)
    low, high, shift = -40.0, 40.0, 0.0
    for _ in range(_SHIFT_STEPS):  # the mean is increasing in the shift
        values = 1 / (1 + np.exp(-(logits + shift)))
        gap = values.mean() - target
        if abs(gap) <= _SHIFT_TOLERANCE:
            break
        if gap < 0:
            low = shift
        else:
            high = shift
        slope = (values * (1 - values)).mean()  # the mean's derivative in the shift
        step = shift - gap / slope if slope > 0 else np.nan
        shift = step if low < step < high else (low + high) / 2
    return 1 / (1 + np.exp(-(logits + shift)))


def hold_amount(prob: np.ndarray, mag: np.ndarray, target: tuple[float, float]) -> tuple[np.ndarray, np.ndarray]:
    """The policy shifted to the amount ``target`` (:func:`amount`): one shift in logit space for all 30
    probabilities, another for all 24 magnitude fractions, each found by a safeguarded Newton search. Every
    value stays inside its range and the order of the values within each group is kept, so the mix is the
    policy's own.

    Args:
        prob, mag: the policy, ``(2, 15)`` each (the inputs are not modified).
        target: ``(mean probability, mean magnitude fraction)``, each in (0, 1).

    Returns:
        ``(prob, mag)``: new float64 arrays whose amount equals ``target`` to about 1e-12.

    Raises:
        ValueError: a policy of the wrong shape or out of range, or a target outside (0, 1) (named).
    """
    prob, mag = _check_policy(prob, mag)
    if (not isinstance(target, (tuple, list)) or len(target) != 2
            or not all(isinstance(t, (int, float)) and 0.0 < t < 1.0 for t in target)):
        raise ValueError(f"target must be a (mean probability, mean magnitude fraction) pair in (0, 1), got {target!r}")
    new_mag = mag.copy()
    frac = _shift_to_mean(mag_fractions(mag), float(target[1]))
    new_mag[:, _MAG] = np.clip(_LOW + (_HIGH - _LOW) * frac, _LOW, _HIGH)
    return _shift_to_mean(prob, float(target[0])), new_mag


def amount_targets(mode: str, prior: Prior, starts: Sequence[int],
                   profile: tuple[np.ndarray, np.ndarray] | None = None) -> list[tuple[float, float]] | None:
    """What a search with ``--amount mode`` that starts at ``prior`` (its ``--init``,
    :func:`~hba_augment.search.priors.prior_policy`) holds its members to in each round: ``None`` (nothing
    held) for ``"free"``; the prior's :func:`amount` in every round for ``"held"``; for ``"profile"``, the
    amount of ``profile``'s policy at each round's first epoch, kept :data:`AMOUNT_EDGE` inside (0, 1).

    Args:
        mode: one of :data:`AMOUNTS`.
        prior: the search's start.
        starts: the rounds' first epochs (:func:`round_starts`).
        profile: ``(prob, mag)``, ``(epochs, 2, 15)`` each, one policy per epoch of the search
            (:func:`~hba_augment.search.priors.amount_profile`); required for ``"profile"`` only.

    Returns:
        One ``(mean probability, mean magnitude fraction)`` per round, or ``None``.

    Raises:
        ValueError: ``mode`` is not one of :data:`AMOUNTS`, or ``profile`` is missing, given for another
            mode, or shorter than the search (named).
    """
    check_settings(amount=mode)
    if (profile is None) != (mode != "profile"):
        raise ValueError(f"an amount profile is given with amount 'profile' and only then, got amount {mode!r} "
                         f"and {'no profile' if profile is None else 'a profile'}")
    if mode == "free":
        return None
    if mode == "held":
        return [amount(prior.prob, prior.mag)] * len(starts)
    prob, mag = (np.asarray(a, dtype=np.float64) for a in profile)
    if prob.ndim != 3 or prob.shape[1:] != _SHAPE or mag.shape != prob.shape or (starts and max(starts) >= len(prob)):
        raise ValueError(f"profile must hold one (2, 15) policy per epoch of the search ({max(starts, default=-1) + 1}"
                         f" or more), got shapes {prob.shape} and {mag.shape}")
    return [tuple(float(np.clip(a, AMOUNT_EDGE, 1 - AMOUNT_EDGE)) for a in amount(prob[e], mag[e]))
            for e in starts]


def resample_anchor(mode: str, prior: Prior) -> tuple[np.ndarray, np.ndarray] | None:
    """What a search with ``--resample mode`` that starts at ``prior`` (its ``--init``,
    :func:`~hba_augment.search.priors.prior_policy`) resamples its values to: the prior's ``(prob, mag)`` for
    ``"prior"``, ``None`` (a uniform draw) for ``"uniform"``.

    Raises:
        ValueError: ``mode`` is not one of :data:`RESAMPLES`.
    """
    check_settings(resample=mode)
    return None if mode == "uniform" else (prior.prob, prior.mag)


def _explore_fractions(frac: np.ndarray, rng: np.random.Generator, resample_prob: float, max_shift: int,
                       levels: int, anchor: np.ndarray | None) -> np.ndarray:
    resample = rng.random(frac.shape) < resample_prob
    fresh = rng.random(frac.shape)  # drawn either way, so that both kinds of resample make the same draws
    if anchor is not None:
        fresh = anchor
    steps = rng.integers(0, max_shift + 1, size=frac.shape)
    signs = rng.choice(np.array([-1.0, 1.0]), size=frac.shape)
    shifted = np.clip(frac + signs * steps / levels, 0.0, 1.0)
    return np.where(resample, fresh, shifted)


def explore(
    prob: np.ndarray,
    mag: np.ndarray,
    rng: np.random.Generator,
    *,
    resample_prob: float = EXPLORE_RESAMPLE_PROB,
    max_shift: int = EXPLORE_MAX_SHIFT,
    levels: int = EXPLORE_LEVELS,
    hold: tuple[float, float] | None = None,
    anchor: tuple[np.ndarray, np.ndarray] | None = None,
    vary: str = "all",
) -> tuple[np.ndarray, np.ndarray]:
    """PBA's explore step on one policy (see the module docstring); the inputs are not modified.

    Every one of the 30 probabilities and 24 magnitudes is, independently, resampled (uniformly over its
    range, or to ``anchor``'s value) with probability ``resample_prob``, else shifted by ``k / levels`` of
    its range, ``k`` uniform in ``{0, ..., max_shift}``, in a random direction, and clipped to the range.
    The NaN magnitudes of the ops without one stay NaN.

    Args:
        prob, mag: the policy, ``(2, 15)`` each.
        rng: the random stream (the caller seeds it, so a search is reproducible).
        resample_prob: in [0, 1].
        max_shift: the largest shift in levels, >= 0.
        levels: levels per range, >= 1.
        hold: an amount to shift the explored policy back to (:func:`hold_amount`; ``None``: none, as PBA).
        anchor: the policy ``(prob, mag)`` a resampled value returns to (:func:`resample_anchor`; ``None``: a
            uniform draw, as PBA).
        vary: one of :data:`VARIES`: ``"all"`` (PBA) or ``"magnitudes"`` (the probabilities are drawn for,
            as with ``"all"``, and kept; ``hold`` still shifts them).

    Returns:
        ``(prob, mag)``: new float64 arrays, inside the ranges.

    Raises:
        ValueError: a policy of the wrong shape or out of range, or bad settings (named).
    """
    prob, mag = _check_policy(prob, mag)
    check_settings(resample_prob=resample_prob, max_shift=max_shift, levels=levels, vary=vary)
    if anchor is not None:
        anchor = _check_policy(*anchor)
    new_prob = _explore_fractions(prob, rng, resample_prob, max_shift, levels, None if anchor is None else anchor[0])
    if vary == "magnitudes":  # drawn and dropped, so that the magnitudes' draws are those of vary="all"
        new_prob = prob.copy()
    frac = _explore_fractions(mag_fractions(mag), rng, resample_prob, max_shift, levels,
                              None if anchor is None else mag_fractions(anchor[1]))
    new_mag = mag.copy()
    # Clipped again in value space: lo + (hi - lo) * 1.0 may round a hair past hi.
    new_mag[:, _MAG] = np.clip(_LOW + (_HIGH - _LOW) * frac, _LOW, _HIGH)
    return (new_prob, new_mag) if hold is None else hold_amount(new_prob, new_mag, hold)


def ranking(scores: Sequence[float]) -> list[int]:
    """Member indices from best to worst: higher scores first, a NaN score last, ties to the lower index (so
    that every choice made from the ranking is reproducible). ``ranking(scores)[0]`` is the best member.

    Raises:
        ValueError: ``scores`` is not a 1-D sequence of numbers.
    """
    values = np.asarray(scores, dtype=np.float64)
    if values.ndim != 1:
        raise ValueError(f"scores must be a 1-D sequence of numbers, got shape {values.shape}")
    keyed = np.where(np.isnan(values), -np.inf, values)
    return sorted(range(len(values)), key=lambda i: (-keyed[i], i))


def check_settings(*, resample_prob: float = EXPLORE_RESAMPLE_PROB, max_shift: int = EXPLORE_MAX_SHIFT,
                   levels: int = EXPLORE_LEVELS, quantile: float = TRUNCATION_QUANTILE,
                   member_start: str = DEFAULT_MEMBER_START, score_ema: float | None = None,
                   amount: str = "free", resample: str = "uniform", vary: str = "all") -> None:
    """Raise ``ValueError`` naming the first bad explore or exploit setting (see :func:`explore` and
    :func:`truncation_selection` for the ranges; ``member_start`` is one of :data:`MEMBER_STARTS`,
    ``amount`` one of :data:`AMOUNTS`, ``resample`` one of :data:`RESAMPLES`, ``vary`` one of :data:`VARIES`;
    ``score_ema``, the decay per step of the weights' average that members are scored on, is ``None`` or in
    (0, 1))."""
    if not (isinstance(resample_prob, (int, float)) and 0.0 <= resample_prob <= 1.0):
        raise ValueError(f"resample_prob must be a number in [0, 1], got {resample_prob!r}")
    for name, value, low in (("max_shift", max_shift, 0), ("levels", levels, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    if not (isinstance(quantile, (int, float)) and 0.0 < quantile <= 0.5):
        raise ValueError(f"quantile must be a number in (0, 0.5], got {quantile!r}")
    if member_start not in MEMBER_STARTS:
        raise ValueError(f"member_start must be one of {MEMBER_STARTS}, got {member_start!r}")
    if score_ema is not None and (isinstance(score_ema, bool) or not isinstance(score_ema, (int, float))
                                  or not 0.0 < score_ema < 1.0):
        raise ValueError(f"score_ema must be None or a number in (0, 1), got {score_ema!r}")
    if amount not in AMOUNTS:
        raise ValueError(f"amount must be one of {AMOUNTS}, got {amount!r}")
    if resample not in RESAMPLES:
        raise ValueError(f"resample must be one of {RESAMPLES}, got {resample!r}")
    if vary not in VARIES:
        raise ValueError(f"vary must be one of {VARIES}, got {vary!r}")


def truncation_selection(
    scores: Sequence[float], rng: np.random.Generator, quantile: float = TRUNCATION_QUANTILE
) -> list[tuple[int, int]]:
    """PBT's exploit step: each member of the bottom ``quantile`` copies a random member of the top one.

    ``q = min(ceil(N * quantile), N // 2)`` members on each side (Ray Tune's rule, which PBA ran on: with 2
    members the worse copies the better). Members are ranked by score, higher is better; a NaN score ranks
    last, and ties go to the lower index, so that the choice is reproducible.

    Args:
        scores: one score per member (validation accuracy).
        rng: draws each loser's donor uniformly from the top ``q``.
        quantile: in (0, 0.5].

    Returns:
        ``[(loser, donor), ...]`` sorted by loser; empty for fewer than 2 members.

    Raises:
        ValueError: a bad quantile or a score that is not a number.
    """
    check_settings(quantile=quantile)
    order = ranking(scores)
    n = len(order)
    q = min(math.ceil(n * quantile), n // 2)
    if q == 0:
        return []
    top, bottom = order[:q], order[n - q:]
    return [(loser, int(top[rng.integers(q)])) for loser in sorted(bottom)]


def lineage(parents: Sequence[Sequence[int]], best: int) -> list[int]:
    """The member whose policy each round of the final ``best`` member's history ran with.

    ``parents[r][m]`` is the member whose weights member ``m`` started round ``r`` with (``m`` itself when
    it did not copy; round 0 starts from scratch, so ``parents[0][m] == m``). Following the copies back
    from ``best`` gives, for every round, the member whose network became the final one (PBA's schedule
    is read off the same way).

    Returns:
        ``chain`` with ``chain[r]`` the member of round ``r``; ``chain[-1] == best``.

    Raises:
        ValueError: an empty history, rows of different lengths, or an index out of range.
    """
    if not parents:
        raise ValueError("parents must hold at least one round")
    n = len(parents[0])
    for r, row in enumerate(parents):
        if len(row) != n or any(not 0 <= int(p) < n for p in row):
            raise ValueError(f"parents[{r}] must hold {n} member indices in [0, {n}), got {list(row)}")
    if not 0 <= best < n:
        raise ValueError(f"best must be a member index in [0, {n}), got {best!r}")
    chain = [best]
    for r in range(len(parents) - 1, 0, -1):
        chain.append(int(parents[r][chain[-1]]))
    return chain[::-1]


def start_policies(prob: np.ndarray, mag: np.ndarray, population: int, seed: int, *,
                   member_start: str = DEFAULT_MEMBER_START, resample_prob: float = EXPLORE_RESAMPLE_PROB,
                   max_shift: int = EXPLORE_MAX_SHIFT,
                   hold: tuple[float, float] | None = None,
                   anchor: tuple[np.ndarray, np.ndarray] | None = None,
                   hold_all: bool = False, vary: str = "all") -> tuple[np.ndarray, np.ndarray]:
    """Round 0's policies, ``(population, 2, 15)`` each: member 0 at the start ``(prob, mag)``, the others at
    explored copies of it drawn from :func:`start_rng` (``member_start="explored"``) or at it (``"same"``);
    ``hold``, ``anchor`` and ``vary`` as in :func:`explore`. With ``hold_all`` the members that were not explored are
    shifted to ``hold`` too (``--amount profile``: the start need not have round 0's amount)."""
    check_settings(member_start=member_start, vary=vary)
    start = hold_amount(prob, mag, hold) if hold_all and hold is not None else (prob, mag)
    probs, mags = np.repeat(start[0][None], population, axis=0), np.repeat(start[1][None], population, axis=0)
    if member_start == "explored":
        for m in range(1, population):
            probs[m], mags[m] = explore(prob, mag, start_rng(seed, m), resample_prob=resample_prob,
                                        max_shift=max_shift, hold=hold, anchor=anchor, vary=vary)
    return probs, mags


def exploit(prob: np.ndarray, mag: np.ndarray, scores: Sequence[float], seed: int, r: int, *,
            quantile: float = TRUNCATION_QUANTILE, resample_prob: float = EXPLORE_RESAMPLE_PROB,
            max_shift: int = EXPLORE_MAX_SHIFT,
            hold: tuple[float, float] | None = None,
            anchor: tuple[np.ndarray, np.ndarray] | None = None,
            hold_all: bool = False,
            vary: str = "all",
            ) -> tuple[list[int], np.ndarray, np.ndarray, list[tuple[int, int]]]:
    """Round ``r``'s exploit on the members' policies ``(N, 2, 15)`` and ``scores``: truncation selection, and
    each loser starts the next round from its donor's weights with an explored copy of its donor's policy
    (``hold``, ``anchor`` and ``vary`` as in :func:`explore`), every draw from :func:`round_rng`. With ``hold_all`` the
    members that did not copy are shifted to ``hold`` too (``--amount profile``: the next round's target).
    The inputs are not modified.

    Returns:
        ``(parents, prob, mag, copies)``: whose weights each member starts the next round with, the next
        round's policies, and the ``(loser, donor)`` pairs.
    """
    rng = round_rng(seed, r)
    copies = truncation_selection(scores, rng, quantile)
    parents, new_prob, new_mag = list(range(len(scores))), prob.copy(), mag.copy()
    for loser, donor in copies:
        parents[loser] = donor
        new_prob[loser], new_mag[loser] = explore(prob[donor], mag[donor], rng, resample_prob=resample_prob,
                                                  max_shift=max_shift, hold=hold, anchor=anchor, vary=vary)
    if hold_all and hold is not None:
        losers = {loser for loser, _ in copies}
        for m in (m for m in range(len(scores)) if m not in losers):
            new_prob[m], new_mag[m] = hold_amount(prob[m], mag[m], hold)
    return parents, new_prob, new_mag, copies


def lineage_policies(prob: Sequence[np.ndarray], mag: Sequence[np.ndarray], chain: Sequence[int],
                     starts: Sequence[int], epochs: int) -> tuple[np.ndarray, np.ndarray]:
    """The policy of every epoch along a lineage: round ``r``'s policies ``prob[r]``, ``mag[r]`` (``(N, 2, 15)``
    each), ``chain`` from :func:`lineage`, the rounds' first epochs ``starts`` (:func:`round_starts`).
    Returns ``(prob, mag)``, ``(epochs, 2, 15)`` each: what the searched schedule holds."""
    bounds = [*starts[1:], epochs]
    rounds = [r for r, (a, b) in enumerate(zip(starts, bounds, strict=True)) for _ in range(a, b)]
    return np.stack([prob[r][chain[r]] for r in rounds]), np.stack([mag[r][chain[r]] for r in rounds])
