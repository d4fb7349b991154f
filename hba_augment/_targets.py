"""Boxes, masks and key points that follow their image through :class:`~hba_augment.HBAPolicy` (issue 11).

The image's geometric ops (ShearX/Y, TranslateX/Y, Rotate) arrive as one composed PIL AFFINE matrix per
image (``augment(..., return_matrices=True)``): the map from an output point to an input point, in PIL's
continuous coordinates (pixel ``i`` covers ``[i, i + 1)``), which are torchvision's box and key point
coordinates too. Pointwise ops and Cutout do not move anything, so they leave targets unchanged.

- Boxes and key points: torchvision's own kernels, through ``v2.functional.perspective`` with the matrix as
  its ``coefficients`` (an affine map is a perspective one with ``g = h = 0``, and ``perspective`` is the
  one v2 kernel that takes a matrix instead of angle/translate/scale/shear). Boxes are clamped to the
  canvas as torchvision clamps them (the boxes' ``clamping_mode``); boxes that leave the image are kept,
  degenerate, for ``v2.SanitizeBoundingBoxes`` to drop, as with torchvision's geometric transforms.
- Masks: the image's own NEAREST warp (PIL's fixed-point source pixels), batched over the images, so
  that a mask label stays on the very pixel it labelled (torchvision's grid_sample NEAREST rounds ties the
  other way: 0-8% of the pixels for shears, where PIL's rounding lands on x.5); with several geometric ops
  in one image the mask is warped once with their composition, the image once per op.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torchvision import tv_tensors
from torchvision.transforms.v2 import functional as TF

from .functional import KernelContext, affine

__all__ = ["TARGETS", "move_target"]

#: The tv_tensors that follow the image's geometry (KeyPoints exists from torchvision 0.23).
TARGETS: tuple[type, ...] = tuple(
    getattr(tv_tensors, name) for name in ("BoundingBoxes", "Mask", "KeyPoints") if hasattr(tv_tensors, name)
)


def move_target(target: Tensor, matrices: Tensor, lead: tuple[int, ...], canvas: tuple[int, int], fill) -> Tensor:
    """Move ``target`` (a :data:`TARGETS` tv_tensor) with its image(s).

    Args:
        target: ``BoundingBoxes`` / ``KeyPoints`` of one image, or a ``Mask`` ``[*lead, ..., H, W]``.
        matrices: ``(N, 2, 3)`` float64 PIL AFFINE data of the ``N = prod(lead)`` images (see above).
        lead: the images' leading (batch) dimensions, ``()`` for one ``(C, H, W)`` image.
        canvas: the images' ``(H, W)``.
        fill: value of a mask's uncovered pixels (``None``: 0).

    Returns:
        The moved target, of the same tv_tensor type and metadata.

    Raises:
        ValueError: the target does not match the images (canvas, mask shape), or a bad mask fill.
        TypeError: boxes or key points with a batch of several images.
    """
    name = type(target).__name__
    if isinstance(target, tv_tensors.Mask):
        return tv_tensors.wrap(_move_masks(target.as_subclass(Tensor), matrices, lead, canvas, fill), like=target)
    if tuple(target.canvas_size) != tuple(canvas):
        raise ValueError(f"{name} of canvas_size {tuple(target.canvas_size)} given with an image of size {tuple(canvas)}")
    if matrices.shape[0] != 1:
        raise TypeError(
            f"{name} go with one image per sample; got a batch of {matrices.shape[0]} images, each with its own "
            "draws (call the policy on each sample, e.g. in the Dataset's transform)"
        )
    coefficients = matrices[0].flatten().tolist()
    if coefficients == [1.0, 0.0, 0.0, 0.0, 1.0, 0.0]:
        return target  # no geometric op: nothing moves (and nothing is clamped, as for a pointwise op)
    return TF.perspective(target, None, None, coefficients=[*coefficients, 0.0, 0.0])


def _move_masks(
    masks: Tensor, matrices: Tensor, lead: tuple[int, ...], canvas: tuple[int, int], fill
) -> Tensor:
    """Warp ``masks`` ``[*lead, ..., H, W]`` with each image's matrix, NEAREST, uncovered pixels = ``fill``."""
    height, width = canvas
    if masks.ndim < 2 + len(lead) or tuple(masks.shape[: len(lead)]) != lead or tuple(masks.shape[-2:]) != canvas:
        raise ValueError(
            f"a Mask must have shape [*batch, ..., H, W] = [{', '.join(map(str, lead))}{', ' if lead else ''}..., "
            f"{height}, {width}] to go with images [*batch, C, H, W] of batch {lead} and size {tuple(canvas)}, "
            f"got {tuple(masks.shape)}"
        )
    if masks.numel() == 0:
        return masks.clone()
    value = _mask_fill(fill, masks.dtype)
    # bool masks as bytes: padding and gathers want numbers.
    planes = masks.reshape(matrices.shape[0], -1, height, width)
    planes = planes.view(torch.uint8) if masks.dtype == torch.bool else planes
    ctx = KernelContext(
        quantize=False,
        fill=None if value == 0 else torch.full((1, 1, 1, 1), value, dtype=planes.dtype, device=planes.device),
        mode="nearest",
        generator=None,
    )
    out = affine(planes, matrices.to(planes.device), ctx)
    out = out.view(torch.bool) if masks.dtype == torch.bool else out
    return out.reshape(masks.shape)


def _mask_fill(fill, dtype: torch.dtype) -> float:
    """A mask's fill as one number (a label: a sequence must hold a single value)."""
    if fill is None:
        return 0
    if isinstance(fill, (list, tuple)):
        if len(fill) != 1:
            raise ValueError(f"the fill of a Mask is one label value, got {fill!r}")
        fill = fill[0]
    if dtype == torch.bool and fill not in (0, 1):
        raise ValueError(f"the fill of a bool Mask must be 0 or 1, got {fill!r}")
    if dtype.is_floating_point or float(fill).is_integer():
        return fill
    raise ValueError(f"the fill of an integer Mask must be a whole number, got {fill!r}")
