"""Pure batched kernels, one parameter per image.

Every kernel works on float images of shape ``(B, C, H, W)`` holding 8-bit *levels* (0..255), whatever the
caller's dtype, so that uint8 and float inputs share one implementation. Parameters are ``(B,)`` tensors on
the images' device. With ``quantize=True`` (the caller's images are uint8) a kernel reproduces PIL's
8-bit arithmetic, rounding and truncation included, and returns whole levels; with ``quantize=False``
(float images) it computes the same operation without rounding, so that it stays differentiable where
the operation is.

Why not ``kornia.enhance`` for the colour ops: its brightness is additive, its contrast multiplies without
blending towards the mean, its saturation works in HSV, and its equalize/posterize truncate floats on
[0, 1]; PIL (the SPEC's reference) blends each image with a "degenerate" image in 8 bits. Geometric ops
use torch's ``affine_grid``/``grid_sample`` directly (see :func:`affine` for why not kornia's warp).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "KernelContext",
    "affine",
    "auto_contrast",
    "brightness",
    "color",
    "contrast",
    "cutout",
    "equalize",
    "invert",
    "posterize",
    "rotate_matrix",
    "sharpness",
    "shear_x_matrix",
    "shear_y_matrix",
    "solarize",
    "translate_x_matrix",
    "translate_y_matrix",
]


class KernelContext(NamedTuple):
    """What every kernel may need besides the images and their per-image magnitudes.

    Attributes:
        quantize: the caller's images are uint8: reproduce PIL's 8-bit rounding.
        fill: fill value in levels, shape ``(1, C, 1, 1)``, or ``None`` for 0.
        mode: ``"nearest"`` or ``"bilinear"`` for geometric ops.
        generator: random stream for ops that draw (Cutout's centre), or ``None`` for torch's default.
    """

    quantize: bool
    fill: Tensor | None
    mode: str
    generator: torch.Generator | None


# --------------------------------------------------------------------------------------------------
# Geometry. Each builder returns PIL's AFFINE data (a, b, c, d, e, f) per image, ``(B, 2, 3)``: the map
# from an *output* point to the *input* point (a x + b y + c, d x + e y + f), in PIL's continuous
# coordinates where pixel i covers [i, i + 1). ``affine`` converts it to grid_sample's normalised
# coordinates with ``align_corners=False``, which use the very same pixel convention, so the geometry
# is PIL's without any half-pixel correction.


def _affine_rows(a: Tensor, b: Tensor, c: Tensor, d: Tensor, e: Tensor, f: Tensor) -> Tensor:
    return torch.stack([a, b, c, d, e, f], -1).view(-1, 2, 3)


def shear_x_matrix(shear: Tensor, height: int, width: int) -> Tensor:
    """PIL ``AFFINE (1, s, 0, 0, 1, 0)``: shear along x about the top-left corner."""
    one, zero = torch.ones_like(shear), torch.zeros_like(shear)
    return _affine_rows(one, shear, zero, zero, one, zero)


def shear_y_matrix(shear: Tensor, height: int, width: int) -> Tensor:
    """PIL ``AFFINE (1, 0, 0, s, 1, 0)``: shear along y about the top-left corner."""
    one, zero = torch.ones_like(shear), torch.zeros_like(shear)
    return _affine_rows(one, zero, zero, shear, one, zero)


def translate_x_matrix(fraction: Tensor, height: int, width: int) -> Tensor:
    """PIL ``AFFINE (1, 0, round(m W), 0, 1, 0)``: a positive magnitude moves the content left (as PBA)."""
    one, zero = torch.ones_like(fraction), torch.zeros_like(fraction)
    return _affine_rows(one, zero, torch.round(fraction * width), zero, one, zero)


def translate_y_matrix(fraction: Tensor, height: int, width: int) -> Tensor:
    """PIL ``AFFINE (1, 0, 0, 0, 1, round(m H))``: a positive magnitude moves the content up."""
    one, zero = torch.ones_like(fraction), torch.zeros_like(fraction)
    return _affine_rows(one, zero, zero, zero, one, torch.round(fraction * height))


def rotate_matrix(degrees: Tensor, height: int, width: int) -> Tensor:
    """PIL ``rotate(degrees)``: counter-clockwise about the centre ``(W / 2, H / 2)``."""
    theta = degrees * (math.pi / 180.0)
    cos, sin = torch.cos(theta), torch.sin(theta)
    cx, cy = width / 2.0, height / 2.0
    # Output point p maps to c + R (p - c), R = [[cos, -sin], [sin, cos]] in PIL's y-down coordinates.
    return _affine_rows(cos, -sin, cx - cos * cx + sin * cy, sin, cos, cy - sin * cx - cos * cy)


def _nearest_grid(m: Tensor, h: int, w: int) -> Tensor:
    """Sampling grid that picks exactly the source pixels of PIL's NEAREST affine transform.

    Pillow's ``affine_fixed`` walks the output in 16.16 fixed point: coefficients are rounded to 1/65536
    and the source index is ``floor``. The rounding decides every tie (ShearX 0.2 lands a whole row of
    samples on x.5 every 5 rows), so emulate it in int64 and point grid_sample at the chosen pixel centres.
    """

    def fix(v: Tensor) -> Tensor:
        return torch.floor(v.double() * 65536.0 + 0.5).long()

    def source_index(row: int) -> Tensor:
        a0, a1, a2 = m[:, row, 0], m[:, row, 1], m[:, row, 2]
        origin = fix(a2 + 0.5 * a0 + 0.5 * a1)  # the centre of output pixel (0, 0)
        fixed = origin[:, None, None] + fix(a0)[:, None, None] * xs + fix(a1)[:, None, None] * ys
        return torch.div(fixed, 65536, rounding_mode="floor")

    xs = torch.arange(w, device=m.device).view(1, 1, w)
    ys = torch.arange(h, device=m.device).view(1, h, 1)
    ix, iy = source_index(0), source_index(1)
    # Pixel centres in normalised coordinates; indices outside the image land outside [-1, 1] -> fill.
    return torch.stack([(2 * ix + 1).float() / w - 1.0, (2 * iy + 1).float() / h - 1.0], dim=-1)


def affine(images: Tensor, matrix: Tensor, ctx: KernelContext) -> Tensor:
    """Warp each image with its own PIL AFFINE ``matrix`` ``(B, 2, 3)``; uncovered pixels take ``ctx.fill``.

    Plain ``grid_sample`` rather than ``kornia.geometry.transform.warp_affine``: kornia's per-call
    normalisation, matrix inverse and full-size fill mask cost 808 us against 91 us for one 32x32 image,
    and 23.3 ms against 10.6 ms for 256 (benchmarks/RESULTS.md), and its grid cannot reproduce PIL's
    fixed-point NEAREST sampling.

    Returns:
        ``(B, C, H, W)`` levels.
    """
    b, c, h, w = images.shape
    m = matrix.to(images.dtype)
    if ctx.mode == "nearest":
        grid = _nearest_grid(matrix, h, w).to(images.dtype)
    else:
        # PIL's BILINEAR transform samples a0 (x + 0.5) + a1 (y + 0.5) + a2 in double precision, the
        # convention of grid_sample with align_corners=False: theta = N A N^-1, N: x -> 2 x / W - 1.
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
    if ctx.fill is None:
        out = F.grid_sample(images, grid, mode=ctx.mode, padding_mode="zeros", align_corners=False)
    else:
        # Warp a channel of ones with the images: where it comes back below 1, the fill shows through.
        ones = images.new_ones(b, 1, h, w)
        warped = F.grid_sample(torch.cat([images, ones], 1), grid, mode=ctx.mode, align_corners=False)
        out = warped[:, :c] + (1.0 - warped[:, c:]) * ctx.fill
    if ctx.quantize and ctx.mode != "nearest":
        out = out.round()
    return out


# --------------------------------------------------------------------------------------------------
# Colour. Blends follow PIL's ``Image.blend(degenerate, image, factor)``: degenerate + factor * (image -
# degenerate), clipped to [0, 255] and truncated to 8 bits.


def _per_image(values: Tensor) -> Tensor:
    return values.view(-1, 1, 1, 1)


def _round_half_up(values: Tensor, quantize: bool) -> Tensor:
    """PIL's rounding of an intermediate 8-bit image, ``floor(v + 0.5)``.

    Float images get the same value through a straight-through estimator, so that float results stay
    within a level of their uint8 twins while gradients still flow as if nothing were rounded.
    """
    rounded = torch.floor(values + 0.5)
    return rounded if quantize else values + (rounded - values).detach()


def _blend(degenerate: Tensor, images: Tensor, factor: Tensor, quantize: bool) -> Tensor:
    out = (degenerate + _per_image(factor) * (images - degenerate)).clamp(0.0, 255.0)
    return out.floor() if quantize else out


def _apply_lut(images: Tensor, lut: Tensor) -> Tensor:
    """Map whole levels through a per-(image, channel) table ``lut`` of shape ``(B, C, 256)``."""
    b, c, h, w = images.shape
    index = images.reshape(b, c, h * w).long()
    return lut.to(images.dtype).gather(2, index).view(b, c, h, w)


def _histogram(levels: Tensor) -> Tensor:
    """Per-(image, channel) 256-bin histogram of whole levels. Returns ``(B, C, 256)`` int64."""
    b, c, h, w = levels.shape
    index = levels.reshape(b, c, h * w).long()
    hist = torch.zeros(b, c, 256, dtype=torch.int64, device=levels.device)
    return hist.scatter_add_(2, index, torch.ones_like(index))


def _grayscale(images: Tensor, quantize: bool) -> Tensor:
    """PIL's ``convert("L")``: ITU-R 601-2 luma, ``(19595 R + 38470 G + 7471 B + 2^15) >> 16`` in 8 bits.

    Returns ``(B, 1, H, W)``; a one-channel image is its own grey level.
    """
    if images.shape[1] == 1:
        return images
    r, g, b = images[:, 0:1], images[:, 1:2], images[:, 2:3]
    return _round_half_up((r * 19595.0 + g * 38470.0 + b * 7471.0) / 65536.0, quantize)


def invert(images: Tensor, magnitude: Tensor | None, ctx: KernelContext) -> Tensor:
    """PIL ``ImageOps.invert``: ``255 - x``."""
    return 255.0 - images


def solarize(images: Tensor, threshold: Tensor, ctx: KernelContext) -> Tensor:
    """PIL ``ImageOps.solarize``: levels at or above the per-image threshold are inverted."""
    # Compare whole levels so that a float image's 127.99998 counts as level 128, as its uint8 twin.
    levels = images if ctx.quantize else images.round()
    return torch.where(levels >= _per_image(threshold), 255.0 - images, images)


def posterize(images: Tensor, bits: Tensor, ctx: KernelContext) -> Tensor:
    """PIL ``ImageOps.posterize``: keep ``round(bits)`` high bits of each level (0 bits gives black)."""
    step = torch.pow(2.0, 8.0 - torch.round(bits)).to(images.dtype)
    levels = images if ctx.quantize else images.round()
    return torch.floor(levels / _per_image(step)) * _per_image(step)


def brightness(images: Tensor, factor: Tensor, ctx: KernelContext) -> Tensor:
    """PIL ``ImageEnhance.Brightness``: blend with black."""
    return _blend(torch.zeros_like(images), images, factor, ctx.quantize)


def color(images: Tensor, factor: Tensor, ctx: KernelContext) -> Tensor:
    """PIL ``ImageEnhance.Color``: blend with the image's own grey levels."""
    return _blend(_grayscale(images, ctx.quantize), images, factor, ctx.quantize)


def contrast(images: Tensor, factor: Tensor, ctx: KernelContext) -> Tensor:
    """PIL ``ImageEnhance.Contrast``: blend with the image's mean grey level (rounded to 8 bits by PIL)."""
    mean = _round_half_up(_grayscale(images, ctx.quantize).mean(dim=(1, 2, 3), keepdim=True), ctx.quantize)
    return _blend(mean.expand_as(images), images, factor, ctx.quantize)


_SMOOTH = torch.tensor([[1.0, 1.0, 1.0], [1.0, 5.0, 1.0], [1.0, 1.0, 1.0]]) / 13.0


def sharpness(images: Tensor, factor: Tensor, ctx: KernelContext) -> Tensor:
    """PIL ``ImageEnhance.Sharpness``: blend with ``ImageFilter.SMOOTH``; the 1-pixel border is kept."""
    _b, c, h, w = images.shape
    if h < 3 or w < 3:
        return images.clone()  # PIL's 3x3 filter keeps every pixel of so small an image.
    kernel = _SMOOTH.to(images).expand(c, 1, 3, 3)
    smooth = _round_half_up(F.conv2d(images, kernel, groups=c), ctx.quantize).clamp(0.0, 255.0)
    degenerate = images.clone()
    degenerate[:, :, 1:-1, 1:-1] = smooth
    return _blend(degenerate, images, factor, ctx.quantize)


def auto_contrast(images: Tensor, magnitude: Tensor | None, ctx: KernelContext) -> Tensor:
    """PIL ``ImageOps.autocontrast``: stretch each channel's [min, max] to [0, 255]; constant channels stay."""
    lo = images.amin(dim=(2, 3), keepdim=True)
    hi = images.amax(dim=(2, 3), keepdim=True)
    flat = hi <= lo
    if ctx.quantize:
        # PIL builds its table in double precision and truncates: do the same for bit-exact results.
        span = torch.where(flat, 1.0, hi - lo).double()
        # A tensor-by-tensor division: torch computes ``255.0 / span`` as 255 * (1 / span), an ulp off
        # PIL's quotient, which flips the truncation of some entries.
        scale = torch.full_like(span, 255.0) / span
        offset = -lo.double() * scale
        ramp = torch.arange(256, dtype=torch.float64, device=images.device)
        lut = (ramp * scale.squeeze(-1) + offset.squeeze(-1)).clamp(0.0, 255.0).floor()
        lut = torch.where(flat.squeeze(-1), ramp, lut)
        return _apply_lut(images, lut)
    scale = 255.0 / torch.where(flat, 1.0, hi - lo)
    return torch.where(flat, images, (images * scale - lo * scale).clamp(0.0, 255.0))


def equalize(images: Tensor, magnitude: Tensor | None, ctx: KernelContext) -> Tensor:
    """PIL ``ImageOps.equalize``: per-channel histogram equalisation with PIL's lookup table."""
    levels = images if ctx.quantize else images.round().clamp(0.0, 255.0)
    hist = _histogram(levels)
    # PIL: step = (total - count of the highest occupied level) // 255; lut[i] = (step // 2 + sum(h[:i])) // step.
    top = 255 - torch.flip(hist > 0, dims=(2,)).int().argmax(dim=2, keepdim=True)
    step = (hist.sum(dim=2, keepdim=True) - hist.gather(2, top)) // 255
    safe_step = step.clamp(min=1)
    before = torch.cumsum(hist, dim=2) - hist
    lut = ((safe_step // 2 + before) // safe_step).clamp(max=255)
    identity = torch.arange(256, device=images.device).expand_as(lut)
    lut = torch.where(step > 0, lut, identity)
    return _apply_lut(levels, lut)


def cutout_patch(
    images: Tensor, fraction: Tensor, centre_y: Tensor, centre_x: Tensor, ctx: KernelContext
) -> Tensor:
    """Paint a ``round(m H) x round(m W)`` patch centred on ``(centre_y, centre_x)`` with ``ctx.fill``.

    The patch covers rows ``[cy - ph // 2, cy - ph // 2 + ph)`` (likewise columns), clipped at the borders.
    """
    _, _, h, w = images.shape
    ph = torch.round(fraction * h).long()
    pw = torch.round(fraction * w).long()
    top = centre_y - torch.div(ph, 2, rounding_mode="floor")
    left = centre_x - torch.div(pw, 2, rounding_mode="floor")
    rows = torch.arange(h, device=images.device).view(1, h)
    cols = torch.arange(w, device=images.device).view(1, w)
    in_rows = (rows >= top[:, None]) & (rows < (top + ph)[:, None])
    in_cols = (cols >= left[:, None]) & (cols < (left + pw)[:, None])
    mask = (in_rows[:, :, None] & in_cols[:, None, :]).unsqueeze(1)
    fill = ctx.fill if ctx.fill is not None else images.new_zeros(())
    return torch.where(mask, fill.to(images.dtype), images)


def cutout(images: Tensor, fraction: Tensor, ctx: KernelContext) -> Tensor:
    """Cutout with centres drawn uniformly over the pixels from ``ctx.generator``."""
    b, _, h, w = images.shape
    u = torch.rand(b, 2, generator=ctx.generator, device=images.device)
    centre_y = (u[:, 0] * h).long().clamp_(max=h - 1)
    centre_x = (u[:, 1] * w).long().clamp_(max=w - 1)
    return cutout_patch(images, fraction, centre_y, centre_x, ctx)
