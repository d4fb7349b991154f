"""Properties every op kernel of ``hba_augment.functional`` must have, for any valid input (hypothesis)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torchvision.transforms import InterpolationMode

F = pytest.importorskip("hba_augment.functional")
apply_op = F.apply_op
OPS = F.OPS

pytestmark = pytest.mark.usefixtures("torch_single_thread")

ALL_OPS = [pytest.param(spec, id=spec.name) for spec in OPS]
MAGNITUDE_OPS = [pytest.param(spec, id=spec.name) for spec in OPS if spec.has_magnitude]
IDENTITY_OPS = [pytest.param(spec, id=spec.name) for spec in OPS if spec.identity is not None]
# Ops whose float path is differentiable in the input images (geometric ones with BILINEAR).
DIFFERENTIABLE = ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Invert", "Solarize",
                  "Contrast", "Color", "Brightness", "Sharpness", "Cutout")
DIFFERENTIABLE_CASES = [
    pytest.param(spec, sign, id=f"{spec.name}{'-neg' if sign < 0 else ''}")
    for spec in OPS
    if spec.name in DIFFERENTIABLE
    for sign in ((1, -1) if spec.signed else (1,))
]

SETTINGS = settings(max_examples=20, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def magnitudes(spec, *, signed: bool | None = None):
    """Any valid magnitude of ``spec``, negated at random for signed ops (or as ``signed`` says)."""
    if not spec.has_magnitude:
        return st.none()
    values = st.floats(spec.low, spec.high, allow_nan=False, allow_infinity=False)
    if not spec.signed or signed is False:
        return values
    return st.tuples(values, st.booleans()).map(lambda t: -t[0] if t[1] else t[0])


@st.composite
def uint8_batches(draw, *, min_batch: int = 1, max_batch: int = 4):
    """Random uint8 (B, C, H, W) batches: grey or RGB, square or not, sizes 3..20."""
    b = draw(st.integers(min_batch, max_batch))
    c = draw(st.sampled_from([1, 3]))
    h, w = draw(st.integers(3, 20)), draw(st.integers(3, 20))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (b, c, h, w), generator=g, dtype=torch.uint8)


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def run(images, spec, magnitude, **kwargs):
    """apply_op with a fixed Cutout stream, so that two calls on equal inputs draw the same patches."""
    if spec.name == "Cutout":
        kwargs.setdefault("generator", gen(0))
    return apply_op(images, spec.name, magnitude, **kwargs)


def max_level_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest difference in 8-bit levels between two images of any dtypes."""
    scale = lambda x: x.double() if x.dtype == torch.uint8 else x.double() * 255  # noqa: E731
    return (scale(a) - scale(b)).abs().max().item() if a.numel() else 0.0


# ----------------------------------------------------------------------------------------------------
# The output contract: same dtype, shape, device; values in range; the input untouched.
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", ALL_OPS)
@SETTINGS
@given(data=st.data())
def test_output_contract_uint8(spec, data):
    images = data.draw(uint8_batches())
    magnitude = data.draw(magnitudes(spec))
    before = images.clone()
    out = run(images, spec, magnitude)
    assert out.dtype == torch.uint8 and out.shape == images.shape and out.device == images.device
    assert torch.equal(images, before), "the input was modified"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("spec", ALL_OPS)
@SETTINGS
@given(data=st.data())
def test_output_contract_float(spec, dtype, data):
    images = data.draw(uint8_batches())
    noise = torch.rand(images.shape, generator=gen(images.numel()), dtype=dtype)  # not whole levels
    magnitude = data.draw(magnitudes(spec))
    interpolation = data.draw(st.sampled_from([InterpolationMode.NEAREST, InterpolationMode.BILINEAR]))
    before = noise.clone()
    kwargs = {"interpolation": interpolation} if spec.geometric else {}
    out = run(noise, spec, magnitude, **kwargs)
    assert out.dtype == dtype and out.shape == noise.shape and out.device == noise.device
    assert torch.isfinite(out).all()
    assert out.min().item() >= 0.0 and out.max().item() <= 1.0, (out.min().item(), out.max().item())
    assert torch.equal(noise, before), "the input was modified"


@pytest.mark.parametrize("spec", ALL_OPS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_floats(spec, dtype, cifar_images):
    images = cifar_images[:4].to(dtype) / 255
    magnitude = spec.high if spec.has_magnitude else None
    out = run(images, spec, magnitude)
    assert out.dtype == dtype and out.shape == images.shape
    reference = run(images.float(), spec, magnitude)
    # Half precision holds levels to about 1 in 256 (float16) or 1 in 128 (bfloat16) near 1.0.
    assert max_level_diff(out, reference) <= (2.0 if dtype == torch.float16 else 3.0)


# ----------------------------------------------------------------------------------------------------
# Identity, batching, unbatched input, dtypes agreeing.
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", IDENTITY_OPS)
@SETTINGS
@given(images=uint8_batches(), negative=st.booleans())
def test_identity_magnitude(spec, images, negative):
    magnitude = -spec.identity if (negative and spec.signed) else spec.identity
    assert torch.equal(run(images, spec, magnitude), images)
    floats = images.float() / 255
    out = run(floats, spec, magnitude)
    assert torch.equal(out, floats), f"{spec.name} at {magnitude}: float images change by {max_level_diff(out, floats)} levels"


@pytest.mark.parametrize("spec", MAGNITUDE_OPS)
@SETTINGS
@given(data=st.data())
def test_batched_magnitudes_equal_per_image(spec, data, cutout_structure):
    images = data.draw(uint8_batches(min_batch=2, max_batch=5))
    values = data.draw(st.lists(magnitudes(spec), min_size=len(images), max_size=len(images)))
    magnitude = torch.tensor(values, dtype=torch.float32)
    floats = images.float() / 255
    if spec.name == "Cutout":
        # The patch positions are random: check each image's patch against its own magnitude.
        safe = images.clamp(min=1)  # fill 0 is absent, so every painted pixel is a changed pixel
        cutout_structure(safe, run(safe, spec, magnitude), values, 0)
        return
    out = run(images, spec, magnitude)
    out_f = run(floats, spec, magnitude)
    for i, m in enumerate(values):
        one = run(images[i : i + 1], spec, m)
        assert torch.equal(out[i : i + 1], one), f"{spec.name}: image {i} of the batch differs (m={m})"
        one_f = run(floats[i : i + 1], spec, m)
        assert max_level_diff(out_f[i : i + 1], one_f) <= 1e-3, f"{spec.name}: float image {i} differs (m={m})"


@pytest.mark.parametrize("spec", ALL_OPS)
@SETTINGS
@given(data=st.data())
def test_uint8_and_float_paths_agree(spec, data):
    images = data.draw(uint8_batches())
    magnitude = data.draw(magnitudes(spec))
    out_u8 = run(images, spec, magnitude)
    out_f = run(images.float() / 255, spec, magnitude)
    diff = max_level_diff(out_u8, out_f)
    assert diff <= 1 + 1e-3, f"{spec.name} m={magnitude}: float and uint8 paths differ by {diff:.3f} levels"


@pytest.mark.parametrize("spec", ALL_OPS)
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_empty_batch(spec, dtype):
    images = torch.zeros(0, 3, 8, 8, dtype=dtype)
    magnitude = spec.high if spec.has_magnitude else None
    out = run(images, spec, magnitude)
    assert out.shape == images.shape and out.dtype == dtype
    if spec.has_magnitude:
        out = run(images, spec, torch.empty(0))
        assert out.shape == images.shape and out.dtype == dtype


@pytest.mark.parametrize("spec", ALL_OPS)
@SETTINGS
@given(data=st.data())
def test_unbatched_and_single_image(spec, data):
    images = data.draw(uint8_batches(min_batch=1, max_batch=1))
    magnitude = data.draw(magnitudes(spec))
    batched = run(images, spec, magnitude)
    unbatched = run(images[0], spec, magnitude)
    assert unbatched.shape == images.shape[1:] and unbatched.dtype == torch.uint8
    assert torch.equal(unbatched, batched[0])
    if spec.has_magnitude:
        as_tensor = run(images, spec, torch.tensor([magnitude]))
        assert torch.equal(as_tensor, batched)


@pytest.mark.parametrize("spec", ALL_OPS)
def test_non_contiguous_input(spec, cifar_images):
    images = cifar_images[:6]
    magnitude = spec.high if spec.has_magnitude else None
    expected = run(images, spec, magnitude)
    channels_last = images.contiguous(memory_format=torch.channels_last)
    assert torch.equal(run(channels_last, spec, magnitude), expected)
    strided = torch.cat([images, images], dim=-1)[..., ::2]  # every other column
    assert torch.equal(run(strided, spec, magnitude), run(strided.contiguous(), spec, magnitude))


# ----------------------------------------------------------------------------------------------------
# Gradients: float images stay differentiable where the op is.
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("spec", "sign"), DIFFERENTIABLE_CASES)
def test_gradient_flows(spec, sign, cifar_images):
    images = (cifar_images[:4].float() / 255).requires_grad_(True)
    # A magnitude that changes the image without saturating it.
    magnitude = sign * (spec.low + 0.7 * (spec.high - spec.low)) if spec.has_magnitude else None
    kwargs = {"interpolation": InterpolationMode.BILINEAR} if spec.geometric else {}
    out = run(images, spec, magnitude, **kwargs)
    assert out.requires_grad, f"{spec.name}: output is detached from the input"
    (out * torch.linspace(0, 1, out.numel()).view_as(out)).sum().backward()
    assert images.grad is not None and torch.isfinite(images.grad).all()
    assert images.grad.abs().sum().item() > 0, f"{spec.name}: the gradient is zero everywhere"


# ----------------------------------------------------------------------------------------------------
# CUDA: same results as on the CPU, on the images' device.
# ----------------------------------------------------------------------------------------------------


@cuda
@pytest.mark.cuda
@pytest.mark.parametrize("spec", ALL_OPS)
def test_cuda_matches_cpu(spec, cifar_images):
    images = cifar_images[:16]
    device = torch.device("cuda")
    values = [spec.low + (spec.high - spec.low) * k / 15 for k in range(16)] if spec.has_magnitude else None
    magnitude = None if values is None else torch.tensor(values)
    if spec.name == "Cutout":
        out = apply_op(images.to(device), spec.name, magnitude.to(device), generator=torch.Generator(device).manual_seed(0))
        assert out.device.type == "cuda" and out.dtype == torch.uint8 and out.shape == images.shape
        return
    for dtype_images in (images, images.float() / 255):
        expected = apply_op(dtype_images, spec.name, magnitude)
        out = apply_op(dtype_images.to(device), spec.name, None if magnitude is None else magnitude.to(device))
        assert out.device.type == "cuda" and out.dtype == dtype_images.dtype
        assert max_level_diff(out.cpu(), expected) <= 1 + 1e-3, f"{spec.name}: CUDA and CPU differ"
        if dtype_images.dtype == torch.uint8 and not spec.geometric:
            assert torch.equal(out.cpu(), expected), f"{spec.name}: CUDA and CPU differ on uint8"


# ----------------------------------------------------------------------------------------------------
# Pointwise tables (OpSpec.table): the lookup augment() merges a step's pointwise ops into must give
# each op's own result, exactly, on uint8 images; and on the float levels of uint8 images.
# ----------------------------------------------------------------------------------------------------
TABLE_OPS = [pytest.param(spec, id=spec.name) for spec in OPS if spec.table is not None]


def test_pointwise_ops_have_tables():
    assert {spec.name for spec in OPS if spec.table is not None} == {
        "AutoContrast", "Invert", "Equalize", "Solarize", "Posterize", "Contrast", "Brightness"
    }


@pytest.mark.parametrize("spec", TABLE_OPS)
@SETTINGS
@given(data=st.data())
def test_table_lookup_is_the_op(spec, data):
    from hba_augment.functional._kernels import KernelContext, lookup

    images = data.draw(uint8_batches())
    b = len(images)
    values = data.draw(st.lists(magnitudes(spec), min_size=b, max_size=b))
    magnitude = None if not spec.has_magnitude else torch.tensor(values, dtype=torch.float32)
    ctx = KernelContext(quantize=True, fill=None, mode="nearest", generator=None)
    table = spec.table(images, magnitude, ctx)
    assert table.shape[0] == b and table.shape[1] in (1, images.shape[1]) and table.shape[2:] == (1, 256)
    expected = spec.kernel(images.float(), magnitude, ctx)  # the float-levels path, exact on uint8 images
    torch.testing.assert_close(lookup(images, table), expected.to(torch.uint8), rtol=0, atol=0)
    torch.testing.assert_close(spec.kernel(images, magnitude, ctx), expected.to(torch.uint8), rtol=0, atol=0)


@SETTINGS
@given(images=uint8_batches(max_batch=6), shared=st.booleans(), seed=st.integers(0, 2**31 - 1))
def test_flat_lookup_reads_the_same_pixels_as_the_gather(images, shared, seed):
    # lookup() takes the int32 flat form on large CPU batches, the int64 gather on small ones and where the
    # caller passes its index: the two must read the same table entry for every pixel, tables per channel
    # or shared by the channels, laid out (B, C, 256) or (B, C, 1, 256).
    from hba_augment.functional._kernels import _FLAT_LOOKUP_FROM, lookup, lookup_flat

    b, c, h, w = images.shape
    tables = torch.randint(0, 256, (b, 1 if shared else c, 1, 256), generator=gen(seed)).float()
    index = images.reshape(b, c, h * w).long()
    expected = tables.squeeze(2).expand(b, c, 256).gather(2, index).to(torch.uint8).view(b, c, h, w)
    assert torch.equal(lookup_flat(images, tables), expected)
    assert torch.equal(lookup_flat(images, tables.squeeze(2)), expected)
    assert torch.equal(lookup(images, tables, index), expected)
    large = images.repeat(-(-_FLAT_LOOKUP_FROM // images.numel()), 1, 1, 1)  # the flat form's size
    assert torch.equal(lookup(large, tables.repeat(len(large) // b, 1, 1, 1)), expected.repeat(len(large) // b, 1, 1, 1))
