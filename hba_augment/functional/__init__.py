"""Pure batched augmentation kernels (SPEC section 1) and PBA's sampling template (section 2).

Every function takes ``(B, C, H, W)`` or ``(C, H, W)`` tensors, uint8 in ``[0, 255]`` or float in
``[0, 1]``, on any device, and returns a new tensor of the same dtype, shape and device. Each image may
have its own magnitude. Results agree with the PIL calls named in :data:`OPS` (see the SPEC).
"""

from ._augment import DEFAULT_COUNT_PROBS, NUM_COPIES, augment, check_count_probs
from ._ops import (
    apply_op,
    auto_contrast,
    brightness,
    color,
    contrast,
    cutout,
    equalize,
    invert,
    posterize,
    rotate,
    sharpness,
    shear_x,
    shear_y,
    solarize,
    translate_x,
    translate_y,
)
from ._table import MAGNITUDE_OPS, NUM_OPS, OP_NAMES, OPS, OpSpec, op_index

__all__ = [
    "DEFAULT_COUNT_PROBS",
    "MAGNITUDE_OPS",
    "NUM_COPIES",
    "NUM_OPS",
    "OPS",
    "OP_NAMES",
    "OpSpec",
    "apply_op",
    "augment",
    "auto_contrast",
    "brightness",
    "check_count_probs",
    "color",
    "contrast",
    "cutout",
    "equalize",
    "invert",
    "op_index",
    "posterize",
    "rotate",
    "sharpness",
    "shear_x",
    "shear_y",
    "solarize",
    "translate_x",
    "translate_y",
]
