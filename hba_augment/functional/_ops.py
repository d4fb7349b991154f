"""``apply_op`` and one public function per op, all over the kernels of :data:`OPS`."""

from __future__ import annotations

import torch
from torch import Tensor
from torchvision.transforms import InterpolationMode

from ._levels import from_levels, kernel_context, to_levels
from ._table import OPS, op_index
from ._validation import Fill, check_images, check_magnitude

__all__ = [
    "apply_op",
    "auto_contrast",
    "brightness",
    "color",
    "contrast",
    "cutout",
    "equalize",
    "invert",
    "posterize",
    "rotate",
    "sharpness",
    "shear_x",
    "shear_y",
    "solarize",
    "translate_x",
    "translate_y",
]

Magnitude = float | Tensor


def apply_op(
    images: Tensor,
    op: str | int,
    magnitude: Magnitude | None = None,
    *,
    fill: Fill = None,
    interpolation: InterpolationMode = InterpolationMode.NEAREST,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Apply one of the 15 ops to every image, each image with its own magnitude.

    Args:
        images: ``(B, C, H, W)`` or ``(C, H, W)``, uint8 in ``[0, 255]`` or float in ``[0, 1]``, any device.
        op: an op name from :data:`OP_NAMES` or its index.
        magnitude: a number or a ``(B,)`` tensor in the op's range (``[-high, high]`` for signed ops),
            in the op's own units (SPEC section 1); ``None`` for AutoContrast, Invert and Equalize.
        fill: value of uncovered pixels (geometric ops) and of the Cutout patch, on the images' scale:
            ``None`` (0), a number, or one number per channel.
        interpolation: ``InterpolationMode.NEAREST`` (default, as torchvision's AutoAugment) or ``BILINEAR``.
        generator: random stream for Cutout's centres; ``None`` uses torch's default for the device.

    Returns:
        A new tensor with the dtype, shape and device of ``images``.

    Raises:
        ValueError: unknown op, magnitude outside the range / NaN / wrong shape, unsupported dtype or shape,
            bad ``fill`` or ``interpolation``.
    """
    spec = OPS[op_index(op)]
    batch, unbatched = check_images(images)
    values = check_magnitude(spec, magnitude, batch.shape[0], batch.device)
    ctx = kernel_context(batch, fill, interpolation, generator)
    if batch.numel() == 0:  # no images, or images without pixels: unchanged, as in torchvision
        out = batch.clone()
    elif ctx.quantize and spec.takes_uint8(ctx.mode):
        out = spec.kernel(batch, values, ctx)  # uint8 levels in and out (OpSpec.integer)
    else:
        out = from_levels(spec.kernel(to_levels(batch), values, ctx), images.dtype)
    return out.squeeze(0) if unbatched else out


def shear_x(
    images: Tensor,
    magnitude: Magnitude,
    *,
    fill: Fill = None,
    interpolation: InterpolationMode = InterpolationMode.NEAREST,
) -> Tensor:
    """ShearX: PIL ``AFFINE (1, s, 0, 0, 1, 0)``, ``s`` in [-0.3, 0.3]. See :func:`apply_op`."""
    return apply_op(images, "ShearX", magnitude, fill=fill, interpolation=interpolation)


def shear_y(
    images: Tensor,
    magnitude: Magnitude,
    *,
    fill: Fill = None,
    interpolation: InterpolationMode = InterpolationMode.NEAREST,
) -> Tensor:
    """ShearY: PIL ``AFFINE (1, 0, 0, s, 1, 0)``, ``s`` in [-0.3, 0.3]. See :func:`apply_op`."""
    return apply_op(images, "ShearY", magnitude, fill=fill, interpolation=interpolation)


def translate_x(
    images: Tensor,
    magnitude: Magnitude,
    *,
    fill: Fill = None,
    interpolation: InterpolationMode = InterpolationMode.NEAREST,
) -> Tensor:
    """TranslateX by ``round(m * W)`` pixels, ``m`` in [-0.45, 0.45]; ``m > 0`` moves content left
    (PIL ``AFFINE (1, 0, round(m W), 0, 1, 0)``, as PBA). See :func:`apply_op`."""
    return apply_op(images, "TranslateX", magnitude, fill=fill, interpolation=interpolation)


def translate_y(
    images: Tensor,
    magnitude: Magnitude,
    *,
    fill: Fill = None,
    interpolation: InterpolationMode = InterpolationMode.NEAREST,
) -> Tensor:
    """TranslateY by ``round(m * H)`` pixels, ``m`` in [-0.45, 0.45]; ``m > 0`` moves content up.
    See :func:`apply_op`."""
    return apply_op(images, "TranslateY", magnitude, fill=fill, interpolation=interpolation)


def rotate(
    images: Tensor,
    magnitude: Magnitude,
    *,
    fill: Fill = None,
    interpolation: InterpolationMode = InterpolationMode.NEAREST,
) -> Tensor:
    """Rotate counter-clockwise by ``m`` degrees about the centre (PIL ``rotate``), ``m`` in [-30, 30].
    See :func:`apply_op`."""
    return apply_op(images, "Rotate", magnitude, fill=fill, interpolation=interpolation)


def auto_contrast(images: Tensor) -> Tensor:
    """Per-channel min-max stretch to the full range (PIL ``ImageOps.autocontrast``)."""
    return apply_op(images, "AutoContrast")


def invert(images: Tensor) -> Tensor:
    """``255 - x`` on the 8-bit scale (PIL ``ImageOps.invert``)."""
    return apply_op(images, "Invert")


def equalize(images: Tensor) -> Tensor:
    """Per-channel histogram equalisation with PIL's lookup table (``ImageOps.equalize``)."""
    return apply_op(images, "Equalize")


def solarize(images: Tensor, strength: Magnitude) -> Tensor:
    """Invert levels ``>= 256 - strength`` (8-bit scale), ``strength`` in [0, 255]: PIL
    ``ImageOps.solarize(img, 256 - strength)``; 0 changes nothing, 255 inverts every level but 0."""
    return apply_op(images, "Solarize", strength)


def posterize(images: Tensor, strength: Magnitude) -> Tensor:
    """Keep ``8 - round(strength)`` high bits, ``strength`` in [0, 8]: PIL ``ImageOps.posterize(img, 8 -
    round(strength))``; 0 changes nothing, 8 gives black."""
    return apply_op(images, "Posterize", strength)


def contrast(images: Tensor, factor: Magnitude) -> Tensor:
    """PIL ``ImageEnhance.Contrast(img).enhance(factor)``, ``factor`` in [0.1, 1.9]."""
    return apply_op(images, "Contrast", factor)


def color(images: Tensor, factor: Magnitude) -> Tensor:
    """PIL ``ImageEnhance.Color(img).enhance(factor)``, ``factor`` in [0.1, 1.9]."""
    return apply_op(images, "Color", factor)


def brightness(images: Tensor, factor: Magnitude) -> Tensor:
    """PIL ``ImageEnhance.Brightness(img).enhance(factor)``, ``factor`` in [0.1, 1.9]."""
    return apply_op(images, "Brightness", factor)


def sharpness(images: Tensor, factor: Magnitude) -> Tensor:
    """PIL ``ImageEnhance.Sharpness(img).enhance(factor)``, ``factor`` in [0.1, 1.9]."""
    return apply_op(images, "Sharpness", factor)


def cutout(
    images: Tensor, magnitude: Magnitude, *, fill: Fill = None, generator: torch.Generator | None = None
) -> Tensor:
    """Paint a ``round(m H) x round(m W)`` patch (``m`` in [0, 0.2]) centred on a uniformly drawn pixel,
    clipped at the borders, with ``fill``. See :func:`apply_op`."""
    return apply_op(images, "Cutout", magnitude, fill=fill, generator=generator)
