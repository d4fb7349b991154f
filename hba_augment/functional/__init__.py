"""Pure batched augmentation kernels (SPEC section 1) and PBA's sampling template (section 2).

Every function takes ``(B, C, H, W)`` or ``(C, H, W)`` tensors, uint8 in ``[0, 255]`` or float in
``[0, 1]``, on any device, and returns a new tensor of the same dtype, shape and device. Each image may
have its own magnitude. Results agree with the PIL calls named in :data:`OPS` (see the SPEC).

This module is the only door into ``functional/``: the rest of the package imports what it needs from
here, never from the private modules (``tests/test_architecture.py`` checks it).
"""

from ._augment import (
    DEFAULT_COUNT_PROBS,
    Drawn,
    augment,
    augment_drawn,
    check_compile,
    check_count_probs,
    draw_one,
)
from ._cache import cache_scope
from ._kernels import KernelContext, affine
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
from ._pil import PIL_MODES, augment_pil, check_pil_mode
from ._table import MAGNITUDE_OPS, NUM_COPIES, NUM_OPS, OP_NAMES, OPS, OpSpec, op_index
from ._validation import CHANNELS, check_channels, interpolation_mode

__all__ = [
    "CHANNELS",
    "DEFAULT_COUNT_PROBS",
    "MAGNITUDE_OPS",
    "NUM_COPIES",
    "NUM_OPS",
    "OPS",
    "OP_NAMES",
    "PIL_MODES",
    "Drawn",
    "KernelContext",
    "OpSpec",
    "affine",
    "apply_op",
    "augment",
    "augment_drawn",
    "augment_pil",
    "auto_contrast",
    "brightness",
    "cache_scope",
    "check_channels",
    "check_compile",
    "check_count_probs",
    "check_pil_mode",
    "color",
    "contrast",
    "cutout",
    "draw_one",
    "equalize",
    "interpolation_mode",
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
