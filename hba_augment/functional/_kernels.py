"""Pure batched kernels, one parameter per image.

Every kernel works on float images of shape ``(B, C, H, W)`` holding 8-bit *levels* (0..255), whatever the
caller's dtype, so that uint8 and float inputs share one implementation. Parameters are ``(B,)`` tensors on
the images' device. With ``quantize=True`` (the caller's images are uint8) a kernel reproduces PIL's
8-bit arithmetic, rounding and truncation included, and returns whole levels; with ``quantize=False``
(float images) it computes the same operation without rounding, so that it stays differentiable where
the operation is. The kernels of ops marked ``integer`` in the op table also take the uint8 images
themselves (whole levels, quantize mode) and return uint8; the pointwise ones then look each pixel up in
the op's 256-level *table*, computed with the same arithmetic as the float path.

Why not ``kornia.enhance`` for the colour ops: its brightness is additive, its contrast multiplies without
blending towards the mean, its saturation works in HSV, and its equalize/posterize truncate floats on
[0, 1]; PIL (the SPEC's reference) blends each image with a "degenerate" image in 8 bits. Geometric ops
gather PIL's own NEAREST source pixels, or use ``affine_grid``/``grid_sample`` for BILINEAR (see
:func:`affine` for why not kornia's warp).

Speed: on single images (the per-image transform) an op's cost is mostly its call overhead, so kernels
are written with few tensor ops; on batches, boolean masks and ``where`` are avoided in per-pixel work
(several times slower than float arithmetic on CPUs).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ._cache import constant_cache

__all__ = [
    "KernelContext",
    "affine",
    "auto_contrast",
    "auto_contrast_table",
    "blend",
    "brightness",
    "brightness_table",
    "color",
    "color_degenerate",
    "contrast",
    "contrast_table",
    "contrast_table_of_mean",
    "cutout",
    "cutout_centres",
    "equalize",
    "equalize_lut",
    "equalize_table",
    "grey_uint8",
    "histogram",
    "identity_table",
    "invert",
    "invert_table",
    "lookup",
    "lookup_flat",
    "mean_of_grey",
    "nearest_index",
    "posterize",
    "posterize_table",
    "rotate_matrix",
    "sharpness",
    "sharpness_degenerate",
    "shear_x_matrix",
    "shear_y_matrix",
    "smooth_int16",
    "solarize",
    "solarize_table",
    "translate_x_matrix",
    "translate_y_matrix",
    "warp_nearest",
]


class KernelContext(NamedTuple):
    """What every kernel may need besides the images and their per-image magnitudes.

    Attributes:
        quantize: the caller's images are uint8: reproduce PIL's 8-bit rounding.
        fill: fill value in levels, shape ``(1, C, 1, 1)``, or ``None`` for 0.
        mode: ``"nearest"`` or ``"bilinear"`` for geometric ops.
        generator: random stream for ops that draw (Cutout's centre), or ``None`` for torch's default.
        frames: consecutive images that are frames of one video and share one draw (Cutout's centre):
            the batch holds whole groups of ``frames`` images, in order.
    """

    quantize: bool
    fill: Tensor | None
    mode: str
    generator: torch.Generator | None
    frames: int = 1


def _bytes(mask: Tensor) -> Tensor:
    """A bool tensor as 0/1 uint8: a free view of its bytes when eager; a cast while compiling, which inductor
    fuses (its Triton lowering of the bool-to-uint8 view fails: "torch.bool is not supported by torch.iinfo",
    torch 2.11 on an H100, 2026-11-28)."""
    return mask.to(torch.uint8) if torch.compiler.is_compiling() else mask.view(torch.uint8)


def _needs_grad(*tensors: Tensor | None) -> bool:
    """Whether autograd records an op on any of ``tensors``: only then do the kernels build the
    straight-through terms below, so that uint8 images and float images without gradients run exactly
    the ops they always ran."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _straight_through(hard: Tensor, soft: Tensor) -> Tensor:
    """``hard``'s values with ``soft``'s gradient added (a straight-through estimator).

    ``soft - soft.detach()`` is exactly 0 for finite ``soft``, so every value is ``hard``'s, bit for bit;
    the backward pass sees ``hard``'s own gradient (if any) plus ``soft``'s. ``soft`` is a smooth
    relaxation of the op in the argument ``hard`` is piecewise constant in.
    """
    return hard + (soft - soft.detach())


def _round_through(values: Tensor) -> Tensor:
    """``round(values)``, with the identity's gradient when ``values`` requires one."""
    rounded = torch.round(values)
    return _straight_through(rounded, values) if _needs_grad(values) else rounded


# --------------------------------------------------------------------------------------------------
# Geometry. Each builder returns PIL's AFFINE data (a, b, c, d, e, f) per image, ``(B, 2, 3)``: the map
# from an *output* point to the *input* point (a x + b y + c, d x + e y + f), in PIL's continuous
# coordinates where pixel i covers [i, i + 1). ``affine`` samples it as PIL does: NEAREST in PIL's own
# fixed-point arithmetic, BILINEAR through grid_sample's normalised coordinates with
# ``align_corners=False``, which use the very same pixel convention.


def _affine_rows(a: Tensor, b: Tensor, c: Tensor, d: Tensor, e: Tensor, f: Tensor) -> Tensor:
    return torch.stack([a, b, c, d, e, f], -1).view(-1, 2, 3)


@constant_cache(16)
def _unit_matrices(device: torch.device, dtype: torch.dtype) -> tuple[Tensor, ...]:
    """The identity ``(2, 3)`` AFFINE data, then the unit matrix of each of its six entries."""
    units = torch.eye(6, dtype=dtype, device=device).view(6, 2, 3)
    return (torch.eye(2, 3, dtype=dtype, device=device), *units)


def _identity_plus(value: Tensor, entry: int) -> Tensor:
    """The identity with ``value`` (one per image) added at ``entry`` (0..5 for a..f): ``(B, 2, 3)``.

    One fused op instead of assembling six rows: exact, as every other entry adds a product with 0.
    """
    units = _unit_matrices(value.device, value.dtype)
    return torch.addcmul(units[0], value.view(-1, 1, 1), units[1 + entry])


def shear_x_matrix(shear: Tensor, height: int, width: int) -> Tensor:
    """PIL ``AFFINE (1, s, 0, 0, 1, 0)``: shear along x about the top-left corner."""
    return _identity_plus(shear, 1)


def shear_y_matrix(shear: Tensor, height: int, width: int) -> Tensor:
    """PIL ``AFFINE (1, 0, 0, s, 1, 0)``: shear along y about the top-left corner."""
    return _identity_plus(shear, 3)


def translate_x_matrix(fraction: Tensor, height: int, width: int) -> Tensor:
    """PIL ``AFFINE (1, 0, round(m W), 0, 1, 0)``: a positive magnitude moves the content left (as PBA).

    Gradient: the rounding passes the gradient of ``m W`` through (straight-through).
    """
    return _identity_plus(_round_through(fraction * width), 2)


def translate_y_matrix(fraction: Tensor, height: int, width: int) -> Tensor:
    """PIL ``AFFINE (1, 0, 0, 0, 1, round(m H))``: a positive magnitude moves the content up (gradient of the
    rounding: straight-through, as for TranslateX)."""
    return _identity_plus(_round_through(fraction * height), 5)


def rotate_matrix(degrees: Tensor, height: int, width: int) -> Tensor:
    """PIL ``rotate(degrees)``: counter-clockwise about the centre ``(W / 2, H / 2)``."""
    theta = degrees * (math.pi / 180.0)
    cos, sin = torch.cos(theta), torch.sin(theta)
    cx, cy = width / 2.0, height / 2.0
    # Output point p maps to c + R (p - c), R = [[cos, -sin], [sin, cos]] in PIL's y-down coordinates.
    return _affine_rows(cos, -sin, cx - cos * cx + sin * cy, sin, cos, cy - sin * cx - cos * cy)


@constant_cache(16)
def _pixel_grid(height: int, width: int, device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
    """For :func:`nearest_index`: the ``x`` and ``y`` of every output pixel, int64 ``(H W,)``, and the
    16.16 fixed-point shift of one padding pixel on the origin, ``(3,)``."""
    ys, xs = torch.meshgrid(
        torch.arange(height, device=device), torch.arange(width, device=device), indexing="ij"
    )
    return xs.flatten(), ys.flatten(), torch.tensor([0, 0, 65536], device=device)


def nearest_index(m: Tensor, h: int, w: int) -> Tensor:
    """Source pixel of every output pixel under PIL's NEAREST affine transform, as a flat index.

    Pillow's ``affine_fixed`` walks the output in 16.16 fixed point: coefficients are rounded to 1/65536
    (``FIX(v) = floor(v * 65536 + 0.5)``, the origin after adding half a pixel in double precision) and
    the source index is ``(FIX(origin) + FIX(a0) x + FIX(a1) y) >> 16``. The rounding decides every tie
    (ShearX 0.2 lands a whole row of samples on x.5 every 5 rows), so this does exactly that, in int64,
    for every pixel and both axes at once.

    Returns:
        ``(B, 1, H W)`` int64 indices into the images padded with the fill to a square of side
        ``max(H, W) + 2`` (one pixel before, at least one after): sources outside the image land on
        the padding.
    """
    xs, ys, shift = _pixel_grid(h, w, m.device)
    side = max(h, w) + 2
    # Integer indices carry no gradient; a matrix that requires one is read as values (the in-place
    # arithmetic below would otherwise modify views autograd needs). See affine() for the gradient.
    m = (m.detach() if m.requires_grad else m).to(torch.float64, copy=True)
    a0, a1, a2 = m.unbind(-1)
    # PIL: a2 + a0 * 0.5 + a1 * 0.5, the centre of output pixel (0, 0), summed in this order (the
    # halvings are exact, so only the order of the two sums matters).
    a2.add_(a0, alpha=0.5).add_(a1, alpha=0.5)
    # FIX(v), and one whole pixel more on the origin, which moves every source onto the padded image.
    fixed = m.mul_(65536.0).add_(0.5).floor_().long().add_(shift)
    f0, f1, f2 = fixed.unsqueeze(-1).unbind(-2)  # (B, 2, 1) each
    index = torch.addcmul(f2, f0, xs).addcmul_(f1, ys)
    index >>= 16
    index = index.clamp_(0, side - 1)  # (B, 2, H W): x + 1 and y + 1, clipped to the padding
    ix, iy = index.split_with_sizes([1, 1], dim=1)
    return torch.add(ix, iy, alpha=side)


def warp_nearest(images: Tensor, index: Tensor, ctx: KernelContext) -> Tensor:
    """Move pixels to the source ``index`` ``(B, 1, H W)`` from :func:`nearest_index`: a gather from the
    images padded with the fill, hence exact copies, and the fill where the source is outside the image.
    Works on uint8 levels as well (see ``OpSpec.integer``).
    """
    b, c, h, w = images.shape
    side = max(h, w) + 2
    if ctx.fill is None:
        padded = F.pad(images, (1, side - w - 1, 1, side - h - 1))
    else:
        padded = ctx.fill.to(images.dtype).expand(b, c, side, side).contiguous()
        padded[:, :, 1 : h + 1, 1 : w + 1] = images
    return padded.flatten(2).gather(2, index.expand(b, c, h * w)).view(b, c, h, w)


def affine(images: Tensor, matrix: Tensor, ctx: KernelContext) -> Tensor:
    """Warp each image with its own PIL AFFINE ``matrix`` ``(B, 2, 3)``; uncovered pixels take ``ctx.fill``.

    NEAREST is a gather at PIL's fixed-point source pixels (:func:`nearest_index`), BILINEAR a plain
    ``grid_sample``; neither uses ``kornia.geometry.transform.warp_affine``: kornia's per-call
    normalisation, matrix inverse and grid cost 4-8x a plain ``grid_sample`` for one 32x32 image and 1.8-1.9x
    for 256 (two runs) (``benchmarks/warp_kornia.py``, RESULTS.md), and it cannot reproduce PIL's fixed-point
    NEAREST sampling.

    Gradients (float levels): BILINEAR is differentiable in the images and in the matrix (hence the
    magnitude) as ``grid_sample`` is. NEAREST passes the images their exact gradient (a gather), and,
    being piecewise constant in the matrix, passes the matrix the gradient of the BILINEAR warp of the
    same (detached) images: a straight-through estimator, built only when the matrix requires a gradient.

    Returns:
        ``(B, C, H, W)`` levels.
    """
    if ctx.mode == "nearest":
        out = warp_nearest(images, nearest_index(matrix, images.shape[-2], images.shape[-1]), ctx)
        if images.dtype.is_floating_point and _needs_grad(matrix):
            out = _straight_through(out, _warp_bilinear(images.detach(), matrix, ctx))
        return out
    return _warp_bilinear(images, matrix, ctx)


def _warp_bilinear(images: Tensor, matrix: Tensor, ctx: KernelContext) -> Tensor:
    """:func:`affine` with BILINEAR interpolation (float levels)."""
    b, c, h, w = images.shape
    # PIL's BILINEAR transform samples a0 (x + 0.5) + a1 (y + 0.5) + a2 in double precision, the
    # convention of grid_sample with align_corners=False: theta = N A N^-1, N: x -> 2 x / W - 1.
    m = matrix.to(images.dtype)
    a11, a12, a13 = m[:, 0, 0], m[:, 0, 1], m[:, 0, 2]
    a21, a22, a23 = m[:, 1, 0], m[:, 1, 1], m[:, 1, 2]
    theta = torch.stack(
        [
            a11,
            a12 * (h / w),
            a11 + a12 * (h / w) + a13 * (2.0 / w) - 1.0,
            a21 * (w / h),
            a22,
            a21 * (w / h) + a22 + a23 * (2.0 / h) - 1.0,
        ],
        -1,
    ).view(b, 2, 3)
    grid = F.affine_grid(theta, [b, c, h, w], align_corners=False)
    # PIL: a source point outside [0, W) x [0, H) takes the fill; inside, neighbours beyond the border
    # repeat the edge pixel (padding "border"), so the image's edge is not blended with the fill.
    sampled = F.grid_sample(images, grid, mode="bilinear", padding_mode="border", align_corners=False)
    inside = ((grid >= -1.0) & (grid < 1.0)).all(dim=-1).unsqueeze(1)
    fill = ctx.fill if ctx.fill is not None else sampled.new_zeros(())
    out = torch.where(inside, sampled, fill)
    if ctx.quantize:
        # PIL truncates the interpolated value to 8 bits. grid_sample's float32 arithmetic lands a hair
        # below some whole values that PIL's double arithmetic hits exactly, hence the 1e-3 slack: on 200
        # real images, rounding differed from PIL on 36-47% of the values a shear or rotation moves,
        # truncation on 0.05-2%, truncation with the slack on 0.1-1% (RESULTS.md, "BILINEAR").
        out = (out + 1e-3).floor_()
    return out


# --------------------------------------------------------------------------------------------------
# Colour. Blends follow PIL's ``Image.blend(degenerate, image, factor)``: degenerate + factor * (image -
# degenerate), clipped to [0, 255] and truncated to 8 bits. Kernels are written for few tensor ops: on
# single images (the per-image transform) the cost of an op is its call, not its arithmetic.


def _per_image(values: Tensor) -> Tensor:
    return values.view(-1, 1, 1, 1)


def _round_half_up(values: Tensor, quantize: bool) -> Tensor:
    """PIL's rounding of an intermediate 8-bit image, ``floor(v + 0.5)``.

    Float images get the same value through a straight-through estimator, so that float results stay
    within a level of their uint8 twins while gradients still flow as if nothing were rounded.
    """
    rounded = torch.floor(values + 0.5)
    return rounded if quantize else values + (rounded - values).detach()


def blend(degenerate: Tensor, images: Tensor, factor: Tensor, quantize: bool) -> Tensor:
    """PIL's ``Image.blend(degenerate, image, factor)`` of the enhancers on levels, one ``(B,)`` factor per
    image, clamped to [0, 255] and, on uint8 levels (``quantize``), truncated as PIL's 8-bit result. A factor
    of 1 gives the image itself, exactly, on whole levels."""
    out = (degenerate + _per_image(factor) * (images - degenerate)).clamp(0.0, 255.0)
    return out.floor() if quantize else out


#: PIL's ``convert("L")`` weights: grey = ``(19595 R + 38470 G + 7471 B + 2^15) >> 16``.
_LUMA_WEIGHTS = (19595, 38470, 7471)
#: The same as a ``(1, 3, 1, 1)`` float filter, divided by 2^16.
_LUMA = torch.tensor(_LUMA_WEIGHTS, dtype=torch.float32).view(1, 3, 1, 1) / 65536.0


def _grayscale(images: Tensor, quantize: bool) -> Tensor:
    """PIL's ``convert("L")``: ITU-R 601-2 luma, ``(19595 R + 38470 G + 7471 B + 2^15) >> 16`` in 8 bits.

    On whole levels every product and partial sum is an exact float (below 2^24 before the exact
    scaling by 2^-16), so the weighted sum is exact in any order. Returns ``(B, 1, H, W)``; a one-channel
    image is its own grey level (uint8 levels stay uint8).
    """
    if images.shape[1] == 1:
        return images
    luma = _luma(images.device, _float_dtype(images))
    return _round_half_up((images * luma).sum(dim=1, keepdim=True), quantize)


@constant_cache(16)
def _luma(device: torch.device, dtype: torch.dtype) -> Tensor:
    """:data:`_LUMA` on ``device``, kept: a copy from the host on every call would synchronise a GPU."""
    return _LUMA.to(device=device, dtype=dtype)


def _float_dtype(images: Tensor) -> torch.dtype:
    """The float dtype the kernels compute ``images`` in: their own if float, else float32."""
    return images.dtype if images.dtype.is_floating_point else torch.float32


# Pointwise ops. Each maps every level through a function of the image's statistics and magnitude. On
# float levels the kernel computes that function on the pixels. On uint8 levels (quantize mode) it
# computes the function once per image on the 256 levels, the op's *table* (``(B, C or 1, 1, 256)`` whole
# levels, the same arithmetic on a ramp), and looks every pixel up in it; :func:`augment` also merges the
# tables of all pointwise ops of a step into one lookup.


@constant_cache(8)
def _ramp(device: torch.device) -> Tensor:
    """The 256 levels as float32 ``(1, 1, 1, 256)``: the input of every table."""
    return torch.arange(256, dtype=torch.float32, device=device).view(1, 1, 1, 256)


# From how many values (B C H W) a CPU lookup without the caller's index reads the pixels as int32 offsets
# into the flattened tables (``index_select``) instead of int64 levels (``gather``): below it, gather's
# fewer calls win (two more here: one 32x32 RGB image, 15 against 22 us); from about sixteen such images up
# the int64 cast's bytes cost more (flat: 0.97x the gather's time at B = 16, 0.86-0.90x from B = 32 at
# 32x32, 0.53-0.86x at 224x224; benchmarks/results/lookup_kernel_cpu.md).
_FLAT_LOOKUP_FROM = 16 * 3 * 32 * 32
# Up to how many tables their int32 offsets (256 per table) stay below 2**31.
_FLAT_LOOKUP_TABLES = 2**23 - 1


def lookup(images: Tensor, table: Tensor, index: Tensor | None = None) -> Tensor:
    """``table[b, c, images[b, c, y, x]]``: uint8 ``(B, C, H, W)`` images through ``(B, C or 1, 1, 256)`` (or
    ``(B, C or 1, 256)``) tables of whole levels; returns uint8. ``index``: the images as ``(B, C, H W)``
    int64 (or int32), where the caller has them already (``None``: made here)."""
    # (the size first: single images, the per-image path, stop there)
    if (index is None and images.numel() >= _FLAT_LOOKUP_FROM and images.device.type == "cpu"
            and images.shape[0] * images.shape[1] <= _FLAT_LOOKUP_TABLES):
        return lookup_flat(images, table)
    b, c, h, w = images.shape
    index = images.reshape(b, c, h * w).long() if index is None else index
    return _uint8_tables(table, b, c).gather(2, index).view(b, c, h, w)


def lookup_flat(images: Tensor, table: Tensor) -> Tensor:
    """:func:`lookup` as one ``index_select`` from the ``B C`` tables laid end to end, each pixel read as
    the int32 offset ``256 (b C + c) + level``: the same pixels. Why: ``gather`` takes its index as int64
    (an int32 one is cast, ``benchmarks/index_dtype.py``), ``index_select`` reads int32 as such, so the
    pixels are widened to 4 bytes instead of 8."""
    b, c, h, w = images.shape
    starts = torch.arange(0, b * c * 256, 256, dtype=torch.int32, device=images.device).view(b * c, 1)
    offsets = images.reshape(b * c, h * w).to(torch.int32).add_(starts)
    return _uint8_tables(table, b, c).reshape(-1).index_select(0, offsets.view(-1)).view(b, c, h, w)


def _uint8_tables(table: Tensor, b: int, c: int) -> Tensor:
    """:func:`lookup`'s tables as uint8 ``(B, C, 256)`` (channels expanded where the tables are shared)."""
    return table.to(torch.uint8).view(table.shape[0], table.shape[1], 256).expand(b, c, 256)


def identity_table(batch: int, device: torch.device) -> Tensor:
    """The table that leaves every level as it is, ``(B, 1, 1, 256)`` float32 (an expanded view)."""
    return _ramp(device).expand(batch, 1, 1, 256)


def _batch_ramp(images: Tensor) -> Tensor:
    return identity_table(images.shape[0], images.device)


def invert_table(images: Tensor, magnitude: Tensor | None, ctx: KernelContext) -> Tensor:
    """The table of :func:`invert`, ``(B, 1, 1, 256)``."""
    return 255.0 - _batch_ramp(images)


def invert(images: Tensor, magnitude: Tensor | None, ctx: KernelContext) -> Tensor:
    """PIL ``ImageOps.invert``: ``255 - x`` (float or uint8 levels)."""
    return 255 - images


def _threshold(strength: Tensor) -> Tensor:
    """Solarize's strength ``m`` as PIL's threshold ``256 - m`` (SPEC section 1: 0 inverts nothing)."""
    return 256.0 - strength


def _bits(strength: Tensor) -> Tensor:
    """Posterize's strength ``m`` as the number of kept bits ``8 - round(m)`` (0 keeps all 8)."""
    return 8.0 - torch.round(strength)


def _solarize(levels: Tensor, strength: Tensor, quantize: bool) -> Tensor:
    # Compare whole levels so that a float image's 127.99998 counts as level 128, as its uint8 twin.
    whole = levels if quantize else levels.round()
    # A whole level x is >= t iff x >= ceil(t), so this weight is exactly 1 there and 0 below: float
    # arithmetic instead of a boolean mask and where(), several times slower on CPUs.
    inverted = (whole - _per_image(torch.ceil(_threshold(strength)) - 1.0)).clamp_(0.0, 1.0)
    out = torch.lerp(levels, 255.0 - levels, inverted)
    if not quantize and _needs_grad(strength):
        # The threshold is a step in the strength: straight-through with a sigmoid step of width
        # _SOLARIZE_TEMPERATURE levels, centred between the last kept and the first inverted level.
        x = levels.detach()
        edge = _per_image(_threshold(strength) - 0.5)
        out = _straight_through(out, torch.lerp(x, 255.0 - x, torch.sigmoid((x - edge) / _SOLARIZE_TEMPERATURE)))
    return out


#: Width in levels of the sigmoid step whose gradient Solarize's strength gets: pixels within about
#: three widths of the threshold pass a gradient to it (one level would leave most images without any).
_SOLARIZE_TEMPERATURE = 8.0


def solarize_table(images: Tensor, strength: Tensor, ctx: KernelContext) -> Tensor:
    """The table of :func:`solarize`, ``(B, 1, 1, 256)``."""
    return _solarize(_ramp(images.device), strength, True)


def solarize(images: Tensor, strength: Tensor, ctx: KernelContext) -> Tensor:
    """PIL ``ImageOps.solarize(img, 256 - m)``: levels at or above ``256 - m`` are inverted, per image
    strength ``m`` in [0, 255] (0: nothing changes; float or uint8 levels).

    Gradients (float levels): the images get the exact one (``1`` or ``-1``); the strength, a step
    function, a straight-through estimate: the gradient of the blend with a sigmoid weight
    ``sigmoid((x - (256 - m - 0.5)) / 8)`` in place of the step.
    """
    if images.dtype == torch.uint8:
        # x ^ 255 = 255 - x: flip all bits of the levels above ceil(t) - 1, compared in uint8 (a float
        # threshold would promote every pixel; with where() one 224x224 image took 2.2x as long). ceil(t) - 1
        # lies in 0..255 for every strength, where t = 256 (strength 0) itself would not fit in uint8.
        flip = images > _per_image((torch.ceil(_threshold(strength)) - 1.0).to(torch.uint8))
        return images ^ _bytes(flip).mul_(255)
    return _solarize(images, strength, ctx.quantize)


def _posterize(levels: Tensor, strength: Tensor, quantize: bool) -> Tensor:
    step = _per_image(torch.exp2(8.0 - _bits(strength)).to(levels.dtype))
    whole = levels if quantize else levels.round()
    out = torch.floor(whole / step) * step
    if not quantize and _needs_grad(levels, strength):
        # Truncation to a multiple of step = 2^round(m) is piecewise constant in both arguments:
        # straight-through with its average, x - (2^m - 1) / 2 (levels uniform within a step), m unrounded.
        mean_loss = (_per_image(torch.exp2(strength.to(levels.dtype))) - 1.0) * 0.5
        out = _straight_through(out, levels - mean_loss)
    return out


def posterize_table(images: Tensor, strength: Tensor, ctx: KernelContext) -> Tensor:
    """The table of :func:`posterize`, ``(B, 1, 1, 256)``."""
    return _posterize(_ramp(images.device), strength, True)


def posterize(images: Tensor, strength: Tensor, ctx: KernelContext) -> Tensor:
    """PIL ``ImageOps.posterize(img, 8 - round(m))``: keep ``8 - round(m)`` high bits of each level, per
    image strength ``m`` in [0, 8] (0: nothing changes, 8: black), on float or uint8 levels.

    Gradients (float levels), both straight-through: the op is piecewise constant in the images and the
    strength, so both get the gradient of the average truncation ``x - (2^m - 1) / 2`` (1 for each level,
    ``-ln 2 * 2^m / 2`` for the strength).
    """
    if images.dtype == torch.uint8:
        # The mask of the kept bits, 256 - step: 0 for 0 bits, 255 for 8.
        return images & _per_image((256.0 - torch.exp2(8.0 - _bits(strength))).to(torch.uint8))
    return _posterize(images, strength, ctx.quantize)


def _brightness(levels: Tensor, factor: Tensor, quantize: bool) -> Tensor:
    out = (_per_image(factor) * levels).clamp(0.0, 255.0)
    return out.floor() if quantize else out


def brightness_table(images: Tensor, factor: Tensor, ctx: KernelContext) -> Tensor:
    """The table of :func:`brightness`, ``(B, 1, 1, 256)``."""
    return _brightness(_ramp(images.device), factor, True)


def brightness(images: Tensor, factor: Tensor, ctx: KernelContext) -> Tensor:
    """PIL ``ImageEnhance.Brightness``: blend with black, ``0 + f (x - 0)``, that is ``f x``."""
    if images.dtype == torch.uint8:
        # Through float levels: vectorised passes beat a lookup's int64 gather (1.6x at 224x224). Back to
        # uint8 via int16, as from_levels: a direct float -> uint8 conversion is several times slower.
        return _brightness(images.to(torch.float32), factor, True).to(torch.int16).to(torch.uint8)
    return _brightness(images, factor, ctx.quantize)


def _mean_grey(images: Tensor, quantize: bool) -> Tensor:
    """The image's mean grey level, rounded to 8 bits as PIL's ImageStat, ``(B, 1, 1, 1)``."""
    return mean_of_grey(_grayscale(images, quantize), quantize)


def mean_of_grey(grey: Tensor, quantize: bool) -> Tensor:
    """:func:`_mean_grey` of images whose grey levels (:func:`color_degenerate`, or the uint8 ones of
    :func:`grey_uint8`) are ``grey`` ``(B, 1, H, W)``; float32 for integer grey levels."""
    dtype = _float_dtype(grey)
    if grey.shape[-2] * grey.shape[-1] > _EXACT_FLOAT32_MEAN:
        # A float32 mean of a larger image (299x299, say) can round onto the half level just above the true
        # mean, which PIL's double-precision mean then rounds the other way (tests/test_ops_pil.py).
        dtype = torch.float64
    mean = _round_half_up(grey.mean(dim=(1, 2, 3), keepdim=True, dtype=dtype), quantize)
    return mean if mean.dtype == grey.dtype else mean.to(_float_dtype(grey))


#: Up to this many pixels a float32 mean of whole levels rounds half up as PIL's does: the sum stays
#: exact (under 2^24), and the mean of n pixels lies 1 / (2 n) >= 2^-16 or more from a half level, more
#: than float32's rounding error there (2^-17 below 256). Larger images take float64.
_EXACT_FLOAT32_MEAN = 1 << 15


def grey_uint8(images: Tensor) -> Tensor:
    """PIL's ``convert("L")`` of uint8 images in integers (:data:`_LUMA_WEIGHTS`), ``(B, 1, H, W)`` uint8 (a
    one-channel image: its own levels, not a copy). Exactly :func:`_grayscale`'s values, computed in 4-byte
    integers instead of float passes over all three channels and kept in one byte, as PIL keeps them: the
    sync-free path computes it for every image of a step, once for Contrast's mean and Color's degenerate
    image, and inductor writes it to memory in the dtype it returns (``benchmarks/sync_free_bytes.py``)."""
    if images.shape[1] == 1:
        return images
    (red, green, blue), (w_red, w_green, w_blue) = images.unbind(1), _LUMA_WEIGHTS
    grey = red.to(torch.int32).mul_(w_red).add_(green, alpha=w_green).add_(blue, alpha=w_blue)
    return grey.add_(1 << 15).bitwise_right_shift_(16).to(torch.uint8).unsqueeze(1)


def contrast_table(images: Tensor, factor: Tensor, ctx: KernelContext) -> Tensor:
    """The table of :func:`contrast` for each image (its mean grey level), ``(B, 1, 1, 256)``."""
    return contrast_table_of_mean(_mean_grey(images, True), factor)


def contrast_table_of_mean(mean: Tensor, factor: Tensor) -> Tensor:
    """:func:`contrast_table` for images whose rounded mean grey level is ``mean`` ``(B, 1, 1, 1)``."""
    return blend(mean, _ramp(mean.device), factor, True)


def contrast(images: Tensor, factor: Tensor, ctx: KernelContext) -> Tensor:
    """PIL ``ImageEnhance.Contrast``: blend with the image's mean grey level (rounded to 8 bits by PIL)."""
    if images.dtype == torch.uint8:
        return lookup(images, contrast_table(images, factor, ctx))
    return blend(_mean_grey(images, ctx.quantize), images, factor, ctx.quantize)


def color_degenerate(images: Tensor, quantize: bool) -> Tensor:
    """What :func:`color` blends with: the image's grey levels (PIL's ``convert("L")``), ``(B, 1, H, W)``."""
    return _grayscale(images, quantize)


def color(images: Tensor, factor: Tensor, ctx: KernelContext) -> Tensor:
    """PIL ``ImageEnhance.Color``: blend with the image's own grey levels."""
    return blend(color_degenerate(images, ctx.quantize), images, factor, ctx.quantize)


def _smooth_sum(levels: Tensor) -> Tensor | None:
    """``13 x`` ``ImageFilter.SMOOTH`` of ``(B, C, H, W)`` levels before its division, ``3x3 box sum + 4 centre``,
    ``(B, C, H - 2, W - 2)`` in the levels' dtype; ``None`` for images under 3x3, which PIL's filter leaves as
    they are. The box sum is computed separably with shifted slices (CPU depthwise convolutions cost several
    times more); whole levels give at most ``13 x 255 = 3315``, which int16 holds."""
    h, w = levels.shape[-2:]
    if h < 3 or w < 3:
        return None
    rows = levels[..., :-2] + levels[..., 1:-1]
    rows += levels[..., 2:]
    box = rows[..., :-2, :] + rows[..., 1:-1, :]
    box += rows[..., 2:, :]
    return box.add_(levels[..., 1:-1, 1:-1], alpha=4)


def sharpness_degenerate(images: Tensor, quantize: bool) -> Tensor | None:
    """What :func:`sharpness` blends the inner pixels with: ``ImageFilter.SMOOTH`` of the ``(B, C, H, W)``
    float levels, ``(B, C, H - 2, W - 2)``; ``None`` under 3x3 (:func:`_smooth_sum`).

    On whole levels the exact value is a multiple of 1/13, never within 1/26 of a rounding boundary, so float
    rounding in the sums cannot change PIL's 8-bit result.
    """
    total = _smooth_sum(images)
    return None if total is None else _round_half_up(total.div_(13.0), quantize)


def smooth_int16(levels: Tensor) -> Tensor | None:
    """:func:`sharpness_degenerate` of whole levels held as int16 ``(B, C, H, W)``, in integers:
    ``floor(v / 13 + 1/2) = (v + 6) // 13`` for the whole ``v`` of :func:`_smooth_sum`, so the same values as
    the float kernel, in 2-byte passes instead of 4-byte ones; ``None`` under 3x3."""
    total = _smooth_sum(levels)
    return None if total is None else total.add_(6).div_(13, rounding_mode="floor")


def sharpness(images: Tensor, factor: Tensor, ctx: KernelContext) -> Tensor:
    """PIL ``ImageEnhance.Sharpness``: blend with ``ImageFilter.SMOOTH`` (:func:`sharpness_degenerate`); the
    1-pixel border is kept."""
    smooth = sharpness_degenerate(images, ctx.quantize)
    if smooth is None:
        return images.clone()
    out = images.clone()
    out[..., 1:-1, 1:-1] = blend(smooth, images[..., 1:-1, 1:-1], factor, ctx.quantize)
    return out


def _auto_contrast_8bit(levels: Tensor, lo: Tensor, hi: Tensor) -> Tensor:
    """PIL's autocontrast map on whole levels, for channel minima ``lo`` and maxima ``hi`` ``(B, C, 1, 1)``.

    PIL maps level x to int(x * scale + offset) with scale = 255 / (hi - lo) and offset = -lo * scale in
    double precision: so does this, for bit-exact results. A constant channel gets scale 1 and offset 0:
    the identity, with no separate branch. x * scale - lo * scale lies in [0, 255] up to an ulp above,
    so the floor needs no clamp.
    """
    lo, hi = lo.double(), hi.double()
    span = hi - lo
    flat = span <= 0
    # A tensor-by-tensor division: torch computes ``255.0 / span`` as 255 * (1 / span), an ulp off PIL's
    # quotient, which flips the truncation of some levels.
    scale = torch.where(flat, 1.0, _float64_255(levels.device) / span)
    shift = torch.where(flat, 0.0, lo) * scale
    return (levels.double() * scale).sub_(shift).floor_()


def _channel_range(images: Tensor) -> tuple[Tensor, Tensor]:
    # (amin and amax: torch.aminmax over these dimensions measured 20x slower on CPU batches)
    if images.dtype == torch.uint8 and torch.compiler.is_compiling():
        # Inductor's vectorised CPU minimum of 8-bit integers lets zeroed padding lanes into the result
        # (pytorch issue 191499: 1 for a channel whose minimum is 5, torch 2.14.1); the cast is fused into
        # the load. (Zeros cannot raise an unsigned maximum.)
        lo, hi = images.to(torch.int16).amin(dim=(2, 3), keepdim=True), images.amax(dim=(2, 3), keepdim=True)
        return lo.to(torch.uint8), hi
    return images.amin(dim=(2, 3), keepdim=True), images.amax(dim=(2, 3), keepdim=True)


def auto_contrast_table(images: Tensor, magnitude: Tensor | None, ctx: KernelContext) -> Tensor:
    """The table of :func:`auto_contrast` for each image and channel, ``(B, C, 1, 256)``."""
    return _auto_contrast_8bit(_ramp(images.device), *_channel_range(images))


def auto_contrast(images: Tensor, magnitude: Tensor | None, ctx: KernelContext) -> Tensor:
    """PIL ``ImageOps.autocontrast``: stretch each channel's [min, max] to [0, 255]; constant channels stay."""
    if images.dtype == torch.uint8:
        return lookup(images, auto_contrast_table(images, magnitude, ctx))
    lo, hi = _channel_range(images)
    if ctx.quantize:
        return _auto_contrast_8bit(images, lo, hi).to(images.dtype)
    flat = hi <= lo
    scale = 255.0 / torch.where(flat, 1.0, hi - lo)
    return torch.where(flat, images, (images * scale - lo * scale).clamp(0.0, 255.0))


@constant_cache(8)
def _float64_255(device: torch.device) -> Tensor:
    return torch.tensor(255.0, dtype=torch.float64, device=device)


@constant_cache(16)
def _equalize_constants(device: torch.device, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """One, to count pixels with, and the identity table, in ``dtype``, for :func:`histogram` and
    :func:`equalize_lut`."""
    return torch.ones(1, 1, 1, dtype=dtype, device=device), torch.arange(256, dtype=dtype, device=device)


def _count_dtype(n: int) -> torch.dtype:
    """The float dtype that holds the counts of ``n`` pixels and :func:`equalize_lut`'s arithmetic exactly:
    float32 below :data:`_EXACT_FLOAT32_EQUALIZE` pixels, float64 above."""
    return torch.float32 if n < _EXACT_FLOAT32_EQUALIZE else torch.float64


def histogram(index: Tensor) -> Tensor:
    """Per image and channel, how many pixels hold each level: ``index`` ``(B, C, N)`` int64 whole levels
    -> ``(B, C, 256)`` counts, whole numbers in floats (:func:`_count_dtype`). A scatter of ones, with no
    host read (``bincount``'s size depends on the data)."""
    b, c, n = index.shape
    one = _equalize_constants(index.device, _count_dtype(n))[0]
    return torch.zeros(b, c, 256, dtype=one.dtype, device=index.device).scatter_add_(2, index, one.expand(b, c, n))


def equalize_lut(hist: Tensor, n: int) -> Tensor:
    """PIL's equalize table from each channel's :func:`histogram` ``(B, C, 256)`` of ``n`` pixels, ``(B, C,
    256)`` whole levels in the histogram's dtype: ``step = (pixels below the highest occupied level) //
    255``, ``lut[i] = (step // 2 + below[i]) // step``, the identity where ``step`` is 0. PIL computes in
    integers; so does this, in floats that hold them exactly."""
    identity = _equalize_constants(hist.device, hist.dtype)[1]
    below = hist.cumsum(dim=2).sub_(hist)  # pixels below each level; n above the highest occupied one
    # below[top] is the largest value of ``below`` under n. (True division then floor: exact for these
    # whole numbers, and on CPUs several times faster than an integer division, which has no vector form.)
    step = torch.where(below < n, below, 0.0).amax(dim=2, keepdim=True).div_(255.0).floor_()
    lut = below.add_(step.mul(0.5).floor_()).div_(step.clamp(min=1.0)).floor_()
    return torch.where(step > 0, lut.clamp_(max=255.0), identity)


#: Below this many pixels float32 holds :func:`equalize_lut`'s arithmetic exactly: every count and sum is a
#: whole number under 2^24, and the floor of a float32 quotient a / b of whole numbers is a // b while
#: a + b < 2^24 (a quotient that is not whole lies at least 1 / b below the next whole number, more than
#: float32's relative error 2^-24 of it). Here a <= n + n / 510 and b <= n / 255.
_EXACT_FLOAT32_EQUALIZE = 1 << 23


def _equalize(levels: Tensor) -> tuple[Tensor, Tensor]:
    """PIL's equalize table of whole ``levels`` ``(B, C, H, W)``, ``(B, C, 256)`` (:func:`equalize_lut`),
    and the levels as int64 indices ``(B, C, H W)``."""
    b, c, h, w = levels.shape
    index = levels.reshape(b, c, h * w).long()
    return equalize_lut(histogram(index), h * w), index


def equalize_table(images: Tensor, magnitude: Tensor | None, ctx: KernelContext) -> Tensor:
    """The table of :func:`equalize` for each image and channel, ``(B, C, 1, 256)``."""
    return _equalize(images)[0].unsqueeze(2)


def equalize(images: Tensor, magnitude: Tensor | None, ctx: KernelContext) -> Tensor:
    """PIL ``ImageOps.equalize``: per-channel histogram equalisation with PIL's lookup table (float or
    uint8 levels).

    Gradient (float levels): straight-through, the identity's (as Faster AutoAugment and DADA): the
    lookup is piecewise constant in the pixels, and its table a histogram of them.
    """
    levels = images if ctx.quantize else images.round().clamp(0.0, 255.0)
    table, index = _equalize(levels)
    out = table.to(images.dtype).gather(2, index).view(images.shape)
    if not ctx.quantize and _needs_grad(images):
        out = _straight_through(out, images)  # see the docstring
    return out


@constant_cache(16)
def _patch_constants(height: int, width: int, device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
    """``(H, W)`` as float32 and as int64 last indices, and ``arange(max(H, W))``, for :func:`cutout`."""
    size = torch.tensor([height, width], dtype=torch.float32, device=device)
    last = torch.tensor([height - 1, width - 1], device=device)
    return size, last, torch.arange(max(height, width), device=device)


def _paint_patch(images: Tensor, fraction: Tensor, centre: Tensor, ctx: KernelContext) -> Tensor:
    """Cutout's patch for ``centre`` ``(B, 2)`` (row, column), both axes at once; see :func:`cutout`."""
    _, _, h, w = images.shape
    size, _, ramp = _patch_constants(h, w, images.device)
    extent = torch.round(fraction.view(-1, 1) * size).long()  # (B, 2): round(m H), round(m W)
    start = (centre - (extent >> 1)).unsqueeze(-1)
    inside = (ramp >= start) & (ramp < start + extent.unsqueeze(-1))  # (B, 2, max(H, W))
    fill = _zero(images.device, images.dtype) if ctx.fill is None else ctx.fill.to(images.dtype)
    if images.dtype == torch.uint8:
        # Products with 0/1 bytes, exact and (unlike where()) fast on CPUs: image outside, fill inside.
        patch = (inside[:, 0, :h, None] & inside[:, 1, None, :w]).unsqueeze(1)
        out = images * _bytes(~patch)
        return out if ctx.fill is None else out.add_(_bytes(patch) * fill)
    # The patch as a 0/1 float weight (boolean masks and where() are several times slower on float CPU
    # images); lerp returns the image exactly at weight 0 and the fill exactly at weight 1.
    weight = inside.to(images.dtype)
    mask = weight[:, 0, :h, None] * weight[:, 1, None, :w]
    out = torch.lerp(images, fill, mask.unsqueeze(1))
    if not ctx.quantize and _needs_grad(fraction):
        # The patch's size is a step function of the magnitude: straight-through with the patch whose
        # sides move continuously, [c + 1/2 - m H / 2, c + 1/2 + m H / 2) (the hard patch for odd sizes),
        # each pixel weighted by the fraction of it the patch covers.
        pos = ramp.to(images.dtype)
        half = (fraction.to(images.dtype).view(-1, 1) * size.to(images.dtype)).mul(0.5).unsqueeze(-1)
        mid = centre.to(images.dtype).add(0.5).unsqueeze(-1)
        cover = (torch.minimum(pos + 1.0, mid + half) - torch.maximum(pos, mid - half)).clamp(0.0, 1.0)
        soft = cover[:, 0, :h, None] * cover[:, 1, None, :w]
        out = _straight_through(out, torch.lerp(images.detach(), fill, soft.unsqueeze(1)))
    return out


@constant_cache(8)
def _zero(device: torch.device, dtype: torch.dtype) -> Tensor:
    return torch.zeros((), dtype=dtype, device=device)


def cutout_centres(b: int, h: int, w: int, device: torch.device, ctx: KernelContext) -> Tensor:
    """Cutout's centres for ``b`` images of ``h x w`` pixels, ``(B, 2)`` int64 (row, column), drawn uniformly
    over the pixels from ``ctx.generator``, one per video (its frames share it, see ``KernelContext.frames``)."""
    size, last, _ = _patch_constants(h, w, device)
    u = torch.rand(b // ctx.frames, 2, generator=ctx.generator, device=device)
    centre = (u * size).long().clamp_(max=last)
    if ctx.frames > 1:
        centre = centre.repeat_interleave(ctx.frames, dim=0)
    return centre


def cutout(images: Tensor, fraction: Tensor, ctx: KernelContext, centre: Tensor | None = None) -> Tensor:
    """Paint a ``round(m H) x round(m W)`` patch with ``ctx.fill`` centred on ``centre`` ``(B, 2)`` (row,
    column), by default drawn by :func:`cutout_centres`. The patch covers rows ``[cy - ph // 2, cy - ph // 2
    + ph)`` (likewise columns), clipped at the borders.

    Gradients (float levels): the images get the exact one (0 inside the patch); the magnitude, which sets
    a whole number of pixels, a straight-through estimate: the gradient of a patch whose sides move
    continuously with it, edge pixels weighted by the fraction covered.
    """
    if centre is None:
        b, _, h, w = images.shape
        centre = cutout_centres(b, h, w, images.device, ctx)
    return _paint_patch(images, fraction, centre, ctx)
