"""``augment``: PBA's augmentation template (SPEC section 2), vectorised over the batch."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import torch
from torch import Tensor
from torchvision.transforms import InterpolationMode

from ._kernels import KernelContext, affine
from ._table import NUM_OPS, OPS
from ._validation import Fill, check_images, fill_levels, from_levels, interpolation_mode, to_levels

__all__ = ["DEFAULT_COUNT_PROBS", "NUM_COPIES", "augment", "check_count_probs"]

#: Distribution of K, the largest number of ops applied to one image (PBA's default).
DEFAULT_COUNT_PROBS: tuple[float, ...] = (0.2, 0.3, 0.5)
#: Each op appears in the policy twice (PBA's "two copies"), making 30 slots.
NUM_COPIES = 2

# Op application order inside one step: all geometric ops first (they share one warp), then the rest in
# table order, then "no op". _SORT_KEY[op + 1] is the position of op (-1 meaning none) in that order.
_GEOMETRIC = tuple(i for i, spec in enumerate(OPS) if spec.geometric)
_OTHERS = tuple(i for i, spec in enumerate(OPS) if not spec.geometric)
_ORDER = (*_GEOMETRIC, *_OTHERS)
_SORT_KEY = [len(_ORDER)] + [_ORDER.index(i) for i in range(NUM_OPS)]


@functools.lru_cache(maxsize=8)
def _constants(device: torch.device) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    signed = torch.tensor([spec.signed for spec in OPS], device=device)
    sort_key = torch.tensor(_SORT_KEY, device=device)
    low = torch.tensor([spec.low if spec.has_magnitude else -math.inf for spec in OPS], device=device)
    high = torch.tensor([spec.high if spec.has_magnitude else math.inf for spec in OPS], device=device)
    return signed, sort_key, low, high


def check_count_probs(count_probs: Sequence[float]) -> tuple[float, ...]:
    """Validate the distribution of K (index k = probability of at most k ops). Returns it as floats."""
    try:
        values = tuple(float(p) for p in count_probs)
    except (TypeError, ValueError):
        raise ValueError(f"count_probs must be a sequence of probabilities, got {count_probs!r}") from None
    if not values or any(not (0.0 <= p <= 1.0) for p in values) or abs(sum(values) - 1.0) > 1e-6:
        raise ValueError(f"count_probs must be probabilities summing to 1, got {count_probs!r}")
    return values


def _policy_tensor(value: Tensor, name: str, batch: int, device: torch.device) -> Tensor:
    tensor = torch.as_tensor(value, dtype=torch.float32, device=device)
    shape = (NUM_COPIES, NUM_OPS)
    if tensor.shape == shape:
        return tensor.reshape(1, -1).expand(batch, -1)
    if tensor.shape == (batch, *shape):
        return tensor.reshape(batch, -1)
    raise ValueError(
        f"{name} must have shape {shape} or ({batch}, {shape[0]}, {shape[1]}), got {tuple(tensor.shape)}"
    )


def _check_policy(prob: Tensor, mag: Tensor, device: torch.device) -> None:
    # One host synchronisation for all checks; the message is built only on failure.
    _, _, low, high = _constants(device)
    low, high = low.repeat(NUM_COPIES), high.repeat(NUM_COPIES)
    bad_prob = ~((prob >= 0) & (prob <= 1))
    has_mag = torch.isfinite(high)
    bad_mag = has_mag & ~((mag >= low) & (mag <= high))
    if not bool((bad_prob.any() | bad_mag.any()).item()):
        return
    if bool(bad_prob.any()):
        image, slot = (int(i) for i in bad_prob.nonzero()[0])
        raise ValueError(
            f"prob of {OPS[slot % NUM_OPS].name} (copy {slot // NUM_OPS}) must lie in [0, 1], got {prob[image, slot].item()!r}"
        )
    image, slot = (int(i) for i in bad_mag.nonzero()[0])
    spec = OPS[slot % NUM_OPS]
    raise ValueError(
        f"mag of {spec.name} (copy {slot // NUM_OPS}) must lie in [{spec.low:g}, {spec.high:g}], "
        f"got {mag[image, slot].item()!r}"
    )


def augment(
    images: Tensor,
    prob: Tensor,
    mag: Tensor,
    count_probs: Sequence[float] = DEFAULT_COUNT_PROBS,
    *,
    fill: Fill = None,
    interpolation: InterpolationMode = InterpolationMode.NEAREST,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Augment every image independently with PBA's template (SPEC section 2).

    For each image: draw ``K ~ Categorical(count_probs)``, visit the 30 slots (15 ops x 2 copies) in a
    random order, and apply each visited slot's op with its probability, with its magnitude (negated with
    probability 0.5 for the signed ops), until ``K`` ops have been applied. Every image draws its own K,
    order, coins, signs and op parameters. All draws come from ``generator`` (or torch's default
    generator of the images' device), and each op runs once, batched, on the images that drew it.

    Args:
        images: ``(B, C, H, W)`` or ``(C, H, W)``, uint8 in ``[0, 255]`` or float in ``[0, 1]``, any device.
        prob: slot probabilities in ``[0, 1]``, ``(2, 15)`` shared by the batch or ``(B, 2, 15)`` per image.
        mag: unsigned magnitudes in each op's range, same shape as ``prob``; entries of the ops without a
            magnitude (AutoContrast, Invert, Equalize) are ignored (NaN by convention).
        count_probs: ``count_probs[k]`` is the probability that at most ``k`` ops are applied.
        fill: value of uncovered pixels and of the Cutout patch, on the images' scale.
        interpolation: ``InterpolationMode.NEAREST`` (default) or ``BILINEAR`` for the geometric ops.
        generator: random stream on the images' device.

    Returns:
        A new tensor with the dtype, shape and device of ``images``.

    Raises:
        ValueError: bad shapes, probabilities outside [0, 1], magnitudes outside their op's range, bad
            ``count_probs``, ``fill`` or ``interpolation``.
    """
    batch, unbatched = check_images(images)
    b, c, _h, _w = batch.shape
    device = batch.device
    probs = check_count_probs(count_probs)
    prob = _policy_tensor(prob, "prob", b, device)
    mag = _policy_tensor(mag, "mag", b, device)
    _check_policy(prob, mag, device)
    uint8 = images.dtype == torch.uint8
    levels = to_levels(batch)
    ctx = KernelContext(
        quantize=uint8,
        fill=fill_levels(fill, c, uint8, device, levels.dtype),
        mode=interpolation_mode(interpolation),
        generator=generator,
    )
    if b == 0:
        out = from_levels(levels, images.dtype)
        return out.squeeze(0) if unbatched else out

    steps = len(probs) - 1
    slots = NUM_COPIES * NUM_OPS
    u = torch.rand(b, 1 + 2 * slots + steps, generator=generator, device=device)
    # K by inverse CDF: the number of cumulative probabilities (but the last) that u reaches.
    edges = torch.tensor(probs, device=device).cumsum(0)[:-1]
    count = (u[:, :1] >= edges).sum(dim=1)
    order = u[:, 1 : 1 + slots].argsort(dim=1)
    coins = u[:, 1 + slots : 1 + 2 * slots] < prob
    fired = coins.gather(1, order)  # in visiting order
    rank = fired.cumsum(dim=1)

    signed, sort_key, _, _ = _constants(device)
    for step in range(steps):
        hit = fired & (rank == step + 1) & (count > step)[:, None]
        position = hit.to(torch.uint8).argmax(dim=1)
        slot = order.gather(1, position[:, None]).squeeze(1)
        op = torch.where(hit.any(dim=1), slot % NUM_OPS, -1)
        magnitude = mag.gather(1, slot[:, None]).squeeze(1)
        negate = signed[op.clamp(min=0)] & (u[:, 1 + 2 * slots + step] < 0.5)
        magnitude = torch.where(negate, -magnitude, magnitude)
        levels = _apply_step(levels, op, magnitude, sort_key, ctx)

    out = from_levels(levels, images.dtype)
    return out.squeeze(0) if unbatched else out


def _apply_step(
    levels: Tensor, op: Tensor, magnitude: Tensor, sort_key: Tensor, ctx: KernelContext
) -> Tensor:
    """Apply ``op[i]`` (``-1``: none) with ``magnitude[i]`` to image ``i``; each op runs once on its images."""
    key = sort_key[op + 1]
    perm = key.argsort(stable=True)
    # The one host synchronisation of a step: how many images drew each op.
    counts = torch.bincount(key, minlength=len(_ORDER) + 1).tolist()
    h, w = levels.shape[-2:]
    # Each image gets at most one op per step, so the rows can be overwritten in place.
    start, matrices = 0, []
    for position, op_index in enumerate(_ORDER):
        n = counts[position]
        if n:
            index = perm[start : start + n]
            spec = OPS[op_index]
            if spec.geometric:
                matrices.append(spec.matrix(magnitude[index], h, w))
            else:
                levels.index_copy_(
                    0, index, spec.kernel(levels.index_select(0, index), magnitude[index], ctx)
                )
        start += n
        if position == len(_GEOMETRIC) - 1 and matrices:
            # All geometric ops of this step in one warp (they come first in perm), each image its own matrix.
            index = perm[:start]
            levels.index_copy_(0, index, affine(levels.index_select(0, index), torch.cat(matrices), ctx))
    return levels
