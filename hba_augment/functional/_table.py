"""The one table of the 15 augmentation operations (SPEC section 1).

Every other module reads op names, ranges, flags and kernels from :data:`OPS`; nothing else lists them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from torch import Tensor

from . import _kernels as K

__all__ = ["MAGNITUDE_OPS", "NUM_COPIES", "NUM_OPS", "OPS", "OP_NAMES", "OpSpec", "op_index"]


class OpSpec(NamedTuple):
    """One operation of the search space.

    Attributes:
        name: canonical name, e.g. ``"ShearX"``.
        low: lower end of the magnitude range, or ``None`` for ops without a magnitude.
        high: upper end of the magnitude range, or ``None``.
        signed: whether the magnitude is negated with probability 0.5 when the op is sampled
            (and, for :func:`~hba_augment.functional.apply_op`, whether ``[-high, -low]`` is valid too).
        identity: the magnitude at which the op leaves every image unchanged, or ``None`` if no
            magnitude in the range does that.
        geometric: whether the op moves pixels (uses ``interpolation`` and ``fill``).
        kernel: ``kernel(levels (B, C, H, W), magnitude (B,) or None, ctx) -> levels``, see ``_kernels``.
        matrix: for geometric ops, ``matrix(magnitude (B,), height, width) -> (B, 2, 3)``, PIL's AFFINE
            data per image, so that callers can merge several geometric ops into one warp.
        integer: the kernel also takes uint8 levels (quantize mode) and returns uint8 levels with the
            same values, so uint8 images skip the round trip through float (geometric ops: NEAREST only).
        table: for pointwise ops, ``table(levels (B, C, H, W), magnitude (B,) or None, ctx) -> (B, C or 1,
            1, 256)``: the whole level each of the 256 levels becomes in each image (quantize mode), so
            that callers can merge several pointwise ops into one lookup.
        fixed_table: the table depends on the magnitude alone, not on the image, so a caller may compute
            it once per policy entry (with any images of the right batch size and device).
    """

    name: str
    low: float | None
    high: float | None
    signed: bool
    identity: float | None
    geometric: bool
    kernel: Callable[[Tensor, Tensor | None, K.KernelContext], Tensor]
    matrix: Callable[[Tensor, int, int], Tensor] | None = None
    integer: bool = False
    table: Callable[[Tensor, Tensor | None, K.KernelContext], Tensor] | None = None
    fixed_table: bool = False

    @property
    def has_magnitude(self) -> bool:
        return self.low is not None

    def takes_uint8(self, mode: str) -> bool:
        """Whether the kernel runs on uint8 levels with interpolation ``mode`` (see ``integer``)."""
        return self.integer and (not self.geometric or mode == "nearest")


def _geometric(name: str, high: float, matrix: Callable[[Tensor, int, int], Tensor]) -> OpSpec:
    def kernel(images: Tensor, magnitude: Tensor, ctx: K.KernelContext) -> Tensor:
        return K.affine(images, matrix(magnitude, images.shape[-2], images.shape[-1]), ctx)

    return OpSpec(name, 0.0, high, True, 0.0, True, kernel, matrix, integer=True)


OPS: tuple[OpSpec, ...] = (
    _geometric("ShearX", 0.3, K.shear_x_matrix),
    _geometric("ShearY", 0.3, K.shear_y_matrix),
    _geometric("TranslateX", 0.45, K.translate_x_matrix),
    _geometric("TranslateY", 0.45, K.translate_y_matrix),
    _geometric("Rotate", 30.0, K.rotate_matrix),
    OpSpec("AutoContrast", None, None, False, None, False, K.auto_contrast, integer=True, table=K.auto_contrast_table),
    OpSpec("Invert", None, None, False, None, False, K.invert, integer=True, table=K.invert_table, fixed_table=True),
    OpSpec("Equalize", None, None, False, None, False, K.equalize, integer=True, table=K.equalize_table),
    # Solarize and Posterize count strength (SPEC section 1): 0 is the identity, as for every other op.
    OpSpec("Solarize", 0.0, 255.0, False, 0.0, False, K.solarize, integer=True, table=K.solarize_table, fixed_table=True),
    OpSpec("Posterize", 0.0, 8.0, False, 0.0, False, K.posterize, integer=True, table=K.posterize_table, fixed_table=True),
    OpSpec("Contrast", 0.1, 1.9, False, 1.0, False, K.contrast, integer=True, table=K.contrast_table),
    OpSpec("Color", 0.1, 1.9, False, 1.0, False, K.color),
    OpSpec("Brightness", 0.1, 1.9, False, 1.0, False, K.brightness, integer=True, table=K.brightness_table, fixed_table=True),
    OpSpec("Sharpness", 0.1, 1.9, False, 1.0, False, K.sharpness),
    OpSpec("Cutout", 0.0, 0.2, False, 0.0, False, K.cutout, integer=True),
)

OP_NAMES: tuple[str, ...] = tuple(spec.name for spec in OPS)
NUM_OPS: int = len(OPS)
#: Each op appears in a policy twice (PBA's "two copies"), making 30 slots: the search space's shape
#: ``(NUM_COPIES, NUM_OPS)``.
NUM_COPIES: int = 2
#: Indices (into :data:`OPS`) of the ops that take a magnitude, in canonical order.
MAGNITUDE_OPS: tuple[int, ...] = tuple(i for i, spec in enumerate(OPS) if spec.has_magnitude)

_INDEX = {name: i for i, name in enumerate(OP_NAMES)}


def op_index(op: str | int) -> int:
    """Return the canonical index of ``op`` (a name or an index).

    Raises:
        ValueError: if ``op`` is not one of the 15 op names or indices.
    """
    if isinstance(op, bool):  # bool is an int; True is never meant as an op index.
        raise ValueError(f"Unknown op {op!r}; expected one of {list(OP_NAMES)}")
    if isinstance(op, int):
        if 0 <= op < NUM_OPS:
            return op
        raise ValueError(f"Unknown op index {op}; expected 0..{NUM_OPS - 1}")
    if isinstance(op, str) and op in _INDEX:
        return _INDEX[op]
    raise ValueError(f"Unknown op {op!r}; expected one of {list(OP_NAMES)}")
