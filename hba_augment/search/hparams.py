"""The search's view of a policy: 54 unbounded hyperparameters (the contract, section 3).

Layout of ``lambda`` (logit space, one real per entry):

* ``[0, 30)``: probabilities, copy 0 ops ``0..14`` then copy 1 ops ``0..14``;
* ``[30, 54)``: magnitudes, copy 0 for the 12 ops of :data:`~hba_augment.functional.MAGNITUDE_OPS`
  in canonical order, then copy 1.

A value is ``lo + (hi - lo) * sigmoid(lambda)`` (probabilities: ``lo = 0``, ``hi = 1``). Everything is read
from :data:`~hba_augment.functional.OPS`; no op is listed here.
"""

from __future__ import annotations

import functools
import math

import torch
from torch import Tensor

from hba_augment.functional import MAGNITUDE_OPS, NUM_COPIES, NUM_OPS, OPS
from hba_augment.search.priors import prior_policy

__all__ = [
    "HPARAM_NAMES",
    "NUM_COPIES",
    "NUM_HPARAMS",
    "NUM_PROB_HPARAMS",
    "hparams_to_policy",
    "init_hparams",
    "policy_to_hparams",
]

NUM_PROB_HPARAMS = NUM_COPIES * NUM_OPS
#: ``30 + 2 * 12 = 54``.
NUM_HPARAMS = NUM_PROB_HPARAMS + NUM_COPIES * len(MAGNITUDE_OPS)

#: Human-readable name of each entry of ``lambda``, e.g. ``"prob[0].ShearX"``, ``"mag[1].Rotate"``.
HPARAM_NAMES: tuple[str, ...] = tuple(
    [f"prob[{c}].{spec.name}" for c in range(NUM_COPIES) for spec in OPS]
    + [f"mag[{c}].{OPS[k].name}" for c in range(NUM_COPIES) for k in MAGNITUDE_OPS]
)

# Clipping for the inverse map, so that a probability of exactly 0 or 1 gives a finite logit.
_INVERSE_EPS = 1e-6


@functools.lru_cache(maxsize=16)
def _bounds(dtype: torch.dtype, device: torch.device) -> tuple[Tensor, Tensor]:
    """Per-magnitude-op ``(lo, hi)`` as tensors of ``dtype``, rounded inwards.

    ``float32(0.3)`` is larger than the real 0.3, so a magnitude that saturates at ``hi`` would land just
    outside the range that the kernels and :class:`~hba_augment.schedule.Schedule` validate against.
    Rounding the bounds towards the inside of the range keeps every mapped value inside it.
    """
    lo = torch.tensor([OPS[k].low for k in MAGNITUDE_OPS], dtype=torch.float64)
    hi = torch.tensor([OPS[k].high for k in MAGNITUDE_OPS], dtype=torch.float64)
    lo_c, hi_c = lo.to(dtype), hi.to(dtype)
    lo_c = torch.where(lo_c.double() < lo, torch.nextafter(lo_c, torch.full_like(lo_c, math.inf)), lo_c)
    hi_c = torch.where(hi_c.double() > hi, torch.nextafter(hi_c, torch.full_like(hi_c, -math.inf)), hi_c)
    return lo_c.to(device), hi_c.to(device)


@functools.lru_cache(maxsize=8)
def _magnitude_index(device: torch.device) -> Tensor:
    return torch.tensor(MAGNITUDE_OPS, device=device)


def init_hparams(
    init: str = "paper", *, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
) -> Tensor:
    """The initial ``lambda``: the starting policy ``init`` in logit space.

    Args:
        init: a name of :mod:`~hba_augment.search.priors`: ``"paper"`` (every entry ``logit(0.05)``, i.e.
            ``0.95 lo + 0.05 hi``, the contract, section 3), ``"identity"``, ``"zero"``, ``"uniform:F"``, ``"trivialaugment"``
            or a schedule file.
        dtype, device: of the result.

    Returns:
        Tensor of shape ``(NUM_HPARAMS,)``.

    Raises:
        ValueError: an unknown ``init``.
    """
    prior = prior_policy(init)
    prob = torch.as_tensor(prior.prob, dtype=torch.float64)
    lo, hi = _bounds(torch.float64, torch.device("cpu"))
    frac = (torch.as_tensor(prior.mag, dtype=torch.float64)[:, list(MAGNITUDE_OPS)] - lo) / (hi - lo)
    # The logits of the fractions themselves (not of values mapped back and forth), so that "paper" is
    # exactly logit(0.05) everywhere, as it always was; a schedule file's 0s and 1s start a hair inside.
    lam = torch.cat([torch.logit(prob, eps=_INVERSE_EPS).reshape(-1), torch.logit(frac, eps=_INVERSE_EPS).reshape(-1)])
    return lam.to(dtype=dtype, device=device)


def hparams_to_policy(hparams: Tensor) -> tuple[Tensor, Tensor]:
    """Map ``lambda`` (logit space) to a policy, differentiably.

    Args:
        hparams: float tensor of shape ``(..., NUM_HPARAMS)``.

    Returns:
        ``(prob, mag)``, each of shape ``(..., 2, 15)`` and the dtype/device of ``hparams``. ``mag`` holds
        unsigned magnitudes inside each op's range, NaN for the ops without a magnitude.

    Raises:
        ValueError: if the last dimension is not ``NUM_HPARAMS`` or the dtype is not floating point.
    """
    if not isinstance(hparams, Tensor) or not hparams.is_floating_point():
        raise ValueError(f"hparams must be a floating-point tensor, got {type(hparams).__name__}"
                         f"{'' if not isinstance(hparams, Tensor) else ' of dtype ' + str(hparams.dtype)}")
    if hparams.dim() == 0 or hparams.shape[-1] != NUM_HPARAMS:
        raise ValueError(f"hparams must have shape (..., {NUM_HPARAMS}), got {tuple(hparams.shape)}")
    lead = hparams.shape[:-1]
    prob = torch.sigmoid(hparams[..., :NUM_PROB_HPARAMS]).reshape(*lead, NUM_COPIES, NUM_OPS)
    lo, hi = _bounds(hparams.dtype, hparams.device)
    raw = hparams[..., NUM_PROB_HPARAMS:].reshape(*lead, NUM_COPIES, len(MAGNITUDE_OPS))
    values = torch.minimum(torch.maximum(lo + (hi - lo) * torch.sigmoid(raw), lo), hi)
    mag = hparams.new_full((*lead, NUM_COPIES, NUM_OPS), math.nan)
    mag = mag.index_copy(-1, _magnitude_index(hparams.device), values)
    return prob, mag


def policy_to_hparams(prob: Tensor, mag: Tensor) -> Tensor:
    """Inverse of :func:`hparams_to_policy` (values are clipped so that the logits stay finite).

    Args:
        prob: tensor of shape ``(..., 2, 15)`` with values in ``[0, 1]``.
        mag: tensor of shape ``(..., 2, 15)``; entries of ops without a magnitude are ignored.

    Returns:
        Tensor of shape ``(..., NUM_HPARAMS)`` in ``prob``'s floating dtype (float32 for integer input).

    Raises:
        ValueError: on a shape mismatch.
    """
    prob = torch.as_tensor(prob)
    mag = torch.as_tensor(mag, device=prob.device)
    if prob.dim() < 2 or prob.shape[-2:] != (NUM_COPIES, NUM_OPS):
        raise ValueError(f"prob must have shape (..., {NUM_COPIES}, {NUM_OPS}), got {tuple(prob.shape)}")
    if mag.shape != prob.shape:
        raise ValueError(f"mag must have the shape of prob {tuple(prob.shape)}, got {tuple(mag.shape)}")
    dtype = prob.dtype if prob.is_floating_point() else torch.float32
    prob, mag = prob.to(dtype), mag.to(dtype)
    lead = prob.shape[:-2]
    lo = torch.tensor([OPS[k].low for k in MAGNITUDE_OPS], dtype=dtype, device=prob.device)
    hi = torch.tensor([OPS[k].high for k in MAGNITUDE_OPS], dtype=dtype, device=prob.device)
    frac = (mag[..., list(MAGNITUDE_OPS)] - lo) / (hi - lo)
    p = torch.logit(prob.clamp(_INVERSE_EPS, 1 - _INVERSE_EPS)).reshape(*lead, NUM_PROB_HPARAMS)
    m = torch.logit(frac.clamp(_INVERSE_EPS, 1 - _INVERSE_EPS)).reshape(*lead, NUM_COPIES * len(MAGNITUDE_OPS))
    return torch.cat([p, m], dim=-1)
