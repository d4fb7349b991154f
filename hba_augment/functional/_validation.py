"""Argument checks: images, channels, float ranges, magnitudes, ``fill`` and ``interpolation``.

The conversions between the caller's images and the kernels' levels, and the kernels' context, are in
:mod:`._levels`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor
from torchvision.transforms import InterpolationMode

from ._cache import constant_cache
from ._table import OpSpec

__all__ = [
    "CHANNELS",
    "check_channels",
    "check_float_range",
    "check_images",
    "check_magnitude",
    "fill_levels",
    "interpolation_mode",
    "kernel_arguments",
]

_MODES = {InterpolationMode.NEAREST: "nearest", InterpolationMode.BILINEAR: "bilinear"}
# Pillow's resampling constants (PIL.Image.Resampling) for the two modes, as torchvision maps them.
_PIL_RESAMPLE = {0: InterpolationMode.NEAREST, 2: InterpolationMode.BILINEAR}

Fill = float | int | Sequence[float] | None


#: Channel counts the ops are defined for (grey and RGB, as torchvision's AutoAugment).
CHANNELS = (1, 3)


def check_images(images: Tensor) -> tuple[Tensor, bool]:
    """Check that ``images`` is a ``(B, C, H, W)`` or ``(C, H, W)`` uint8 or float tensor with 1 or 3
    channels (float: values in ``[0, 1]``, checked on CPU, see :func:`check_float_range`).

    Returns:
        The images as ``(B, C, H, W)`` (a view), and whether a batch dimension was added.

    Raises:
        TypeError: ``images`` is not a tensor (a numpy array, say).
        ValueError: bad dtype, number of dimensions or channels, or float values outside ``[0, 1]``.
    """
    if not isinstance(images, Tensor):
        raise TypeError(f"images must be a torch.Tensor, got {type(images).__module__}.{type(images).__name__}")
    if images.dtype != torch.uint8 and not images.dtype.is_floating_point:
        raise ValueError(f"images must be uint8 or floating point, got dtype {images.dtype}")
    if images.ndim not in (3, 4):
        raise ValueError(f"images must have shape (B, C, H, W) or (C, H, W), got {tuple(images.shape)}")
    check_channels(images.shape)
    check_float_range(images)
    if images.ndim == 3:
        return images.unsqueeze(0), True
    return images, False


def check_channels(shape: Sequence[int], what: str = "images") -> None:
    """Raise ``ValueError`` unless ``shape`` (``[..., C, H, W]``) has 1 or 3 channels, naming the shape.

    Contrast and Color are defined for grey and RGB images only; any other count used to fail only when
    one of them was drawn, and a channels-last ``(H, W, C)`` tensor was read as ``C = H`` channels.
    """
    channels = shape[-3]
    if channels in CHANNELS:
        return
    hint = ""
    if shape[-1] in CHANNELS:
        order = ", ".join(map(str, (*range(len(shape) - 3), len(shape) - 1, len(shape) - 3, len(shape) - 2)))
        hint = f" It looks channels-last ([..., H, W, C]): move the channels first, x.permute({order})."
    raise ValueError(
        f"{what} must have shape [..., C, H, W] with C = 1 or 3 (permitted channel values are 1 or 3), "
        f"got shape {tuple(shape)}.{hint}"
    )


def check_float_range(images: Tensor) -> None:
    """Raise ``ValueError`` if float ``images`` on the CPU hold values outside ``[0, 1]``, NaN or inf.

    A float image on [0, 255] (``ToDtype(torch.float32)`` without ``scale=True``) would otherwise come
    out silently corrupted (Invert gives -254..1). On the CPU the check is one pass over the pixels
    (``benchmarks/throughput.py`` times it: rows "float range check alone"). On other devices nothing is checked:
    reading the result back would cost a host synchronisation on every call, the one thing the GPU path
    avoids; there, values outside ``[0, 1]`` give undefined results. Nor is anything checked while
    ``torch.compile`` traces a call: a host read would break its graph.
    """
    if (not images.dtype.is_floating_point or images.device.type != "cpu" or images.numel() == 0
            or torch.compiler.is_compiling()):
        return
    low, high = torch.aminmax(images.detach())
    low, high = low.item(), high.item()
    if low >= 0.0 and high <= 1.0:  # NaN fails both comparisons
        return
    if not (math.isfinite(low) and math.isfinite(high)):
        # aminmax gives NaN as soon as one pixel is NaN: count what is wrong instead of printing [nan, nan].
        nans, infs = int(torch.isnan(images).sum()), int(torch.isinf(images).sum())
        raise ValueError(f"float images must hold finite values in [0, 1], got {nans} NaN and {infs} infinite "
                         f"value(s) among {images.numel()}")
    hint = ""
    if high > 1.0 and high <= 255.0 and low >= 0.0:
        hint = " (values on [0, 255]: convert with v2.ToDtype(torch.float32, scale=True) or divide by 255)"
    raise ValueError(
        f"float images must hold values in [0, 1], got values in [{low:g}, {high:g}]{hint}"
    )


def interpolation_mode(interpolation: InterpolationMode | str | int) -> str:
    """Map NEAREST / BILINEAR to the grid-sample mode name.

    Accepts what torchvision accepts for them: the ``InterpolationMode`` member, its string value, and
    Pillow's integer constants (``PIL.Image.NEAREST`` = 0, ``PIL.Image.BILINEAR`` = 2, and the
    ``PIL.Image.Resampling`` members, which are those integers).

    Raises:
        ValueError: any other mode (BICUBIC, LANCZOS, ...), naming it.
    """
    mode = interpolation
    if isinstance(mode, str) and not isinstance(mode, InterpolationMode):
        try:
            mode = InterpolationMode(mode.lower())
        except ValueError:
            pass
    elif isinstance(mode, int) and not isinstance(mode, bool):
        mode = _PIL_RESAMPLE.get(int(mode), mode)
    if mode not in _MODES:
        raise ValueError(
            "interpolation must be InterpolationMode.NEAREST or InterpolationMode.BILINEAR (or Pillow's "
            f"NEAREST = 0 / BILINEAR = 2), got {interpolation!r}"
        )
    return _MODES[mode]


def fill_levels(
    fill: Fill, channels: int, uint8: bool, device: torch.device, dtype: torch.dtype
) -> Tensor | None:
    """Validate ``fill`` (on the images' own scale) and return it as levels of shape ``(1, C, 1, 1)``.

    ``None`` (and an all-zero fill) return ``None``, the kernels' cheap default of 0.
    """
    if fill is None:
        return None
    if isinstance(fill, Tensor):
        values = [float(v) for v in fill.flatten().tolist()]
    elif isinstance(fill, (int, float)) and not isinstance(fill, bool):
        values = [float(fill)]
    elif isinstance(fill, Sequence) and not isinstance(fill, str):
        values = [float(v) for v in fill]
    else:
        raise ValueError(f"fill must be None, a number or one number per channel, got {fill!r}")
    if len(values) == 1:
        values = values * channels
    if len(values) != channels:
        per_channel = "one value" if channels == 1 else f"one value or one per channel ({channels})"
        raise ValueError(
            f"fill must have {per_channel} for images of {channels} channel{'s' * (channels > 1)}, "
            f"got {len(values)}: {fill!r}"
        )
    top = 255.0 if uint8 else 1.0
    if any(not (0.0 <= v <= top) for v in values):
        raise ValueError(
            f"fill values must lie in [0, {top:g}] for {'uint8' if uint8 else 'float'} images, got {fill!r}: "
            "fill is on the image's own scale (0..255 for uint8 and PIL images, 0..1 for float ones), and "
            "values outside it would be written as they are"
        )
    if all(v == 0.0 for v in values):
        return None
    return _fill_tensor(tuple(values), 1.0 if uint8 else 255.0, device, dtype)


def kernel_arguments(
    fill: Fill, interpolation: InterpolationMode | str | int, channels: int, uint8: bool, device: torch.device,
    dtype: torch.dtype,
) -> tuple[Tensor | None, str]:
    """:func:`fill_levels` and :func:`interpolation_mode` in one call, in that order: the checks of
    ``_levels.kernel_context``, made with one trip into this module."""
    return fill_levels(fill, channels, uint8, device, dtype), interpolation_mode(interpolation)


@constant_cache(32)
def _fill_tensor(values: tuple[float, ...], scale: float, device: torch.device, dtype: torch.dtype) -> Tensor:
    """The fill as levels ``(1, C, 1, 1)`` on ``device``, kept per value (the kernels only read it): a copy
    from the host on every call would synchronise a GPU."""
    return torch.tensor(values, dtype=dtype, device=device).mul_(scale).view(1, len(values), 1, 1)


def _range_text(spec: OpSpec) -> str:
    if spec.signed:
        return f"[-{spec.high:g}, {spec.high:g}]"
    return f"[{spec.low:g}, {spec.high:g}]"


def check_magnitude(
    spec: OpSpec, magnitude: float | Tensor | None, batch: int, device: torch.device
) -> Tensor | None:
    """Validate ``magnitude`` for ``spec`` and return it as a ``(B,)`` float tensor on ``device``.

    Signed ops accept ``[-high, high]``. Nothing is clamped: any value outside the range, NaN or inf,
    or a tensor of the wrong shape, raises ``ValueError`` naming the op, the value and the range.
    """
    if not spec.has_magnitude:
        if magnitude is not None:
            raise ValueError(f"{spec.name} takes no magnitude (expected None), got {magnitude!r}")
        return None
    if magnitude is None:
        raise ValueError(f"{spec.name} needs a magnitude in {_range_text(spec)}, got None")
    low = -spec.high if spec.signed else spec.low
    if isinstance(magnitude, Tensor):
        if magnitude.ndim == 0:
            magnitude = magnitude.reshape(1).expand(batch)
        elif magnitude.shape != (batch,):
            raise ValueError(
                f"{spec.name}: magnitude tensor must have shape () or ({batch},) (one per image), "
                f"got {tuple(magnitude.shape)}"
            )
        if magnitude.dtype == torch.bool or magnitude.is_complex():
            raise ValueError(f"{spec.name}: magnitude must be real numbers, got dtype {magnitude.dtype}")
        values = magnitude.to(device=device, dtype=torch.float32)
        bad = ~((values >= low) & (values <= spec.high))  # NaN compares False, so it is caught too.
        if batch and bool(bad.any()):
            first = magnitude[bad.nonzero()[0, 0]].item()
            raise ValueError(f"{spec.name}: magnitude {first!r} is outside the range {_range_text(spec)}")
        return values
    if isinstance(magnitude, bool) or not isinstance(magnitude, (int, float)):
        raise ValueError(f"{spec.name}: magnitude must be a number or a tensor, got {magnitude!r}")
    if math.isnan(magnitude) or not (low <= magnitude <= spec.high):
        raise ValueError(f"{spec.name}: magnitude {magnitude!r} is outside the range {_range_text(spec)}")
    return torch.full((batch,), float(magnitude), dtype=torch.float32, device=device)
