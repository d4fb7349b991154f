"""Bad input to the op kernels raises ValueError naming the op, the offending value and the allowed range.

Nothing is clamped silently (the contract, section 1). Decisions written down here:

- Ops without a magnitude (AutoContrast, Invert, Equalize) accept only ``None``; a number is an error.
- Images may be uint8 or any floating dtype; every other dtype (int*, uint16, bool) is an error.
"""

from __future__ import annotations

import math
import re

import pytest
import torch
from torchvision.transforms import InterpolationMode

F = pytest.importorskip("hba_augment.functional")
apply_op = F.apply_op
OPS = F.OPS

pytestmark = pytest.mark.usefixtures("torch_single_thread")

MAGNITUDE_OPS = [pytest.param(spec, id=spec.name) for spec in OPS if spec.has_magnitude]
NO_MAGNITUDE_OPS = [pytest.param(spec, id=spec.name) for spec in OPS if not spec.has_magnitude]
ALL_OPS = [pytest.param(spec, id=spec.name) for spec in OPS]


@pytest.fixture(scope="module")
def images() -> torch.Tensor:
    return torch.randint(0, 256, (4, 3, 8, 8), generator=torch.Generator().manual_seed(0), dtype=torch.uint8)


def names(spec, value_text: str | None = None, *, with_range: bool = True) -> str:
    """A regex requiring the op name, the value's text and (optionally) both ends of its range."""
    parts = [rf"(?=.*\b{re.escape(spec.name)}\b)"]
    if value_text is not None:
        parts.append(f"(?=.*{re.escape(value_text)})")
    if with_range:
        parts.append(f"(?=.*{re.escape(f'{spec.high:g}')})")
        if spec.low:
            parts.append(f"(?=.*{re.escape(f'{spec.low:g}')})")
    return "(?is)" + "".join(parts)


def above(spec) -> float:
    """A value above the range, exact in float32 so it prints the same from a tensor."""
    return math.ceil(spec.high) + 0.5


def below(spec) -> float:
    return -above(spec) if spec.signed else -0.5


# ----------------------------------------------------------------------------------------------------
# Magnitudes
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", MAGNITUDE_OPS)
def test_magnitude_above_range(spec, images):
    with pytest.raises(ValueError, match=names(spec, f"{above(spec):g}")):
        apply_op(images, spec.name, above(spec))


@pytest.mark.parametrize("spec", MAGNITUDE_OPS)
def test_magnitude_below_range(spec, images):
    with pytest.raises(ValueError, match=names(spec, f"{below(spec):g}")):
        apply_op(images, spec.name, below(spec))


@pytest.mark.parametrize("spec", MAGNITUDE_OPS)
def test_magnitude_just_outside_is_not_clamped(spec, images):
    for value in (spec.high + 1e-6, (-spec.high if spec.signed else spec.low) - 1e-6):
        with pytest.raises(ValueError, match=names(spec)):
            apply_op(images, spec.name, value)


@pytest.mark.parametrize("spec", [pytest.param(s, id=s.name) for s in OPS if s.has_magnitude and s.low > 0])
def test_magnitude_between_zero_and_low(spec, images):
    # Contrast & co. start at 0.1: 0.0625 is outside although it is positive.
    with pytest.raises(ValueError, match=names(spec, "0.0625")):
        apply_op(images, spec.name, 0.0625)


@pytest.mark.parametrize("spec", MAGNITUDE_OPS)
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
def test_magnitude_not_finite(spec, value, images):
    with pytest.raises(ValueError, match=names(spec, str(value))):
        apply_op(images, spec.name, value)


@pytest.mark.parametrize("spec", MAGNITUDE_OPS)
def test_range_ends_accepted(spec, images):
    ends = [spec.low, spec.high] + ([-spec.high, -spec.low] if spec.signed else [])
    for value in ends:
        apply_op(images, spec.name, value)
        # float32 holds e.g. 0.3 as 0.30000001: a tensor of the range's end must still be accepted.
        for dtype in (torch.float32, torch.float64):
            apply_op(images, spec.name, torch.full((len(images),), value, dtype=dtype))


@pytest.mark.parametrize("spec", MAGNITUDE_OPS)
def test_magnitude_missing(spec, images):
    with pytest.raises(ValueError, match=names(spec)):
        apply_op(images, spec.name, None)


@pytest.mark.parametrize("spec", NO_MAGNITUDE_OPS)
@pytest.mark.parametrize("value", [0.5, 0, torch.tensor([0.5, 0.5, 0.5, 0.5])], ids=["float", "int", "tensor"])
def test_magnitude_given_to_op_without_one(spec, value, images):
    with pytest.raises(ValueError, match=names(spec, with_range=False)):
        apply_op(images, spec.name, value)


@pytest.mark.parametrize("spec", MAGNITUDE_OPS)
@pytest.mark.parametrize("value", ["0.1", [0.1, 0.1, 0.1, 0.1], True], ids=["str", "list", "bool"])
def test_magnitude_of_wrong_type(spec, value, images):
    with pytest.raises(ValueError, match=names(spec, with_range=False)):
        apply_op(images, spec.name, value)


# ----------------------------------------------------------------------------------------------------
# Per-image magnitude tensors
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", MAGNITUDE_OPS)
@pytest.mark.parametrize("length", [3, 5])
def test_tensor_of_wrong_length(spec, length, images):
    magnitude = torch.full((length,), spec.high)
    with pytest.raises(ValueError, match=names(spec, str(length), with_range=False) + r"(?=.*\b4\b)"):
        apply_op(images, spec.name, magnitude)


@pytest.mark.parametrize("spec", MAGNITUDE_OPS)
def test_tensor_of_wrong_ndim(spec, images):
    with pytest.raises(ValueError, match=names(spec, with_range=False)):
        apply_op(images, spec.name, torch.full((4, 1), spec.high))
    with pytest.raises(ValueError, match=names(spec, with_range=False)):
        apply_op(images, spec.name, torch.full((2, 2), spec.high))


@pytest.mark.parametrize("spec", MAGNITUDE_OPS)
@pytest.mark.parametrize("where", ["above", "below", "nan"])
def test_tensor_with_one_bad_value(spec, where, images):
    bad = {"above": above(spec), "below": below(spec), "nan": math.nan}[where]
    magnitude = torch.tensor([spec.high, spec.low, bad, spec.high])
    with pytest.raises(ValueError, match=names(spec, f"{bad:g}")):
        apply_op(images, spec.name, magnitude)


# ----------------------------------------------------------------------------------------------------
# Ops, images, fill, interpolation
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["Foo", "", "shear_x", 15, -1, True, None], ids=repr)
def test_unknown_op(op, images):
    with pytest.raises(ValueError, match=re.escape(str(op)) if op != "" else "''"):
        apply_op(images, op, 0.1)


def test_op_by_index_and_name_agree(images):
    for index, spec in enumerate(OPS):
        magnitude = spec.high if spec.has_magnitude else None
        kwargs = {"generator": torch.Generator().manual_seed(0)} if spec.name == "Cutout" else {}
        by_name = apply_op(images, spec.name, magnitude, **kwargs)
        kwargs = {"generator": torch.Generator().manual_seed(0)} if spec.name == "Cutout" else {}
        assert torch.equal(by_name, apply_op(images, index, magnitude, **kwargs)), spec.name


@pytest.mark.parametrize("spec", ALL_OPS)
@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint16, torch.bool])
def test_unsupported_dtype(spec, dtype, images):
    bad = images.to(dtype)
    magnitude = spec.high if spec.has_magnitude else None
    with pytest.raises(ValueError, match=re.escape(str(dtype).removeprefix("torch."))):
        apply_op(bad, spec.name, magnitude)


@pytest.mark.parametrize("spec", ALL_OPS)
@pytest.mark.parametrize("shape", [(8,), (8, 8), (1, 2, 3, 8, 8)], ids=["1d", "2d", "5d"])
def test_wrong_ndim(spec, shape):
    bad = torch.zeros(shape, dtype=torch.uint8)
    magnitude = spec.high if spec.has_magnitude else None
    with pytest.raises(ValueError, match=re.escape(str(tuple(shape)))):
        apply_op(bad, spec.name, magnitude)


@pytest.mark.parametrize("spec", [pytest.param(s, id=s.name) for s in OPS if s.geometric or s.name == "Cutout"])
@pytest.mark.parametrize(
    ("dtype", "fill"),
    [(torch.uint8, (1, 2)), (torch.uint8, (1, 2, 3, 4)), (torch.uint8, 300), (torch.uint8, -1),
     (torch.float32, 128), (torch.float32, (0.5, 1.5, 0.5)), (torch.uint8, "black")],
    ids=["2-values", "4-values", "uint8-above-255", "negative", "float-above-1", "float-channel-above-1", "str"],
)
def test_bad_fill(spec, dtype, fill, images):
    batch = images.to(dtype) / 255 if dtype.is_floating_point else images
    with pytest.raises(ValueError, match="fill"):
        apply_op(batch, spec.name, spec.high, fill=fill)


@pytest.mark.parametrize("spec", [pytest.param(s, id=s.name) for s in OPS if s.geometric])
@pytest.mark.parametrize("mode", [InterpolationMode.BICUBIC, InterpolationMode.LANCZOS, "cubic"], ids=str)
def test_unsupported_interpolation(spec, mode, images):
    with pytest.raises(ValueError, match=r"(?i)interpolation"):
        apply_op(images, spec.name, spec.high, interpolation=mode)


@pytest.mark.parametrize(
    ("func", "args"),
    [("shear_x", (0.75,)), ("shear_y", (-0.75,)), ("translate_x", (0.5,)), ("translate_y", (-0.5,)), ("rotate", (30.5,)),
     ("solarize", (256.0,)), ("posterize", (9,)), ("contrast", (0.0,)), ("color", (2.0,)), ("brightness", (-1.0,)),
     ("sharpness", (math.nan,)), ("cutout", (0.25,))],
)
def test_named_functions_validate(func, args, images):
    with pytest.raises(ValueError, match=re.escape(f"{args[0]:g}")):
        getattr(F, func)(images, *args)


@pytest.mark.parametrize("spec", ALL_OPS)
@pytest.mark.parametrize("shape", [(2, 8, 8), (4, 4, 8, 8), (8, 8, 3)], ids=["2-channels", "4-channels", "hwc"])
def test_channels_other_than_1_or_3(spec, shape):
    # Every op refuses them, not only Contrast and Color (whose kernels broadcast 3 channels).
    bad = torch.zeros(shape, dtype=torch.uint8)
    magnitude = spec.high if spec.has_magnitude else None
    with pytest.raises(ValueError, match=re.escape(f"permitted channel values are 1 or 3), got shape {shape}")):
        apply_op(bad, spec.name, magnitude)


@pytest.mark.parametrize("spec", ALL_OPS)
@pytest.mark.parametrize("value", [255.0, -0.25, math.nan, math.inf], ids=["255", "negative", "nan", "inf"])
def test_float_values_outside_0_1(spec, value, images):
    bad = images.float() / 255
    bad[0, 0, 0, 0] = value
    magnitude = spec.high if spec.has_magnitude else None
    if math.isfinite(value):
        said = rf"float images must hold values in \[0, 1\], got values in \[{min(value, 0):g}, {max(value, 1):g}\]"
    else:  # not "[nan, nan]": the message counts what is wrong
        said = (r"float images must hold finite values in \[0, 1\], got "
                + ("1 NaN and 0 infinite" if math.isnan(value) else "0 NaN and 1 infinite") + rf" value\(s\) among {bad.numel()}")
    with pytest.raises(ValueError, match=said):
        apply_op(bad, spec.name, magnitude)
