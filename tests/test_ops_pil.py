"""Agreement of the 15 op kernels with the PIL calls of the contract, section 1, on real lossless CIFAR-10 images.

Conventions checked here (the contract, section 1 plus the TF/PBA reference implementation):

- ShearX with magnitude s is PIL ``AFFINE (1, s, 0, 0, 1, 0)``; ShearY is ``(1, 0, 0, s, 1, 0)``.
- TranslateX with magnitude m is PIL ``AFFINE (1, 0, round(m * W), 0, 1, 0)`` exactly as the TF/PBA
  reference ``img.transform(size, AFFINE, (1, 0, pixels, 0, 1, 0))``: output pixel x samples input
  pixel x + round(m * W), so a positive magnitude moves the content LEFT (and TranslateY: up). This is
  the opposite of torchvision's ``F.affine(translate=...)``; the sign is drawn at random anyway.
- Rotate with magnitude d is PIL ``rotate(d)``: counter-clockwise about the centre.

Tolerances (the contract, section 1): pointwise ops exactly; blends, Equalize and AutoContrast within one 8-bit
level; NEAREST geometric ops on all but a small fraction of pixels (integer translations exactly).
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.transforms import InterpolationMode

F = pytest.importorskip("hba_augment.functional")
apply_op = F.apply_op

pytestmark = pytest.mark.usefixtures("torch_single_thread")


#: Most pixels (any channel) a NEAREST geometric op may get wrong vs PIL (half-pixel conventions).
GEOMETRIC_MAX_FRACTION = 0.02
#: ... and on any single image.
GEOMETRIC_MAX_FRACTION_PER_IMAGE = 0.05


# ----------------------------------------------------------------------------------------------------
# Converting between tensors and PIL images, and the PIL references of the contract, section 1.
# ----------------------------------------------------------------------------------------------------


def to_pil(image: torch.Tensor) -> Image.Image:
    """(C, H, W) uint8 tensor with C in {1, 3} -> PIL image in mode "L" or "RGB"."""
    array = image.permute(1, 2, 0).numpy()
    if image.shape[0] == 1:
        return Image.fromarray(np.ascontiguousarray(array[:, :, 0]), mode="L")
    return Image.fromarray(np.ascontiguousarray(array), mode="RGB")


def from_pil(image: Image.Image) -> torch.Tensor:
    array = np.asarray(image)
    if array.ndim == 2:
        array = array[:, :, None]
    return torch.from_numpy(array.copy()).permute(2, 0, 1)


def pil_fill(fill, channels: int):
    """The PIL ``fillcolor`` for a kernel ``fill`` (None, a number or one value per channel)."""
    if fill is None:
        fill = 0
    if isinstance(fill, (int, float)):
        fill = [fill] * channels
    fill = [int(v) for v in fill]
    return fill[0] if channels == 1 else tuple(fill)


# The PIL calls themselves have one home, shared with the benchmarks: ``op(img, m, fill, rng, resample)``.
_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "reference_pba.py"
_spec = importlib.util.spec_from_file_location("reference_pba", _PATH)
reference_pba = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(reference_pba)
PIL_OPS = reference_pba.PIL_OPS


def pil_apply(images: torch.Tensor, op: str, magnitude, fill=None) -> torch.Tensor:
    """Apply the PIL reference of ``op`` image by image to a uint8 (B, C, H, W) batch."""
    fc = pil_fill(fill, images.shape[1])
    return torch.stack([from_pil(PIL_OPS[op](to_pil(img), magnitude, fc, None)) for img in images])


def grayscale(images: torch.Tensor) -> torch.Tensor:
    """RGB uint8 batch -> (B, 1, H, W) uint8 through PIL's own "L" conversion."""
    return torch.stack([from_pil(to_pil(img).convert("L")) for img in images])


def describe(op, magnitude, out: torch.Tensor, ref: torch.Tensor) -> str:
    diff = (out.to(torch.int16) - ref.to(torch.int16)).abs()
    differing = diff.amax(dim=1) > 0  # (B, H, W), any channel
    where = torch.nonzero(diff)
    first = ""
    if len(where):
        b, c, y, x = where[0].tolist()
        first = f"; first at image {b} channel {c} (y={y}, x={x}): kernel {out[b, c, y, x].item()} vs PIL {ref[b, c, y, x].item()}"
    return (
        f"{op} magnitude={magnitude}: max diff {diff.max().item()} levels, mean {diff.float().mean().item():.4f}, "
        f"{differing.float().mean().item():.2%} pixels differ{first}"
    )


def assert_exact(op, magnitude, out, ref):
    assert out.dtype == torch.uint8 and out.shape == ref.shape, (out.dtype, out.shape, ref.shape)
    assert torch.equal(out, ref), describe(op, magnitude, out, ref)


def assert_within_one_level(op, magnitude, out, ref):
    assert out.dtype == torch.uint8 and out.shape == ref.shape, (out.dtype, out.shape, ref.shape)
    diff = (out.to(torch.int16) - ref.to(torch.int16)).abs()
    assert diff.max().item() <= 1, describe(op, magnitude, out, ref)


def assert_geometric(op, magnitude, out, ref):
    assert out.dtype == torch.uint8 and out.shape == ref.shape, (out.dtype, out.shape, ref.shape)
    differing = (out != ref).any(dim=1).float()  # (B, H, W)
    message = describe(op, magnitude, out, ref)
    assert differing.mean().item() <= GEOMETRIC_MAX_FRACTION, message
    assert differing.mean(dim=(1, 2)).max().item() <= GEOMETRIC_MAX_FRACTION_PER_IMAGE, message


def float_agrees_with_uint8(op, magnitude, images, fill=None, **kwargs):
    """The float path (x / 255) must agree with the uint8 path within one level."""
    out_u8 = apply_op(images, op, magnitude, fill=fill, **kwargs)
    float_fill = fill
    if fill is not None:
        float_fill = fill / 255 if isinstance(fill, (int, float)) else [v / 255 for v in fill]
    out_f = apply_op(images.float() / 255, op, magnitude, fill=float_fill, **kwargs)
    assert out_f.dtype == torch.float32 and out_f.shape == images.shape
    diff = (out_f * 255 - out_u8.float()).abs()
    assert diff.max().item() <= 1 + 1e-3, (
        f"{op} magnitude={magnitude}: float path differs from uint8 path by up to {diff.max().item():.3f} levels "
        f"({(diff > 1 + 1e-3).float().mean().item():.2%} of values)"
    )


# ----------------------------------------------------------------------------------------------------
# One test class per op. Each class names its op and magnitudes; the shared checks live in _PILCase.
# ----------------------------------------------------------------------------------------------------


def pytest_generate_tests(metafunc):
    if "magnitude" in metafunc.fixturenames and metafunc.cls is not None:
        metafunc.parametrize("magnitude", metafunc.cls.MAGNITUDES, ids=lambda m: f"m={m}")


class _PILCase:
    OP: str
    FUNC: str  # the public per-op function of hba_augment.functional
    MAGNITUDES: tuple
    KIND: str  # "exact", "level" (within one level) or "geometric"

    def check(self, magnitude, out, ref):
        {"exact": assert_exact, "level": assert_within_one_level, "geometric": assert_geometric}[self.KIND](
            self.OP, magnitude, out, ref
        )

    def test_rgb(self, cifar_images, magnitude):
        out = apply_op(cifar_images, self.OP, magnitude)
        self.check(magnitude, out, pil_apply(cifar_images, self.OP, magnitude))

    def test_grayscale(self, cifar_images, magnitude):
        gray = grayscale(cifar_images[:32])
        out = apply_op(gray, self.OP, magnitude)
        self.check(magnitude, out, pil_apply(gray, self.OP, magnitude))

    @pytest.mark.parametrize("shape", ["24x32", "32x24"])
    def test_non_square(self, cifar_images, magnitude, shape):
        images = cifar_images[:32, :, 4:28, :] if shape == "24x32" else cifar_images[:32, :, :, 4:28]
        images = images.contiguous()
        out = apply_op(images, self.OP, magnitude)
        self.check(magnitude, out, pil_apply(images, self.OP, magnitude))

    def test_float_input(self, cifar_images, magnitude):
        float_agrees_with_uint8(self.OP, magnitude, cifar_images[:32])

    def test_named_function(self, cifar_images):
        magnitude = self.MAGNITUDES[-1]
        func = getattr(F, self.FUNC)
        images = cifar_images[:8]
        out = func(images) if magnitude is None else func(images, magnitude)
        assert torch.equal(out, apply_op(images, self.OP, magnitude))


class _GeometricCase(_PILCase):
    KIND = "geometric"

    @pytest.mark.parametrize("fill", [128, (10, 200, 90)], ids=["number", "per-channel"])
    def test_fill(self, cifar_images, fill):
        magnitude = self.MAGNITUDES[-1]  # the largest: many uncovered pixels
        images = cifar_images[:32]
        out = apply_op(images, self.OP, magnitude, fill=fill)
        ref = pil_apply(images, self.OP, magnitude, fill=fill)
        self.check(magnitude, out, ref)
        float_agrees_with_uint8(self.OP, magnitude, images, fill=fill)

    def test_fill_grayscale(self, cifar_images):
        magnitude = self.MAGNITUDES[0]
        gray = grayscale(cifar_images[:16])
        out = apply_op(gray, self.OP, magnitude, fill=77)
        self.check(magnitude, out, pil_apply(gray, self.OP, magnitude, fill=77))
        out = apply_op(gray, self.OP, magnitude, fill=[77])
        self.check(magnitude, out, pil_apply(gray, self.OP, magnitude, fill=77))

    @pytest.mark.parametrize("sign", [1, -1], ids=["pos", "neg"])
    def test_bilinear_within_one_level_of_pil(self, cifar_images, sign):
        # PIL's BILINEAR transform: a source point outside the image takes the fill, inside it the
        # neighbours beyond the border repeat the edge pixel. Only the final rounding may differ.
        magnitude = sign * self.MAGNITUDES[-1]
        images = cifar_images[:32]
        out = apply_op(images, self.OP, magnitude, interpolation=InterpolationMode.BILINEAR).double()
        bilinear = Image.Resampling.BILINEAR
        ref = torch.stack([from_pil(PIL_OPS[self.OP](to_pil(img), magnitude, 0, None, bilinear)) for img in images]).double()
        diff = (out - ref).abs()
        assert diff.max().item() <= 1.0, (
            f"{self.OP} magnitude={magnitude} BILINEAR: max diff {diff.max().item():.0f} levels, "
            f"{(diff > 1).double().mean().item():.2%} of values off by more than one level"
        )
        # Truncated as PIL truncates: only float32-vs-double coordinate ties differ (rounding: ~40%).
        assert (diff > 0).double().mean().item() < 0.03

    def test_default_fill_is_black(self, cifar_images):
        magnitude = self.MAGNITUDES[-1]
        images = cifar_images[:16].clamp(min=1)  # no black pixel of its own
        out = apply_op(images, self.OP, magnitude)
        assert (out == 0).all(dim=1).any(), f"{self.OP} magnitude={magnitude}: no pixel took the default fill 0"


class TestShearX(_GeometricCase):
    OP, FUNC = "ShearX", "shear_x"
    MAGNITUDES = (-0.3, -0.17, -0.05, 0.05, 0.17, 0.3)


class TestShearY(_GeometricCase):
    OP, FUNC = "ShearY", "shear_y"
    MAGNITUDES = (-0.3, -0.17, -0.05, 0.05, 0.17, 0.3)


class TestTranslateX(_GeometricCase):
    OP, FUNC = "TranslateX", "translate_x"
    # round(m * 32) = 14, 6, 1 and round(m * 24) = 11, 5, 1: no ties, different for the two widths.
    MAGNITUDES = (-0.45, -0.2, -0.03, 0.03, 0.2, 0.45)

    def check(self, magnitude, out, ref):
        # Integer shifts: PIL samples exactly input pixel x + t, so there is no half-pixel excuse.
        assert_exact(self.OP, magnitude, out, ref)

    def test_direction(self):
        # Positive magnitude: output pixel x shows input pixel x + round(m * W) (content moves left).
        image = torch.arange(10, dtype=torch.uint8).repeat(3, 10, 1)  # value = column index
        out = apply_op(image, self.OP, 0.2)  # 2 pixels
        assert out[0, 0].tolist() == [2, 3, 4, 5, 6, 7, 8, 9, 0, 0]
        out = apply_op(image, self.OP, -0.2)
        assert out[0, 0].tolist() == [0, 0, 0, 1, 2, 3, 4, 5, 6, 7]


class TestTranslateY(_GeometricCase):
    OP, FUNC = "TranslateY", "translate_y"
    MAGNITUDES = (-0.45, -0.2, -0.03, 0.03, 0.2, 0.45)

    def check(self, magnitude, out, ref):
        assert_exact(self.OP, magnitude, out, ref)

    def test_direction(self):
        image = torch.arange(10, dtype=torch.uint8)[:, None].repeat(3, 1, 10)  # value = row index
        out = apply_op(image, self.OP, 0.2)
        assert out[0, :, 0].tolist() == [2, 3, 4, 5, 6, 7, 8, 9, 0, 0]


class TestRotate(_GeometricCase):
    OP, FUNC = "Rotate", "rotate"
    MAGNITUDES = (-30.0, -12.5, -3.0, 3.0, 12.5, 30.0)

    def test_counter_clockwise(self):
        # A bright pixel right of the centre of a 33x33 image ends up above the centre after +30 degrees.
        image = torch.zeros(1, 33, 33, dtype=torch.uint8)
        image[0, 16, 28] = 255
        out = apply_op(image, self.OP, 30.0)
        ys, xs = torch.nonzero(out[0], as_tuple=True)
        assert len(ys) >= 1
        y, x = ys.float().mean().item(), xs.float().mean().item()
        angle = math.degrees(math.atan2(16 - y, x - 16))  # image y grows downwards
        assert abs(angle - 30.0) < 5.0, angle


class TestAutoContrast(_PILCase):
    OP, FUNC, KIND = "AutoContrast", "auto_contrast", "level"
    MAGNITUDES = (None,)

    def test_constant_channel_unchanged(self):
        image = torch.stack([torch.full((6, 6), 77), torch.arange(36).reshape(6, 6) + 100, torch.full((6, 6), 0)])
        image = image.to(torch.uint8)
        out = apply_op(image, self.OP)
        assert torch.equal(out[0], image[0]) and torch.equal(out[2], image[2])
        assert out[1].min().item() == 0 and out[1].max().item() == 255


class TestInvert(_PILCase):
    OP, FUNC, KIND = "Invert", "invert", "exact"
    MAGNITUDES = (None,)

    def test_all_levels(self):
        image = torch.arange(256, dtype=torch.uint8).reshape(1, 16, 16)
        assert torch.equal(apply_op(image, self.OP), 255 - image)


class TestEqualize(_PILCase):
    OP, FUNC, KIND = "Equalize", "equalize", "level"
    MAGNITUDES = (None,)

    def test_exact_on_real_images(self, cifar_images):
        # PIL's lookup table is integer arithmetic: a faithful port reproduces it exactly.
        assert_exact(self.OP, None, apply_op(cifar_images, self.OP), pil_apply(cifar_images, self.OP, None))

    def test_degenerate_histograms(self):
        # Constant image, two levels, and one level with a single odd pixel: PIL's special cases.
        images = torch.zeros(3, 3, 8, 8, dtype=torch.uint8)
        images[0] = 90
        images[1, :, :4] = 10
        images[1, :, 4:] = 200
        images[2] = 50
        images[2, :, 0, 0] = 51
        assert_exact(self.OP, None, apply_op(images, self.OP), pil_apply(images, self.OP, None))


class TestSolarize(_PILCase):
    OP, FUNC, KIND = "Solarize", "solarize", "exact"
    MAGNITUDES = (0.0, 1.0, 64.0, 127.5, 128.0, 200.0, 255.0)

    # Strength m inverts the levels >= 256 - m (the contract, section 1): 0 none, 255 all but level 0.
    @pytest.mark.parametrize("strength", [0, 0.5, 1, 100, 127.5, 128, 254.5, 255])
    def test_all_levels(self, strength):
        image = torch.arange(256, dtype=torch.uint8).reshape(1, 16, 16)
        assert_exact(self.OP, strength, apply_op(image[None], self.OP, strength), pil_apply(image[None], self.OP, strength))

    def test_strength_counts_inverted_levels(self):
        image = torch.arange(256, dtype=torch.uint8).reshape(1, 1, 16, 16)
        for strength in (0, 1, 56, 255):
            changed = int((apply_op(image, self.OP, float(strength)) != image).sum())
            assert changed == strength  # the levels 256 - m .. 255 (255 - x == x for no whole level)


class TestPosterize(_PILCase):
    OP, FUNC, KIND = "Posterize", "posterize", "exact"
    # Strength m keeps 8 - round(m) bits (2.6 -> 5 bits, 4.4 -> 4); 0 changes nothing, 8 gives black.
    MAGNITUDES = (0, 1, 2.6, 4, 4.4, 6, 7, 8)

    @pytest.mark.parametrize("strength", [0, 2, 5, 7, 8])
    def test_all_levels(self, strength):
        image = torch.arange(256, dtype=torch.uint8).reshape(1, 1, 16, 16)
        assert_exact(self.OP, strength, apply_op(image, self.OP, strength), pil_apply(image, self.OP, strength))

    def test_ends(self):
        image = torch.arange(256, dtype=torch.uint8).reshape(1, 1, 16, 16)
        assert torch.equal(apply_op(image, self.OP, 0.0), image)
        assert not apply_op(image, self.OP, 8.0).any()




_BLEND_MAGNITUDES = (0.1, 0.5, 0.93, 1.0, 1.37, 1.9)


class TestContrast(_PILCase):
    OP, FUNC, KIND = "Contrast", "contrast", "level"
    MAGNITUDES = _BLEND_MAGNITUDES

    def test_mean_just_under_a_half_level(self):
        # A grey 299x299 image whose mean is 128.4999944: PIL's mean (double precision) rounds to 128, a
        # float32 mean comes out as 128.5 and rounds to 129, which moved every 129 pixel to 128 at factor
        # 0.5 before the mean was computed in integers (uint8) or float64 (float images). A real photo
        # rarely lands this close to a half level; the edge needs an image made for it.
        n = 299 * 299
        levels = torch.full((n,), 128, dtype=torch.uint8)
        levels[torch.randperm(n, generator=torch.Generator().manual_seed(0))[:44_700]] = 129
        image = levels.view(1, 1, 299, 299).expand(1, 3, 299, 299).contiguous()
        assert abs(levels.double().mean().item() - 128.4999944) < 1e-7
        assert_exact(self.OP, 0.5, apply_op(image, self.OP, 0.5), pil_apply(image, self.OP, 0.5))
        float_out = apply_op(image.float() / 255, self.OP, 0.5)
        assert torch.equal((float_out * 255).round().to(torch.uint8), apply_op(image, self.OP, 0.5))


class TestColor(_PILCase):
    OP, FUNC, KIND = "Color", "color", "level"
    MAGNITUDES = _BLEND_MAGNITUDES


class TestBrightness(_PILCase):
    OP, FUNC, KIND = "Brightness", "brightness", "level"
    MAGNITUDES = _BLEND_MAGNITUDES


class TestSharpness(_PILCase):
    OP, FUNC, KIND = "Sharpness", "sharpness", "level"
    MAGNITUDES = _BLEND_MAGNITUDES

    def test_border_kept(self, cifar_images):
        out = apply_op(cifar_images, self.OP, 1.9)
        for border in (out[..., 0, :] != cifar_images[..., 0, :], out[..., -1, :] != cifar_images[..., -1, :],
                       out[..., :, 0] != cifar_images[..., :, 0], out[..., :, -1] != cifar_images[..., :, -1]):
            assert not border.any()


# ----------------------------------------------------------------------------------------------------
# Cutout: PIL has no such call, so check the structure of the change exactly.
# ----------------------------------------------------------------------------------------------------


def _absent_fill(images: torch.Tensor) -> tuple[int, ...]:
    """A per-channel colour that no pixel of ``images`` has, so every painted pixel is a changed one."""
    for fill in [(7, 201, 33), (3, 250, 111), (254, 1, 128)]:
        fill = fill[: images.shape[1]]
        present = (images == torch.tensor(fill, dtype=images.dtype).view(1, -1, 1, 1)).all(dim=1).any()
        if not present:
            return fill
    raise AssertionError("test set-up: every candidate fill colour occurs in the images")


class TestCutout:
    OP, FUNC = "Cutout", "cutout"
    # round(m * 32) = 0, 2, 3, 5, 6 and round(m * 24) = 0, 1, 2, 4, 5: no ties.
    MAGNITUDES = (0.0, 0.05, 0.1, 0.15, 0.2)

    def test_structure_rgb(self, cifar_images, magnitude, cutout_structure):
        fill = _absent_fill(cifar_images)
        g = torch.Generator().manual_seed(0)
        out = apply_op(cifar_images, self.OP, magnitude, fill=fill, generator=g)
        cutout_structure(cifar_images, out, magnitude, fill)

    def test_structure_grayscale(self, cifar_images, magnitude, cutout_structure):
        # Every grey level occurs somewhere in 64 images: keep 255 free for the fill.
        gray = grayscale(cifar_images).clamp(max=254)
        fill = (255,)
        out = apply_op(gray, self.OP, magnitude, fill=fill, generator=torch.Generator().manual_seed(1))
        cutout_structure(gray, out, magnitude, fill)

    def test_structure_non_square(self, cifar_images, magnitude, cutout_structure):
        images = cifar_images[:, :, 4:28, :].contiguous()  # 24 x 32
        fill = _absent_fill(images)
        out = apply_op(images, self.OP, magnitude, fill=fill, generator=torch.Generator().manual_seed(2))
        cutout_structure(images, out, magnitude, fill)
        images = cifar_images[:, :, :, 4:28].contiguous()  # 32 x 24
        out = apply_op(images, self.OP, magnitude, fill=fill, generator=torch.Generator().manual_seed(3))
        cutout_structure(images, out, magnitude, fill)

    def test_default_fill_is_black(self, cifar_images, cutout_structure):
        images = cifar_images.clamp(min=1)
        out = apply_op(images, self.OP, 0.2, generator=torch.Generator().manual_seed(4))
        cutout_structure(images, out, 0.2, (0, 0, 0))

    def test_float_input(self, cifar_images, magnitude):
        # The draws do not depend on the dtype: same seed, same patches, fill on the image's own scale.
        fill = _absent_fill(cifar_images)
        out_u8 = apply_op(cifar_images, self.OP, magnitude, fill=fill, generator=torch.Generator().manual_seed(5))
        out_f = apply_op(
            cifar_images.float() / 255, self.OP, magnitude, fill=[v / 255 for v in fill],
            generator=torch.Generator().manual_seed(5),
        )
        assert out_f.dtype == torch.float32
        assert (out_f * 255 - out_u8.float()).abs().max().item() <= 1e-3

    def test_seeded_generator_reproducible(self, cifar_images):
        run = lambda seed: apply_op(cifar_images, self.OP, 0.2, generator=torch.Generator().manual_seed(seed))  # noqa: E731
        assert torch.equal(run(6), run(6))
        assert not torch.equal(run(6), run(7))

    def test_named_function(self, cifar_images):
        g1, g2 = torch.Generator().manual_seed(8), torch.Generator().manual_seed(8)
        assert torch.equal(F.cutout(cifar_images, 0.2, generator=g1), apply_op(cifar_images, self.OP, 0.2, generator=g2))

    def test_centres_spread_over_the_image(self):
        # 4096 draws of a 6x6 patch on a 32x32 image: a uniform centre covers every pixel, and the
        # four quadrants equally often (expected about 140 hits per interior pixel).
        images = torch.zeros(4096, 1, 32, 32)
        out = apply_op(images, self.OP, 0.2, fill=1.0, generator=torch.Generator().manual_seed(9))
        coverage = out[:, 0].sum(dim=0)  # (32, 32) hits per pixel
        assert (coverage > 0).all(), "some pixels are never covered by a Cutout patch"
        quadrants = torch.stack(
            [coverage[:16, :16].mean(), coverage[:16, 16:].mean(), coverage[16:, :16].mean(), coverage[16:, 16:].mean()]
        )
        assert (quadrants.max() / quadrants.min()).item() < 1.1, quadrants.tolist()
        interior = coverage[6:26, 6:26]
        expected = 4096 * 36 / 1024
        assert abs(interior.mean().item() - expected) < 0.1 * expected, (interior.mean().item(), expected)

    def test_images_drawn_independently(self, cifar_images):
        images = cifar_images[:1].expand(32, -1, -1, -1).contiguous()
        out = apply_op(images, self.OP, 0.2, fill=_absent_fill(images), generator=torch.Generator().manual_seed(10))
        patches = (out != images).any(dim=1)
        assert len({tuple(torch.nonzero(p)[0].tolist()) for p in patches}) > 8, "images share their patch positions"
