"""What the hyper-layers are conditioned on: ``lambda_i`` (the paper) or what image ``i`` received.

The paper conditions the network on each training image's perturbed hyperparameters
``lambda_i = lambda + sigma * eps_i``, and its hyperparameter step evaluates the network at ``lambda``. The
image itself only sees ``lambda_i`` through random draws: a slot at probability 0.05 fires on about one image
in fourteen, and the correlation between ``eps_i``'s entry for that slot and whether the slot fired is about
0.24 (0.15 at probability 0.015; `benchmarks/RESULTS.md`, "Does lambda follow a signal?"). The hyper-layers
learn each op's effect from that weak correlation, and the measured hypergradient does not push an op's two
copies alike, as it would if it measured the op.

With ``hyper_input="applied"`` the hyper-layers see instead what each image received (:func:`applied_input`):
for every slot 1 if the image applied it, else 0, and for every magnitude slot the image's magnitude (as the
fraction of its range that ``lambda_i`` gives) where it applied that slot, else 0. The hyperparameter step
evaluates the network at the expected value of that input under ``lambda`` (:func:`expected_applied_input`),
which is a differentiable function of ``lambda``. The hyper-layers are linear in their input, so the
network's weights at the expected input are the expected weights over the images' inputs: the same
best-response model as the paper's, regressed on the variable that carries the effect instead of on a
noisy proxy of it.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch
from torch import Tensor

from hba_augment.functional import MAGNITUDE_OPS, NUM_COPIES, NUM_OPS, check_count_probs

from .config import HYPER_INPUTS  # re-exported: the choice's one home, importable without torch
from .hparams import NUM_HPARAMS, NUM_PROB_HPARAMS

__all__ = ["HYPER_INPUTS", "applied_input", "applied_probability", "expected_applied_input"]


# One probability of lambda per slot (copy-major), so the slots are numbered as lambda's probabilities.
_SLOTS = NUM_PROB_HPARAMS


@functools.lru_cache(maxsize=8)
def _magnitude_slots(device: torch.device) -> Tensor:
    """Slot index (copy-major, as ``lambda``'s probabilities) of each of ``lambda``'s 24 magnitudes; cached
    per device, since both search steps index with it every iteration."""
    ops = torch.tensor(MAGNITUDE_OPS, device=device)
    return torch.cat([ops + copy * NUM_OPS for copy in range(NUM_COPIES)])


def applied_input(applied: Tensor, hparams: Tensor) -> Tensor:
    """The hyper-layers' input for images that applied ``applied``, drawn with ``hparams``.

    Args:
        applied: ``(B, 2, 15)`` bool, from ``functional.augment(..., return_applied=True)``.
        hparams: ``(B, 54)`` the images' ``lambda_i`` (logits), whose magnitudes the images received.

    Returns:
        ``(B, 54)`` in ``hparams``' dtype: ``lambda``'s layout, the 30 probabilities replaced by the applied
        indicators and the 24 magnitudes by ``sigmoid(lambda_i)`` (the fraction of the op's range) where the
        slot was applied, else 0.
    """
    if applied.dtype != torch.bool or applied.shape[1:] != (NUM_COPIES, NUM_OPS):
        raise ValueError(f"applied must be a (B, {NUM_COPIES}, {NUM_OPS}) bool tensor, got "
                         f"{applied.dtype} {tuple(applied.shape)}")
    if hparams.shape != (applied.shape[0], NUM_HPARAMS):
        raise ValueError(f"hparams must have shape ({applied.shape[0]}, {NUM_HPARAMS}), got {tuple(hparams.shape)}")
    fired = applied.flatten(1).to(hparams.dtype)
    fraction = torch.sigmoid(hparams[:, NUM_PROB_HPARAMS:])
    return torch.cat([fired, fired[:, _magnitude_slots(hparams.device)] * fraction], dim=1)


def applied_probability(prob: Tensor, count_probs: Sequence[float]) -> Tensor:
    """The probability that an image applies each slot under PBA's template (the contract, section 2), exactly.

    Slot ``s`` fires with probability ``p_s``; the fired slots are visited in a uniformly random order and
    the first ``K`` applied, ``K ~ count_probs``. Given that ``s`` fired and ``m`` others did, ``s`` is
    applied with probability ``min(K, m + 1) / (m + 1)``; ``m`` follows the Poisson-binomial law of the
    other 29 slots, computed by dynamic programming for every slot at once (differentiable in ``prob``).

    Args:
        prob: ``(2, 15)`` or ``(30,)`` slot probabilities in ``[0, 1]``.
        count_probs: the distribution of ``K`` (``functional.check_count_probs``).

    Returns:
        ``prob``'s shape and dtype.
    """
    count_probs = check_count_probs(count_probs)
    p = prob.reshape(-1)
    if p.numel() != _SLOTS:
        raise ValueError(f"prob must hold {_SLOTS} slot probabilities, got shape {tuple(prob.shape)}")
    others = 1.0 - torch.eye(_SLOTS, dtype=p.dtype, device=p.device)  # row s: every slot but s
    law = torch.zeros(_SLOTS, _SLOTS, dtype=p.dtype, device=p.device)  # row s: law of m
    law[:, 0] = 1.0
    for j in range(_SLOTS):
        q = (p[j] * others[:, j]).unsqueeze(1)
        law = law * (1.0 - q) + torch.nn.functional.pad(law[:, :-1], (1, 0)) * q
    m = torch.arange(_SLOTS, dtype=p.dtype, device=p.device)
    share = sum(weight * torch.clamp(m + 1, max=k) / (m + 1) for k, weight in enumerate(count_probs))
    return (p * (law @ share)).reshape(prob.shape)


def expected_applied_input(hparams: Tensor, count_probs: Sequence[float]) -> Tensor:
    """The expected :func:`applied_input` of images drawn with ``hparams`` unperturbed.

    Args:
        hparams: ``(54,)`` ``lambda`` (logits).
        count_probs: the distribution of the number of ops per image.

    Returns:
        ``(54,)``: each slot's :func:`applied_probability`, and each magnitude slot's applied probability
        times ``sigmoid(lambda)``. (With perturbed magnitudes the training images' mean differs from this by
        the curvature of the sigmoid, a second-order term.)
    """
    if hparams.shape != (NUM_HPARAMS,):
        raise ValueError(f"hparams must have shape ({NUM_HPARAMS},), got {tuple(hparams.shape)}")
    applied = applied_probability(torch.sigmoid(hparams[:NUM_PROB_HPARAMS]), count_probs)
    fraction = torch.sigmoid(hparams[NUM_PROB_HPARAMS:])
    return torch.cat([applied, applied[_magnitude_slots(hparams.device)] * fraction])
