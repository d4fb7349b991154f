"""``augment``: PBA's augmentation template (SPEC section 2), vectorised over the batch."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

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
    """Per-device tables: signed flag per op, sort key per op (+1), magnitude bounds per slot."""
    signed = torch.tensor([spec.signed for spec in OPS], device=device)
    sort_key = torch.tensor(_SORT_KEY, device=device)
    low = [spec.low if spec.has_magnitude else -math.inf for spec in OPS] * NUM_COPIES
    high = [spec.high if spec.has_magnitude else math.inf for spec in OPS] * NUM_COPIES
    return signed, sort_key, torch.tensor(low, device=device), torch.tensor(high, device=device)


@functools.lru_cache(maxsize=8)
def _count_edges(count_probs: tuple[float, ...], device: torch.device) -> Tensor:
    """Cumulative probabilities but the last: K is the number of them that a uniform draw reaches."""
    return torch.tensor(count_probs, dtype=torch.float64).cumsum(0)[:-1].float().to(device)


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
    """``(2, 15)`` or ``(B, 2, 15)`` -> ``(1, 30)`` or ``(B, 30)`` float32 on ``device``."""
    tensor = torch.as_tensor(value, dtype=torch.float32, device=device)
    shape = (NUM_COPIES, NUM_OPS)
    if tensor.shape == shape:
        return tensor.reshape(1, -1)
    if tensor.shape == (batch, *shape):
        return tensor.reshape(batch, -1)
    raise ValueError(
        f"{name} must have shape {shape} or ({batch}, {shape[0]}, {shape[1]}), got {tuple(tensor.shape)}"
    )


def _check_policy(prob: Tensor, mag: Tensor, device: torch.device) -> None:
    """Raise ``ValueError`` for a probability outside [0, 1] or a magnitude outside its op's range.

    One host synchronisation for all checks (NaN fails every comparison, so it is caught too); the
    message is only built on failure.
    """
    _, _, low, high = _constants(device)
    bad_prob = ~((prob >= 0) & (prob <= 1))
    bad_mag = ~((mag >= low) & (mag <= high)) & torch.isfinite(high)
    if not bool(torch.cat([bad_prob.flatten(), bad_mag.flatten()]).any()):
        return
    name, bad, values = ("prob", bad_prob, prob) if bool(bad_prob.any()) else ("mag", bad_mag, mag)
    image, slot = (int(i) for i in bad.nonzero()[0])
    spec = OPS[slot % NUM_OPS]
    allowed = "[0, 1]" if name == "prob" else f"[{spec.low:g}, {spec.high:g}]"
    raise ValueError(
        f"{name} of {spec.name} (copy {slot // NUM_OPS}) must lie in {allowed}, got {values[image, slot].item()!r}"
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
    b, c, _, _ = batch.shape
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
    steps = len(probs) - 1
    if b > 0 and steps > 0:
        levels = _augment_levels(levels, prob, mag, _count_edges(probs, device), steps, ctx)
    out = from_levels(levels, images.dtype)
    return out.squeeze(0) if unbatched else out


def _augment_levels(
    levels: Tensor, prob: Tensor, mag: Tensor, edges: Tensor, steps: int, ctx: KernelContext
) -> Tensor:
    """The template on ``(B, C, H, W)`` levels; ``prob``/``mag`` are ``(1, 30)`` or ``(B, 30)``."""
    b = levels.shape[0]
    slots = NUM_COPIES * NUM_OPS
    # Every draw of the batch in one call: K, the visiting order, the 30 coins, one sign per step.
    u = torch.rand(b, 1 + 2 * slots + steps, generator=ctx.generator, device=levels.device)
    count = (u[:, :1] >= edges).sum(dim=1)
    order = u[:, 1 : 1 + slots].argsort(dim=1)
    fired = (u[:, 1 + slots : 1 + 2 * slots] < prob).gather(1, order)  # coins, in visiting order
    rank = fired.cumsum(dim=1)

    # The op (-1: none) and signed magnitude each image applies at each step, all steps at once.
    signed, sort_key, _, _ = _constants(levels.device)
    step = torch.arange(1, steps + 1, device=levels.device).view(1, steps, 1)
    hit = fired[:, None, :] & (rank[:, None, :] == step) & (count.view(b, 1, 1) >= step)  # (B, steps, 30)
    slot = order.gather(1, hit.to(torch.uint8).argmax(dim=2))  # (B, steps)
    op = torch.where(hit.any(dim=2), slot % NUM_OPS, -1)
    magnitude = mag.expand(b, -1).gather(1, slot)
    negate = signed[op.clamp(min=0)] & (u[:, 1 + 2 * slots :] < 0.5)
    magnitude = torch.where(negate, -magnitude, magnitude)

    # Group the images of each step by op; the one host synchronisation: how many images drew each op.
    key = sort_key[op + 1]  # (B, steps)
    groups = len(_ORDER) + 1
    offset = torch.arange(steps, device=levels.device) * groups
    counts = torch.bincount((key + offset).flatten(), minlength=steps * groups).view(steps, groups).tolist()
    perm = key.argsort(dim=0, stable=True)
    for s in range(steps):
        levels = _apply_step(levels, perm[:, s], counts[s], magnitude[:, s], ctx)
    return levels


def _apply_step(
    levels: Tensor, perm: Tensor, counts: list[int], magnitude: Tensor, ctx: KernelContext
) -> Tensor:
    """Apply to each image the op it drew for this step, each op once on its images.

    ``perm`` lists the images grouped in ``_ORDER`` (geometric ops first, "none" last) and ``counts`` the
    group sizes. Each image gets at most one op a step, so rows are overwritten in place.
    """
    h, w = levels.shape[-2:]
    start, matrices = 0, []
    for position, op_index in enumerate(_ORDER):
        n = counts[position]
        if n:
            index = perm[start : start + n]
            spec = OPS[op_index]
            if spec.geometric:
                matrices.append(spec.matrix(magnitude[index], h, w))
            else:
                levels = _apply_rows(levels, index, spec.kernel, magnitude[index], ctx)
        start += n
        if position == len(_GEOMETRIC) - 1 and matrices:
            # All geometric ops of this step in one warp (they come first in perm), each image its own matrix.
            levels = _apply_rows(levels, perm[:start], affine, torch.cat(matrices), ctx)
    return levels


def _apply_rows(
    levels: Tensor, index: Tensor, kernel: Callable, parameter: Tensor, ctx: KernelContext
) -> Tensor:
    """``kernel(levels[index], parameter, ctx)`` written back into the rows ``index`` of ``levels``."""
    if index.numel() == levels.shape[0]:
        # Every image drew this op (always so for a single image): no gather or scatter, only the order.
        return kernel(levels, parameter[index.argsort()], ctx)
    return levels.index_copy_(0, index, kernel(levels.index_select(0, index), parameter, ctx))
