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
use ``kornia.geometry.transform.warp_affine``, which matches PIL given the pixel-centre conversion below.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from kornia.geometry.transform import warp_affine as _kornia_warp_affine
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
# Geometry. PIL's AFFINE data (a, b, c, d, e, f) maps an *output* point to the *input* point
# (a x + b y + c, d x + e y + f) in continuous coordinates, where pixel i covers [i, i + 1).
# kornia wants the forward (input -> output) map in pixel-index coordinates (pixel i centred on i).
# With T(v) = v + 0.5, the forward index map is T^-1 A^-1 T; the builders below write it out in closed
# form so that integer shifts stay exact in float32.


def _affine_rows(a: Tensor, b: Tensor, c: Tensor, d: Tensor, e: Tensor, f: Tensor) -> Tensor:
    return torch.stack([torch.stack([a, b, c], -1), torch.stack([d, e, f], -1)], -2)


def shear_x_matrix(shear: Tensor, height: int, width: int) -> Tensor:
    """Forward index-space matrix of PIL ``AFFINE (1, s, 0, 0, 1, 0)``. Returns ``(B, 2, 3)``."""
    one, zero = torch.ones_like(shear), torch.zeros_like(shear)
    return _affine_rows(one, -shear, -0.5 * shear, zero, one, zero)


def shear_y_matrix(shear: Tensor, height: int, width: int) -> Tensor:
    """Forward index-space matrix of PIL ``AFFINE (1, 0, 0, s, 1, 0)``. Returns ``(B, 2, 3)``."""
    one, zero = torch.ones_like(shear), torch.zeros_like(shear)
    return _affine_rows(one, zero, zero, -shear, one, -0.5 * shear)


def translate_x_matrix(fraction: Tensor, height: int, width: int) -> Tensor:
    """PIL ``AFFINE (1, 0, round(m * W), 0, 1, 0)``: a positive magnitude moves the content left."""
    one, zero = torch.ones_like(fraction), torch.zeros_like(fraction)
    return _affine_rows(one, zero, -torch.round(fraction * width), zero, one, zero)


def translate_y_matrix(fraction: Tensor, height: int, width: int) -> Tensor:
    """PIL ``AFFINE (1, 0, 0, 0, 1, round(m * H))``: a positive magnitude moves the content up."""
    one, zero = torch.ones_like(fraction), torch.zeros_like(fraction)
    return _affine_rows(one, zero, zero, zero, one, -torch.round(fraction * height))


def rotate_matrix(degrees: Tensor, height: int, width: int) -> Tensor:
    """PIL ``rotate(degrees)``: counter-clockwise about the image centre. Returns ``(B, 2, 3)``."""
    theta = degrees * (math.pi / 180.0)
    cos, sin = torch.cos(theta), torch.sin(theta)
    # PIL rotates about (W/2, H/2) in continuous coordinates, i.e. ((W-1)/2, (H-1)/2) in index space.
    cx, cy = (width - 1) / 2.0, (height - 1) / 2.0
    return _affine_rows(cos, sin, cx - cos * cx - sin * cy, -sin, cos, cy + sin * cx - cos * cy)


def affine(images: Tensor, matrix: Tensor, ctx: KernelContext) -> Tensor:
    """Warp each image with its own forward index-space ``matrix`` ``(B, 2, 3)``.

    Uncovered pixels take ``ctx.fill``. Returns ``(B, C, H, W)`` levels.
    """
    height, width = images.shape[-2:]
    matrix = matrix.to(images.dtype)
    if ctx.fill is None:
        out = _kornia_warp_affine(images, matrix, (height, width), mode=ctx.mode, padding_mode="zeros")
    else:
        out = _kornia_warp_affine(
            images, matrix, (height, width), mode=ctx.mode, padding_mode="fill", fill_value=ctx.fill.flatten()
        )
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
