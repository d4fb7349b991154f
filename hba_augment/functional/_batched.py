"""One step of the batched template with no host synchronisation and a launch count fixed in advance.

At each step every image applies at most one op (or none). Instead of grouping the images by op, which
needs the group sizes on the host (a device synchronisation, then a launch count that depends on the
draws), every stage below runs on the whole batch with per-image parameters and leaves the images that did
not draw it exactly unchanged:

* geometric ops: one warp per image, the identity for the others (an exact copy under NEAREST; under
  BILINEAR, whose identity resamples, a per-image select);
* on uint8 images, both from the step's input (an image draws one op): every op with a table
  (``OpSpec.table``) as one lookup through a per-image table, the identity table for the others; the two
  ops without one, Color and Sharpness, as one blend of the whole batch, each image with its own
  degenerate image and factor; each image keeps the result of the stage of its op. On float images, the
  four enhancers (Contrast, Color, Brightness, Sharpness) as one blend likewise, and each other
  non-geometric op on the whole batch, all from the step's input, selected per image;
* Cutout: a per-image patch, empty for the images that did not draw it.

Each image still gets each op's own arithmetic with its own parameters, so its pixels are those of
:func:`~hba_augment.functional._augment.augment_drawn` for the same draws; Cutout draws a centre for every
image (the draws keep their distribution, not their stream).

Every stage touches every pixel of the batch, so on a GPU a large batch costs what its passes move through
memory. The uint8 stages therefore compute in the narrowest types that are exact (int16 sums, uint8 grey
levels and degenerate images, float32 histograms) and share what several ops read (the int64 levels of the
lookup and of Equalize's histogram; the grey levels of Contrast and Color), and the float stage blends once
for the four enhancers: ``benchmarks/sync_free_bytes.py`` counts the bytes (``benchmarks/RESULTS.md``,
"Sync-free batches").
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from . import _kernels as K
from ._cache import constant_cache
from ._levels import from_levels, to_levels
from ._table import NUM_OPS, OPS

__all__ = ["NO_OP", "apply_step"]

#: The op code of an image that applies no op at a step.
NO_OP = NUM_OPS

_GEOMETRIC = tuple(k for k, spec in enumerate(OPS) if spec.geometric)
#: Ops whose uint8 images go through one per-image table lookup; the fixed ones have precomputed rows.
_TABLE_OPS = tuple(k for k, spec in enumerate(OPS) if spec.table is not None)
_COMPUTED_TABLE_OPS = tuple(k for k in _TABLE_OPS if not OPS[k].fixed_table)
_FIXED_TABLE_OPS = tuple(k for k in _TABLE_OPS if OPS[k].fixed_table)
_CUTOUT = next(k for k, spec in enumerate(OPS) if spec.name == "Cutout")
_COLOR = next(k for k, spec in enumerate(OPS) if spec.kernel is K.color)
_SHARPNESS = next(k for k, spec in enumerate(OPS) if spec.kernel is K.sharpness)
_AUTO_CONTRAST = next(k for k, spec in enumerate(OPS) if spec.table is K.auto_contrast_table)
_EQUALIZE = next(k for k, spec in enumerate(OPS) if spec.table is K.equalize_table)
_CONTRAST = next(k for k, spec in enumerate(OPS) if spec.table is K.contrast_table)
_BRIGHTNESS = next(k for k, spec in enumerate(OPS) if spec.kernel is K.brightness)
#: PIL's enhancers: blends of each image with a degenerate image, identity at factor 1.
_BLENDS = (_CONTRAST, _COLOR, _BRIGHTNESS, _SHARPNESS)
# The uint8 stage _enhancers is written for exactly these two ops without a table (besides Cutout, which has
# its own stage): a new one must get a stage of its own, not pass through unapplied (a raise, not an assert,
# so that python -O keeps the check).
if {k for k, spec in enumerate(OPS) if not spec.geometric and spec.table is None} != {_CUTOUT, _COLOR, _SHARPNESS}:
    raise RuntimeError("an op without a uint8 table other than Color, Sharpness and Cutout needs a stage in _batched")
# _tables computes the image-dependent tables from statistics the stage shares (the int64 levels, the grey
# levels): a new such op needs its statistic there.
if set(_COMPUTED_TABLE_OPS) != {_AUTO_CONTRAST, _EQUALIZE, _CONTRAST}:
    raise RuntimeError("an op with an image-dependent uint8 table needs its statistic in _batched._tables")
if any(OPS[k].identity != 1.0 for k in _BLENDS):
    raise RuntimeError("_blends_float gives the images that drew no blend the factor 1: the blends' identity")
#: The float stage's ops besides the blends, each computed on the whole batch and selected per image.
_POINTWISE_FLOAT = tuple(
    k for k, spec in enumerate(OPS) if not spec.geometric and k != _CUTOUT and k not in _BLENDS
)


@constant_cache(8)
def _geometric_ops(device: torch.device) -> Tensor:
    """Whether each op code (``0..NUM_OPS``, the last for no op) is geometric, ``(NUM_OPS + 1,)``."""
    return torch.tensor([spec.geometric for spec in OPS] + [False], device=device)


@constant_cache(8)
def _op_rows(device: torch.device) -> tuple[Tensor, Tensor]:
    """The op codes ``0..NUM_OPS`` as a column, and each op's identity magnitude (0 where it has none),
    ``(NUM_OPS + 1, 1)`` each."""
    identity = [spec.identity if spec.identity is not None else 0.0 for spec in OPS] + [0.0]
    return torch.arange(NUM_OPS + 1, device=device).view(-1, 1), torch.tensor(identity, device=device).view(-1, 1)


def _per_op(op: Tensor, magnitude: Tensor) -> tuple[Tensor, Tensor]:
    """Whether each image drew each op, ``(NUM_OPS + 1, B)`` bool, and the magnitude each op's kernel gets,
    ``(NUM_OPS + 1, B)``: the image's own where it drew the op, else the op's identity magnitude, so that
    every kernel computes finite values throughout (the table entries of the ops without a magnitude are
    NaN by convention) and no NaN reaches a gradient. Rows are contiguous ``(B,)`` views: three ops for all."""
    codes, identity = _op_rows(op.device)
    drew = codes == op
    return drew, torch.where(drew, magnitude, identity.to(magnitude.dtype))


def _select(drew: Tensor, new: Tensor, old: Tensor) -> Tensor:
    return torch.where(drew.view(-1, *([1] * (new.ndim - 1))), new, old)


def apply_step(
    levels: Tensor,
    op: Tensor,
    magnitude: Tensor,
    ctx: K.KernelContext,
    warp_index: Tensor | None = None,
    fixed_table: Tensor | None = None,
    centre: Tensor | None = None,
) -> Tensor:
    """Apply to each image the op it drew for this step, with its magnitude (see the module docstring).

    Args:
        levels: ``(B, C, H, W)`` uint8 levels (``ctx.quantize``) or float levels; not written to.
        op: ``(B,)`` int64, the op index of each image, :data:`NO_OP` for none.
        magnitude: ``(B,)`` signed magnitudes (NaN allowed where the image's op takes none).
        ctx: the kernels' context.
        warp_index: NEAREST only: ``(B, 1, H W)`` source indices (:func:`~._kernels.nearest_index`) of each
            image's warp, the identity's for images without a geometric op; ``None`` to compute them.
        fixed_table: uint8 only: ``(B, 1, 1, 256)`` the table of each image's fixed-table op
            (``OpSpec.fixed_table``), the identity for the others; ``None`` to compute them.
        centre: ``(B, 2)`` int64 Cutout centres (:func:`~._kernels.cutout_centres`), one per image whatever
            it drew; ``None`` to draw them from ``ctx.generator`` here. Given, the step draws nothing.

    Returns:
        New ``(B, C, H, W)`` levels of the same dtype.
    """
    drew, mags = _per_op(op, magnitude)
    levels = _geometric(levels, op, drew, mags, ctx, warp_index)
    if levels.dtype == torch.uint8:
        levels = _pointwise_uint8(levels, drew, mags, ctx, fixed_table)
    else:
        # Every image draws one op a step: each kernel reads the step's input, each image keeps its own op's.
        out = _blends_float(levels, drew, mags)
        for k in _POINTWISE_FLOAT:
            magnitude = mags[k] if OPS[k].has_magnitude else None
            out = _select(drew[k], OPS[k].kernel(levels, magnitude, ctx), out)
        levels = out
    return K.cutout(levels, mags[_CUTOUT], ctx, centre)  # identity magnitude 0: an empty patch


def _geometric(
    levels: Tensor, op: Tensor, drew: Tensor, mags: Tensor, ctx: K.KernelContext, warp_index: Tensor | None
) -> Tensor:
    """Every image's geometric op as one warp of the batch."""
    h, w = levels.shape[-2:]
    if ctx.mode == "nearest" and warp_index is not None:
        return K.warp_nearest(levels, warp_index, ctx)
    matrix = None
    for k in _GEOMETRIC:
        candidate = OPS[k].matrix(mags[k], h, w)
        matrix = candidate if matrix is None else _select(drew[k], candidate, matrix)
    if ctx.mode == "nearest":
        # The images without a geometric op keep the first op's matrix at its identity magnitude, the exact
        # identity: an exact copy (every source pixel is the pixel itself), so no select is needed.
        return K.affine(levels, matrix, ctx)  # (affine: also the magnitude's straight-through gradient)
    geometric = torch.take(_geometric_ops(op.device), op)
    floats = levels if levels.dtype.is_floating_point else to_levels(levels)
    warped = K.affine(floats, matrix, ctx)
    if levels.dtype == torch.uint8:
        warped = from_levels(warped, torch.uint8)
    return _select(geometric, warped, levels)


def _pointwise_uint8(
    levels: Tensor, drew: Tensor, mags: Tensor, ctx: K.KernelContext, fixed_table: Tensor | None
) -> Tensor:
    """Every non-geometric op but Cutout on the uint8 batch: the table ops as one lookup through a
    per-image table (:func:`_tables`), Color and Sharpness as one blend (:func:`_enhancers`), each image
    taking the result of the stage of the op it drew (the lookup, through the identity table, for the
    images that drew none). An image draws one op a step, so both stages read the step's input: the
    int64 levels are made once for the lookup and Equalize's histogram, the grey levels once for
    Contrast's mean and Color's degenerate image (see the module docstring for why)."""
    b, c, h, w = levels.shape
    index = levels.reshape(b, c, h * w).long()
    grey = K.grey_uint8(levels)
    looked = K.lookup(levels, _tables(levels, index, grey, drew, mags, ctx, fixed_table), index)
    blended = _enhancers(levels, grey, drew, mags)
    return _select(drew[_COLOR] | drew[_SHARPNESS], blended, looked)


def _enhancers(levels: Tensor, grey: Tensor, drew: Tensor, mags: Tensor) -> Tensor:
    """Color and Sharpness of the uint8 batch as one blend: both are PIL blends of the image with a
    degenerate image (its ``grey`` levels; its SMOOTH filter inside a kept 1-pixel border), so each image
    blends once with its own degenerate image and factor. Only the images that drew one of the two are
    read from the result. The degenerate images are whole levels in [0, 255], held in uint8 (a compiled
    call writes the degenerate image to memory in its dtype: twice the bytes in int16), the SMOOTH sums and
    the difference in int16; the blend itself is PIL's float arithmetic (:func:`~._kernels.blend`:
    ``d + f (x - d)``, clamped, then truncated, which the conversion to uint8 does for values in [0, 255])."""
    x = levels.to(torch.int16)
    degenerate = _select(drew[_COLOR], grey, levels)
    degenerate = _smoothed_inside(degenerate, K.smooth_int16(x), drew[_SHARPNESS])
    # mags holds each op's identity (1) where the image did not draw it, and an image draws one op.
    factor = (mags[_COLOR] * mags[_SHARPNESS]).view(-1, 1, 1, 1)
    # The int16 difference is written as float32 by the subtraction itself (out=): no int16 intermediate.
    blended = torch.sub(x, degenerate, out=torch.empty(x.shape, dtype=torch.float32, device=x.device))
    blended.mul_(factor).add_(degenerate).clamp_(0.0, 255.0)
    return from_levels(blended, torch.uint8)


def _smoothed_inside(degenerate: Tensor, smooth: Tensor | None, drew: Tensor) -> Tensor:
    """``degenerate`` ``(B, C, H, W)`` with SMOOTH's values ``smooth`` ``(B, C, H - 2, W - 2)`` (``None``
    under 3x3) inside the 1-pixel border of the images that ``drew`` ``(B,)`` Sharpness. A select over whole
    images rather than a write into the inner pixels: a compiled call writes what an in-place write into a
    slice makes as one more buffer, an image more per step (``benchmarks/sync_free_bytes.py``)."""
    if smooth is None:
        return degenerate
    inside = _inner_pixels(*degenerate.shape[-2:], degenerate.device) & drew.view(-1, 1, 1, 1)
    return torch.where(inside, F.pad(smooth.to(degenerate.dtype), (1, 1, 1, 1)), degenerate)


@constant_cache(8)
def _inner_pixels(h: int, w: int, device: torch.device) -> Tensor:
    """Where SMOOTH filters an ``h x w`` image, all but its 1-pixel border, ``(1, 1, H, W)`` bool."""
    inner = torch.zeros(1, 1, h, w, dtype=torch.bool, device=device)
    inner[..., 1:-1, 1:-1] = True
    return inner


def _blends_float(levels: Tensor, drew: Tensor, mags: Tensor) -> Tensor:
    """Contrast, Color, Brightness and Sharpness of the float batch as one blend of each image with its own
    degenerate image (its mean grey level; its grey levels; black; its SMOOTH inside the kept 1-pixel
    border) and factor: the same arithmetic, values and gradients as the four kernels (``d + f (x - d)``,
    clamped; Brightness's ``f x`` is that with ``d = 0``), for one blend's passes over the batch instead of
    four, and one grey image for Contrast and Color. The images that drew none keep their levels (a select:
    blending with themselves at factor 1 would also clamp them, and a BILINEAR warp's levels can lie an ulp
    outside [0, 255])."""
    grey = K.color_degenerate(levels, False)
    degenerate = _select(drew[_COLOR], grey, levels)
    degenerate = _select(drew[_CONTRAST], K.mean_of_grey(grey, False), degenerate)
    degenerate = _select(drew[_BRIGHTNESS], torch.zeros_like(levels[:1, :1, :1, :1]), degenerate)
    degenerate = _smoothed_inside(degenerate, K.sharpness_degenerate(levels, False), drew[_SHARPNESS])
    # mags holds each op's identity (1) where the image did not draw it, and an image draws one op.
    factor = mags[_CONTRAST] * mags[_COLOR] * mags[_BRIGHTNESS] * mags[_SHARPNESS]
    drew_blend = drew[_CONTRAST] | drew[_COLOR] | drew[_BRIGHTNESS] | drew[_SHARPNESS]
    return _select(drew_blend, K.blend(degenerate, levels, factor, False), levels)


def _tables(
    levels: Tensor,
    index: Tensor,
    grey: Tensor,
    drew: Tensor,
    mags: Tensor,
    ctx: K.KernelContext,
    fixed_table: Tensor | None,
) -> Tensor:
    """Every image's table, ``(B, C, 256)`` uint8: that of the op with a table it drew, the identity for
    the rest. ``index`` is ``levels`` as ``(B, C, H W)`` int64, ``grey`` its grey levels."""
    b, c, h, w = levels.shape
    if fixed_table is None:
        table = K.identity_table(b, levels.device)
        for k in _FIXED_TABLE_OPS:
            table = _select(drew[k], OPS[k].table(levels, mags[k] if OPS[k].has_magnitude else None, ctx), table)
        table = table.to(torch.uint8)
    else:
        table = fixed_table
    table = table.view(b, 1, 256).expand(b, c, 256)
    computed = {
        _AUTO_CONTRAST: OPS[_AUTO_CONTRAST].table(levels, None, ctx).view(b, c, 256),
        _EQUALIZE: K.equalize_lut(K.histogram(index), h * w),
        _CONTRAST: K.contrast_table_of_mean(K.mean_of_grey(grey, True), mags[_CONTRAST]).view(b, 1, 256),
    }
    for k in _COMPUTED_TABLE_OPS:
        table = _select(drew[k], computed[k].to(torch.uint8), table)
    return table
