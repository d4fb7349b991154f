"""Argument checks and the conversions between the caller's images and the kernels' levels."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor
from torchvision.transforms import InterpolationMode

from ._kernels import KernelContext
from ._table import OpSpec

__all__ = [
    "check_images",
    "check_magnitude",
    "fill_levels",
    "from_levels",
    "interpolation_mode",
    "kernel_context",
    "to_levels",
]

_MODES = {InterpolationMode.NEAREST: "nearest", InterpolationMode.BILINEAR: "bilinear"}

Fill = float | int | Sequence[float] | None
# from_levels converts smaller tensors to uint8 directly.
_DIRECT_UINT8 = 1 << 13


def check_images(images: Tensor) -> tuple[Tensor, bool]:
    """Check that ``images`` is a ``(B, C, H, W)`` or ``(C, H, W)`` uint8 or float tensor.

    Returns:
        The images as ``(B, C, H, W)`` (a view), and whether a batch dimension was added.
    """
    if not isinstance(images, Tensor):
        raise TypeError(f"images must be a torch.Tensor, got {type(images).__name__}")
    if images.dtype != torch.uint8 and not images.dtype.is_floating_point:
        raise ValueError(f"images must be uint8 or floating point, got dtype {images.dtype}")
    if images.ndim == 3:
        return images.unsqueeze(0), True
    if images.ndim == 4:
        return images, False
    raise ValueError(f"images must have shape (B, C, H, W) or (C, H, W), got {tuple(images.shape)}")


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def to_levels(images: Tensor) -> Tensor:
    """uint8 ``[0, 255]`` or float ``[0, 1]`` images -> float levels ``[0, 255]``, a new contiguous tensor
    (one op from any layout: a PIL image arrives channels-last)."""
    if images.dtype == torch.uint8:
        return images.to(torch.float32, memory_format=torch.contiguous_format)
    return images.to(compute_dtype(images.dtype), memory_format=torch.contiguous_format) * 255.0


def from_levels(
    levels: Tensor, dtype: torch.dtype, memory_format: torch.memory_format = torch.preserve_format
) -> Tensor:
    """Inverse of :func:`to_levels`, in ``memory_format``.

    For uint8 the kernels already return whole levels in [0, 255] (they clamp and round like PIL), so
    there is no clamp here; the conversion of large tensors goes through int16 because torch's float ->
    uint8 conversion is several times slower than float -> int16 on CPUs (below about 8 Ki values the
    second call costs more than it saves).
    """
    if dtype == torch.uint8:
        if levels.numel() < _DIRECT_UINT8:
            return levels.to(torch.uint8, memory_format=memory_format)
        return levels.to(torch.int16).to(torch.uint8, memory_format=memory_format)
    return (levels / 255.0).to(dtype, memory_format=memory_format)


def interpolation_mode(interpolation: InterpolationMode | str) -> str:
    """Map NEAREST / BILINEAR (enum or its string value) to the grid-sample mode name."""
    if isinstance(interpolation, str):
        try:
            interpolation = InterpolationMode(interpolation.lower())
        except ValueError:
            pass
    if interpolation not in _MODES:
        raise ValueError(
            f"interpolation must be InterpolationMode.NEAREST or InterpolationMode.BILINEAR, got {interpolation!r}"
        )
    return _MODES[interpolation]


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
        raise ValueError(
            f"fill must have 1 or {channels} values (one per channel), got {len(values)}: {fill!r}"
        )
    top = 255.0 if uint8 else 1.0
    if any(not (0.0 <= v <= top) for v in values):
        raise ValueError(
            f"fill values must lie in [0, {top:g}] for {'uint8' if uint8 else 'float'} images, got {fill!r}"
        )
    if all(v == 0.0 for v in values):
        return None
    scale = 1.0 if uint8 else 255.0
    return torch.tensor(values, dtype=dtype, device=device).mul_(scale).view(1, channels, 1, 1)


def kernel_context(
    batch: Tensor, fill: Fill, interpolation: InterpolationMode | str, generator: torch.Generator | None
) -> KernelContext:
    """Validate ``fill`` and ``interpolation`` for the ``(B, C, H, W)`` images ``batch`` and return the
    kernels' context (quantize mode for uint8 images)."""
    uint8 = batch.dtype == torch.uint8
    return KernelContext(
        quantize=uint8,
        fill=fill_levels(fill, batch.shape[1], uint8, batch.device, compute_dtype(batch.dtype)),
        mode=interpolation_mode(interpolation),
        generator=generator,
    )


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
