"""The table of the 15 augmentation operations with their kernels (the contract, section 1; docs/contract.md).

Names, ranges and signs come from the torch-free table :mod:`hba_augment._space` (their one home, so that
reading a schedule needs no torch); this module pairs each op with its identity, flags and kernels. Every
other module of the package reads ops from :data:`OPS` or from that table; nothing else lists them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from torch import Tensor

from .._space import NUM_COPIES, NUM_OPS, OP_RANGES
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


_RANGES = {op.name: op for op in OP_RANGES}


def _op(name: str, identity: float | None, kernel: Callable[..., Tensor], **kw: Any) -> OpSpec:
    """The op ``name`` with its range and sign from the torch-free table (their one home)."""
    r = _RANGES[name]
    return OpSpec(name, r.low, r.high, r.signed, identity, False, kernel, **kw)


def _geometric(name: str, matrix: Callable[[Tensor, int, int], Tensor]) -> OpSpec:
    def kernel(images: Tensor, magnitude: Tensor, ctx: K.KernelContext) -> Tensor:
        return K.affine(images, matrix(magnitude, images.shape[-2], images.shape[-1]), ctx)

    return _op(name, 0.0, kernel)._replace(geometric=True, matrix=matrix, integer=True)


OPS: tuple[OpSpec, ...] = (
    _geometric("ShearX", K.shear_x_matrix),
    _geometric("ShearY", K.shear_y_matrix),
    _geometric("TranslateX", K.translate_x_matrix),
    _geometric("TranslateY", K.translate_y_matrix),
    _geometric("Rotate", K.rotate_matrix),
    _op("AutoContrast", None, K.auto_contrast, integer=True, table=K.auto_contrast_table),
    _op("Invert", None, K.invert, integer=True, table=K.invert_table, fixed_table=True),
    _op("Equalize", None, K.equalize, integer=True, table=K.equalize_table),
    # Solarize and Posterize count strength (the contract, section 1): 0 is the identity, as for every other op.
    _op("Solarize", 0.0, K.solarize, integer=True, table=K.solarize_table, fixed_table=True),
    _op("Posterize", 0.0, K.posterize, integer=True, table=K.posterize_table, fixed_table=True),
    _op("Contrast", 1.0, K.contrast, integer=True, table=K.contrast_table),
    _op("Color", 1.0, K.color),
    _op("Brightness", 1.0, K.brightness, integer=True, table=K.brightness_table, fixed_table=True),
    _op("Sharpness", 1.0, K.sharpness),
    _op("Cutout", 0.0, K.cutout, integer=True),
)
if tuple(spec.name for spec in OPS) != tuple(_RANGES):  # the kernels must follow the canonical order
    raise RuntimeError("functional/_table.py lists the ops out of the canonical order of hba_augment/_space.py")

OP_NAMES: tuple[str, ...] = tuple(spec.name for spec in OPS)
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
