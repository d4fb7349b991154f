"""Named starting policies of the search (``--init``): where ``lambda`` starts, and what it may be pulled back to.

A *prior* is a constant policy of the search space, ``prob`` and ``mag`` of shape ``(2, 15)`` (copy x op,
ops in :data:`~hba_augment.functional.OPS` order, magnitudes unsigned and NaN for the ops without one),
together with the distribution ``count_probs`` of the number of ops per image that it is meant to be
sampled with. The search starts ``lambda`` at the prior (:func:`~hba_augment.search.hparams.init_hparams`),
and ``--prior-decay`` pulls it back there; the same prior held for every epoch is the control that a
searched schedule must beat (:func:`start_schedule`).

Names (:func:`parse_init` reads them without importing torch):

* ``paper``: every probability 0.05 and every magnitude at ``0.95 lo + 0.05 hi``, with PBA's
  ``count_probs`` (0.2, 0.3, 0.5) (the paper's appendix). Almost no augmentation.
* ``identity``: ``paper``, except that the four PIL enhancers start at their identity factor 1 instead of 0.19.
* ``zero``: every probability 0 and every magnitude at the low end of its range, with PBA's ``count_probs``:
  PBA's own start (Ho et al. 2019: every level 0). No augmentation at all; a population search's explore
  raises a few slots first, so its early policies apply a few ops and later ones more (as PBA's schedule
  does), where from ``paper`` every op is equally likely from the start.
* ``uniform:F`` (``0 < F < 1``): every probability ``F`` and every magnitude at the fraction ``F`` of its
  range, with PBA's ``count_probs``. ``uniform:0.5`` leaves the enhancers at factor 1 (the middle of
  [0.1, 1.9] is the identity), so its geometric and pixel ops do all the work.
* ``trivialaugment``: TrivialAugment (Mueller & Hutter 2021) expressed in this space: one op per image
  (``count_probs = (1/14, 13/14)``: TA's identity is one of its 14 choices), drawn nearly uniformly
  among the 13 ops TA shares with this space (every such slot has probability 0.5, so the first slot of the
  random order that fires is uniform among them; Invert and Cutout, which TA lacks, get 0.02). TA draws a
  magnitude uniformly from the range; a slot holds one magnitude, so the two copies of each op hold the
  two points ``0.5 -+ 1/sqrt(12)`` of the range (0.211 and 0.789), the two-point distribution with the
  uniform one's mean and variance. For the enhancers that is the symmetric pair of factors 0.48 and 1.52.
  The ranges are this space's (PBA's), narrower than TA's "wide" ones for the geometric ops.
* a path to a schedule file (any name ending in ``.json``, :meth:`~hba_augment.schedule.Schedule.load`): the
  policy of its last entry, with its ``count_probs``, so that a search can refine a schedule a user already
  has (a schedule that ramps up, as PBA's, ends at its strongest). The file is read when the prior is
  built; :func:`init_provenance` records its SHA-256 so that a searched schedule names the start it had.
  Probabilities of 0 or 1 and magnitudes at the ends of their ranges are allowed: the gradient search's
  ``lambda`` starts a hair inside them (:func:`~hba_augment.search.hparams.init_hparams`).
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

if TYPE_CHECKING:  # the schedule imports torch; parsing a name must not
    from hba_augment.schedule import Schedule

__all__ = ["INIT_KINDS", "PAPER_FRACTION", "Prior", "amount_profile", "init_provenance", "parse_init", "prior_policy",
           "profile_provenance", "schedule_file", "start_schedule"]

#: The kinds of names :func:`parse_init` accepts (``uniform`` takes a fraction: ``uniform:0.3``; ``schedule``
#: is any path ending in ``.json``).
INIT_KINDS = ("paper", "identity", "zero", "uniform", "trivialaugment", "schedule")
_SCHEDULE_SUFFIX = ".json"
#: The paper's initial position of every hyperparameter inside its range (``0.95 lo + 0.05 hi``).
PAPER_FRACTION = 0.05
# TrivialAugment: one of 14 choices per image, one of which is the identity.
_TA_COUNT_PROBS = (1 / 14, 13 / 14)
_TA_PROB = 0.5
_TA_ABSENT_PROB = 0.02  # Invert and Cutout: not in TrivialAugment's op set
_TA_ABSENT = ("Invert", "Cutout")
_TA_SPREAD = 1 / math.sqrt(12)  # a uniform draw's standard deviation on [0, 1]


class Prior(NamedTuple):
    """A constant policy: ``prob``, ``mag`` (``(2, 15)`` float64 arrays) and ``count_probs``."""

    prob: np.ndarray
    mag: np.ndarray
    count_probs: tuple[float, ...]


def parse_init(init: str) -> tuple[str, float | None]:
    """Split a starting-policy name into its kind and its fraction (``None`` unless ``uniform:F``).

    A name ending in ``.json`` is a schedule file (kind ``"schedule"``); it must exist. Its content is
    checked when the prior is built (:func:`prior_policy`), which imports torch.

    Raises:
        ValueError: an unknown name, a fraction that is not a number strictly between 0 and 1, or a schedule
            file that does not exist.
    """
    if not isinstance(init, str):
        raise ValueError(f"init must be a string such as 'paper' or 'uniform:0.3', got {init!r}")
    if init.lower().endswith(_SCHEDULE_SUFFIX):
        schedule_file(init, "init")
        return "schedule", None
    kind, sep, rest = init.partition(":")
    if kind not in INIT_KINDS or kind == "schedule" or (kind == "uniform") != bool(sep):
        raise ValueError(f"init must be one of 'paper', 'identity', 'zero', 'uniform:F' (0 < F < 1), "
                         f"'trivialaugment' or a schedule file ending in '.json', got {init!r}")
    if kind != "uniform":
        return kind, None
    try:
        fraction = float(rest)
    except ValueError:
        fraction = math.nan
    if not 0.0 < fraction < 1.0:  # NaN fails too
        raise ValueError(f"the fraction of init 'uniform:F' must be a number strictly between 0 and 1, got {rest!r}")
    return kind, fraction


def prior_policy(init: str) -> Prior:
    """The constant policy that ``init`` names (see the module docstring).

    Returns:
        :class:`Prior` with ``prob`` and ``mag`` of shape ``(2, 15)``.

    Raises:
        ValueError: an unknown name (:func:`parse_init`), or a schedule file that is not a valid schedule
            (:meth:`~hba_augment.schedule.Schedule.load` names the field).
    """
    from hba_augment.functional import DEFAULT_COUNT_PROBS, NUM_COPIES, OPS

    kind, fraction = parse_init(init)
    if kind == "schedule":
        from hba_augment.schedule import Schedule

        schedule = Schedule.load(Path(init).expanduser())
        return Prior(schedule.prob[-1].astype(np.float64), schedule.mag[-1].astype(np.float64),
                     tuple(schedule.count_probs))
    has_mag = np.array([spec.has_magnitude for spec in OPS])
    low = np.array([spec.low if spec.has_magnitude else np.nan for spec in OPS])
    high = np.array([spec.high if spec.has_magnitude else np.nan for spec in OPS])

    def at(frac: np.ndarray) -> np.ndarray:
        """Magnitudes at fractions ``frac`` ((2, 15) or broadcastable) of each op's range."""
        return np.where(has_mag, low + (high - low) * frac, np.nan)

    shape = (NUM_COPIES, len(OPS))
    if kind == "trivialaugment":
        prob = np.full(shape, _TA_PROB)
        prob[:, [i for i, spec in enumerate(OPS) if spec.name in _TA_ABSENT]] = _TA_ABSENT_PROB
        frac = np.array([[0.5 - _TA_SPREAD], [0.5 + _TA_SPREAD]])
        return Prior(prob, at(np.broadcast_to(frac, shape)), _TA_COUNT_PROBS)
    fraction = (0.0 if kind == "zero" else PAPER_FRACTION) if fraction is None else fraction
    prob = np.full(shape, fraction)
    mag = np.broadcast_to(at(np.full(len(OPS), fraction)), shape).copy()
    if kind == "identity":
        for k, spec in enumerate(OPS):
            if spec.identity is not None and spec.low < spec.identity < spec.high:
                mag[:, k] = spec.identity
    return Prior(prob, mag, DEFAULT_COUNT_PROBS)


def start_schedule(init: str, count_probs: tuple[float, ...] | None = None) -> Schedule:
    """The control of a search that started at ``init``: its prior held for every epoch, as a one-entry
    :class:`~hba_augment.schedule.Schedule` named ``start-<init>`` (stretched to any length by ``HBAPolicy``).

    Args:
        init: a starting-policy name.
        count_probs: the search's ``count_probs`` if it overrode the prior's (``None``: the prior's).
    """
    from hba_augment.schedule import Schedule

    prior = prior_policy(init)
    counts = prior.count_probs if count_probs is None else tuple(count_probs)
    label = Path(init).stem if parse_init(init)[0] == "schedule" else init.replace(":", "-")
    source = init_provenance(init)
    del source["init"]  # named by the control's own words; what is left is a file's hash
    return Schedule.constant(prior.prob, prior.mag, name=f"start-{label}", count_probs=counts,
                             provenance={"control": f"the search's starting policy {init!r} held for every epoch "
                                         "(hba_augment.search.priors)", **source})


def schedule_file(path: str, what: str) -> Path:
    """``path`` as a schedule file that exists (read later, by :meth:`~hba_augment.schedule.Schedule.load`).

    Args:
        path: a path ending in ``.json``.
        what: the setting's name, for the message.

    Raises:
        ValueError: not a string ending in ``.json``, or no such file (both named).
    """
    if not isinstance(path, str) or not path.lower().endswith(_SCHEDULE_SUFFIX):
        raise ValueError(f"{what} must be a schedule file ending in '.json', got {path!r}")
    file = Path(path).expanduser()
    if not file.is_file():
        raise ValueError(f"{what} names a schedule file that does not exist: {path!r}")
    return file


def amount_profile(path: str, epochs: int) -> tuple[np.ndarray, np.ndarray]:
    """The per-epoch policies of the schedule file ``path`` stretched to a search of ``epochs`` epochs (as
    :class:`~hba_augment.policy.HBAPolicy` stretches a schedule: :meth:`~hba_augment.schedule.Schedule.index`):
    what ``--amount profile`` reads each round's amount from (:func:`~hba_augment.search.pbt.amount_targets`).

    Returns:
        ``(prob, mag)``: float64 arrays of shape ``(epochs, 2, 15)``.

    Raises:
        ValueError: not a ``.json`` file that exists, or not a valid schedule (named).
    """
    from hba_augment.schedule import Schedule

    schedule = Schedule.load(schedule_file(path, "amount_profile"))
    rows = [schedule.index(e, epochs) for e in range(epochs)]
    return schedule.prob[rows].astype(np.float64), schedule.mag[rows].astype(np.float64)


def profile_provenance(path: str) -> dict[str, Any]:
    """What a searched schedule's provenance records of its amount profile: the path and the SHA-256 of the
    file's bytes (``amount_profile``, ``amount_profile_sha256``).

    Raises:
        ValueError: not a ``.json`` file that exists.
    """
    file = schedule_file(path, "amount_profile")
    return {"amount_profile": path, "amount_profile_sha256": _sha256(file)}


def init_provenance(init: str) -> dict[str, Any]:
    """What a searched schedule's provenance records of its start: ``{"init": init}``, and for a schedule file
    also ``"init_sha256"``, the hash of the file's bytes, since a path alone does not say what it held.

    Raises:
        ValueError: a bad name (:func:`parse_init`).
    """
    kind, _ = parse_init(init)
    if kind != "schedule":
        return {"init": init}
    return {"init": init, "init_sha256": _sha256(Path(init).expanduser())}


def _sha256(file: Path) -> str:
    return hashlib.sha256(file.read_bytes()).hexdigest()
