"""Levels, the kernels' working scale, and the kernels' context.

The kernels compute on float levels in ``[0, 255]`` (uint8 images as they are, PIL's arithmetic): these
functions convert the caller's images to levels and back, and build the :class:`~._kernels.KernelContext`
of a call from its checked arguments (:mod:`._validation` checks them).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torchvision.transforms import InterpolationMode

from ._kernels import KernelContext
from ._validation import Fill, kernel_arguments

__all__ = ["compute_dtype", "from_levels", "kernel_context", "to_levels"]

# from_levels converts smaller tensors to uint8 directly.
_DIRECT_UINT8 = 1 << 13


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The float dtype the kernels compute in for images of ``dtype`` (float64 stays float64)."""
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
    there is no clamp here; on CPUs the conversion of large tensors goes through int16 because torch's
    float -> uint8 conversion is several times slower than float -> int16 there (below about 8 Ki values
    the second call costs more than it saves). Other devices convert directly: one pass over the pixels
    instead of two.
    """
    if dtype == torch.uint8:
        if levels.numel() < _DIRECT_UINT8 or levels.device.type != "cpu":
            return levels.to(torch.uint8, memory_format=memory_format)
        return levels.to(torch.int16).to(torch.uint8, memory_format=memory_format)
    return (levels / 255.0).to(dtype, memory_format=memory_format)


def kernel_context(
    batch: Tensor, fill: Fill, interpolation: InterpolationMode | str, generator: torch.Generator | None
) -> KernelContext:
    """Validate ``fill`` and ``interpolation`` for the ``(B, C, H, W)`` images ``batch`` and return the
    kernels' context (quantize mode for uint8 images)."""
    uint8 = batch.dtype == torch.uint8
    levels, mode = kernel_arguments(fill, interpolation, batch.shape[1], uint8, batch.device, compute_dtype(batch.dtype))
    return KernelContext(quantize=uint8, fill=levels, mode=mode, generator=generator)
