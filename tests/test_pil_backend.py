"""PIL images through PIL's own operations (issue 11, section 4; ``functional/_pil.py``).

A PIL image and its tensor twin must come out with the same pixels under one seed (the same template and
Cutout centres from the same generator): for every op, L and RGB, fills, square and non-square images
from 24x40 to 240x300 (above the tensor path's 64 Ki-pixel cached warps). With NEAREST exactly; with
BILINEAR the PIL path is PIL's own BILINEAR (the same AFFINE data), within one level of the kernels.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import PIL.Image
import pytest
import torch
from torchvision.transforms import InterpolationMode
from torchvision.transforms.functional import pil_to_tensor, to_pil_image

from hba_augment import policy as policy_module
from hba_augment.functional import NUM_OPS, OP_NAMES, OPS
from hba_augment.functional._augment import augment_drawn, draw_one
from hba_augment.functional._pil import _lookup, augment_pil
from hba_augment.policy import HBAPolicy
from hba_augment.schedule import Schedule

pytestmark = pytest.mark.usefixtures("torch_single_thread")

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "reference_pba.py"
_spec = importlib.util.spec_from_file_location("reference_pba", _PATH)
reference_pba = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(reference_pba)
#: PIL's call of every op (the contract, section 1), NEAREST: ``op(img, magnitude, fill, rng)``.
PIL_OPS = reference_pba.PIL_OPS

NEAREST, BILINEAR = InterpolationMode.NEAREST, InterpolationMode.BILINEAR
GEOMETRIC = [spec.name for spec in OPS if spec.geometric]
SIZES = ["32x32", "24x40", "64x64", "240x300"]  # height x width


def sized(cifar_images: torch.Tensor, size: str, n: int) -> torch.Tensor:
    """``n`` real images of ``size``: CIFAR-10 images, pixels repeated to grow them, then cropped."""
    h, w = (int(v) for v in size.split("x"))
    factor = -(-max(h, w) // 32)
    x = cifar_images[:n].repeat_interleave(factor, -2).repeat_interleave(factor, -1)
    return x[..., :h, :w].contiguous()


def pil_images(x: torch.Tensor, mode: str) -> list[PIL.Image.Image]:
    return [to_pil_image(image) if mode == "RGB" else to_pil_image(image).convert("L") for image in x]


def as_tensor(img: PIL.Image.Image) -> torch.Tensor:
    return pil_to_tensor(img)


def one_op(op: str, magnitude: float | None) -> Schedule:
    """Every image gets ``op`` (one slot, p = 1, K = 1 always); signed ops draw their sign."""
    prob = np.zeros((2, NUM_OPS))
    mag = np.array([[s.low if s.has_magnitude else np.nan for s in OPS]] * 2)
    k = OP_NAMES.index(op)
    prob[0, k] = 1.0
    if magnitude is not None:
        mag[0, k] = magnitude
    return Schedule.constant(prob, mag, count_probs=(0.0, 1.0), name=op)


def magnitude_at(op: str, fraction: float) -> float | None:
    spec = OPS[OP_NAMES.index(op)]
    return None if not spec.has_magnitude else spec.low + fraction * (spec.high - spec.low)


def rich_schedule(seed: int = 0) -> Schedule:
    """Every slot p = 0.5 at a random magnitude of its range."""
    rng = np.random.default_rng(seed)
    mag = np.array([[rng.uniform(s.low, s.high) if s.has_magnitude else np.nan for s in OPS] for _ in range(2)])
    return Schedule.constant(np.full((2, NUM_OPS), 0.5), mag, name="rich")


def twins(transform: HBAPolicy, pils: list, tensors: torch.Tensor, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each image once as PIL and once as a tensor, one generator from ``seed`` for each run; the runs must
    consume the same draws."""
    g = torch.Generator().manual_seed(seed)
    outs = [transform(img, generator=g) for img in pils]
    state = g.get_state()
    g = torch.Generator().manual_seed(seed)
    expected = torch.stack([transform(t, generator=g) for t in tensors])
    assert torch.equal(state, g.get_state()), "the PIL and tensor paths drew differently"
    for img, out in zip(pils, outs, strict=True):
        assert isinstance(out, PIL.Image.Image) and out.mode == img.mode and out.size == img.size
    return torch.stack([as_tensor(out) for out in outs]), expected


def level_diff(a: torch.Tensor, b: torch.Tensor) -> int:
    return int((a.to(torch.int16) - b.to(torch.int16)).abs().max())


def absent_fill(x: torch.Tensor) -> tuple[int, int, int]:
    """An RGB colour that no pixel of the RGB images ``x`` has (every painted pixel is then a changed one)."""
    for fill in [(7, 201, 33), (3, 250, 111), (254, 1, 128)]:
        if not (x == torch.tensor(fill, dtype=x.dtype).view(1, 3, 1, 1)).all(dim=1).any():
            return fill
    raise AssertionError("test set-up: every candidate fill colour occurs in the images")


#: No slot ever fires.
NOTHING = Schedule.constant(
    np.zeros((2, NUM_OPS)), np.array([[s.low if s.has_magnitude else np.nan for s in OPS]] * 2), name="nothing"
)


# ---------------------------------------------------------------------------------------------- one op
# Every op with both interpolations; interpolation matters to the geometric ops only, so the others take
# BILINEAR at one size.
ONE_OP_CASES = [
    pytest.param(op, interpolation, size, id=f"{op}-{interpolation.value}-{size}")
    for op in OP_NAMES
    for interpolation in (NEAREST, BILINEAR)
    for size in (SIZES if interpolation == NEAREST or op in GEOMETRIC else ["24x40"])
]


@pytest.mark.parametrize("fraction", [0.3, 0.9], ids=["m=0.3", "m=0.9"])
@pytest.mark.parametrize("mode", ["RGB", "L"])
@pytest.mark.parametrize(("op", "interpolation", "size"), ONE_OP_CASES)
def test_each_op_gives_the_tensor_paths_pixels(op, interpolation, size, mode, fraction, cifar_images):
    x = sized(cifar_images, size, 4 if size == "240x300" else 8)
    pils = pil_images(x, mode)
    tensors = torch.stack([as_tensor(img) for img in pils])
    transform = HBAPolicy(one_op(op, magnitude_at(op, fraction)), interpolation=interpolation, fill=None)
    out, expected = twins(transform, pils, tensors, seed=OP_NAMES.index(op))
    if interpolation == BILINEAR and op in GEOMETRIC:
        # PIL's BILINEAR against the kernels' grid_sample: the final rounding may differ (module docstring).
        assert level_diff(out, expected) <= 1
    else:
        assert torch.equal(out, expected), f"{op}: {(out != expected).any(dim=1).float().mean():.2%} pixels differ"
    if not (op == "Color" and mode == "L"):  # Color blends with the grey image: the identity on L
        assert (out != tensors).any(), f"{op} changed no image: the test would not see a wrong op"


@pytest.mark.parametrize("size", ["32x32", "24x40", "64x64"])
@pytest.mark.parametrize("mode", ["RGB", "L"])
@pytest.mark.parametrize("fill", [None, 77], ids=["fill=None", "fill=77"])
@pytest.mark.parametrize("op", [name for name in OP_NAMES if name != "Cutout"])
def test_each_op_is_pils_call(op, fill, mode, size, cifar_images):
    # The PIL path against the contract's PIL call (benchmarks/reference_pba.py) with the drawn signed magnitude.
    x = sized(cifar_images, size, 8)
    schedule = one_op(op, magnitude_at(op, 0.8))
    prob, mag = schedule.at(0)
    g = torch.Generator().manual_seed(3)
    for img in pil_images(x, mode):
        drawn = draw_one(prob, mag, schedule.count_probs, generator=g)
        (entry,) = drawn.entries
        magnitude = drawn.policy.table[0, entry].item()  # the float32 magnitude, sign flip included
        ink = 0 if fill is None else (fill if mode == "L" else (fill,) * 3)
        expected = PIL_OPS[op](img, magnitude, ink, None)
        out = augment_pil(img, drawn, fill=fill, generator=g)
        assert out.tobytes() == expected.tobytes(), f"{op} magnitude={magnitude}"


@pytest.mark.parametrize("fill", [None, 128, (10, 200, 90)], ids=["None", "number", "per-channel"])
@pytest.mark.parametrize("size", ["32x32", "24x40", "64x64"])
@pytest.mark.parametrize("op", GEOMETRIC)
def test_bilinear_is_pils_bilinear(op, size, fill, cifar_images):
    # BILINEAR on PIL is PIL's BILINEAR transform with the tensor path's AFFINE data (exactly), which is
    # within one level of PIL's own call of the op (Rotate: PIL builds its matrix in double precision)
    # and of the kernels.
    x = sized(cifar_images, size, 8)
    h, w = x.shape[-2:]
    schedule = one_op(op, magnitude_at(op, 0.9))
    prob, mag = schedule.at(0)
    spec = OPS[OP_NAMES.index(op)]
    g = torch.Generator().manual_seed(4)
    for img in pil_images(x, "RGB"):
        drawn = draw_one(prob, mag, schedule.count_probs, generator=g)
        magnitude = drawn.policy.table[0, drawn.entries[0]]
        data = tuple(spec.matrix(magnitude.view(1), h, w).flatten().tolist())
        ink = None if fill is None else (fill,) * 3 if isinstance(fill, int) else fill
        out = augment_pil(img, drawn, fill=fill, interpolation=BILINEAR, generator=g)
        pil = img.transform(img.size, PIL.Image.Transform.AFFINE, data, PIL.Image.Resampling.BILINEAR, fillcolor=ink)
        assert out.tobytes() == pil.tobytes()
        m = magnitude.item()
        if op == "Rotate":
            own = img.rotate(m, resample=PIL.Image.Resampling.BILINEAR, fillcolor=ink)
        else:
            own = img.transform(
                img.size, PIL.Image.Transform.AFFINE, data, PIL.Image.Resampling.BILINEAR, fillcolor=ink
            )
        assert level_diff(as_tensor(out), as_tensor(own)) <= 1
        kernel = augment_drawn(as_tensor(img), drawn, fill=fill, interpolation=BILINEAR)
        assert level_diff(as_tensor(out), kernel) <= 1


# ---------------------------------------------------------------------------------------------- templates
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("mode", ["RGB", "L"])
@pytest.mark.parametrize("fill", [None, 200, "per-channel", "list"])
def test_templates_give_the_tensor_paths_pixels(size, mode, fill, cifar_images):
    # Whole templates (up to 2 ops an image, several geometric ops in a row, Cutout's draws in between).
    if fill == "per-channel":
        fill = (10, 200, 90) if mode == "RGB" else (77,)
    elif fill == "list":
        fill = [255] if mode == "L" else [255, 0, 64]
    n = 8 if size == "240x300" else 48
    x = sized(cifar_images, size, n)
    pils = pil_images(x, mode)
    tensors = torch.stack([as_tensor(img) for img in pils])
    transform = HBAPolicy(rich_schedule(), fill=fill)
    out, expected = twins(transform, pils, tensors, seed=11)
    assert torch.equal(out, expected), f"{(out != expected).flatten(1).any(dim=1).sum()} images differ"
    assert 0 < (out != tensors).flatten(1).any(dim=1).sum() < n or n < 48


def test_templates_with_shared_default_generator(cifar_images):
    # torch.manual_seed reproduces the PIL path as it does the tensor path.
    x = cifar_images[:32]
    pils = pil_images(x, "RGB")
    transform = HBAPolicy(rich_schedule(1))
    torch.manual_seed(5)
    out = torch.stack([as_tensor(transform(img)) for img in pils])
    torch.manual_seed(5)
    expected = torch.stack([transform(t) for t in x])
    assert torch.equal(out, expected)


def test_cutout_paints_the_drawn_patch(cifar_images, cutout_structure):
    x = sized(cifar_images, "24x40", 32)
    fill = absent_fill(x)
    magnitude = 0.2
    transform = HBAPolicy(one_op("Cutout", magnitude), fill=fill)
    g = torch.Generator().manual_seed(6)
    out = torch.stack([as_tensor(transform(img, generator=g)) for img in pil_images(x, "RGB")])
    cutout_structure(x, out, magnitude, fill)
    patches = (out != x).any(dim=1)
    assert len({tuple(torch.nonzero(p)[0].tolist()) for p in patches}) > 8, "images share their patch positions"


# ---------------------------------------------------------------------------------------------- plumbing
def test_pil_images_never_become_tensors(cifar_images, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a PIL image went through the tensor path")

    monkeypatch.setattr(policy_module, "_pil_to_batch", refuse, raising=False)
    monkeypatch.setattr(policy_module, "augment", refuse, raising=False)
    transform = HBAPolicy(rich_schedule(), interpolation=BILINEAR)
    torch.manual_seed(0)
    outs = [transform(img) for img in pil_images(cifar_images[:32], "RGB")]
    assert all(isinstance(out, PIL.Image.Image) for out in outs)


def test_input_left_alone_and_a_new_image_returned(cifar_images):
    pils = pil_images(cifar_images[:16], "RGB")
    before = [img.tobytes() for img in pils]
    for schedule in (rich_schedule(), one_op("Cutout", 0.2), NOTHING):
        transform = HBAPolicy(schedule)
        for img in pils:
            assert transform(img) is not img
    assert [img.tobytes() for img in pils] == before


def test_file_backed_image(cifar_images, tmp_path):
    # A lazily loaded image (Image.open) gives the pixels of its loaded twin.
    path = tmp_path / "image.png"
    to_pil_image(cifar_images[0]).save(path)
    transform = HBAPolicy(rich_schedule(2))
    for seed in range(20):
        with PIL.Image.open(path) as lazy:
            out = transform(lazy, generator=torch.Generator().manual_seed(seed))
        expected = transform(to_pil_image(cifar_images[0]), generator=torch.Generator().manual_seed(seed))
        assert out.tobytes() == expected.tobytes()


@pytest.mark.parametrize("mode", ["L", "RGB"])
def test_lookup_is_image_point(mode, cifar_images):
    # _lookup skips Image.point's Python rounding of the table; it must stay Image.point's lookup.
    img = pil_images(cifar_images[:1], mode)[0]
    lut = torch.randint(0, 256, (256 * len(mode),), generator=torch.Generator().manual_seed(0)).tolist()
    assert _lookup(img, lut).tobytes() == img.point(lut).tobytes()
    assert _lookup(img, lut).mode == mode


def test_bad_arguments_are_reported_even_without_ops(cifar_images):
    prob, mag = NOTHING.at(0)
    drawn = draw_one(prob, mag)
    assert not drawn.entries
    rgb = pil_images(cifar_images[:1], "RGB")[0]
    with pytest.raises(ValueError, match="fill"):
        augment_pil(rgb, drawn, fill=(1, 2))
    with pytest.raises(ValueError, match="fill"):
        augment_pil(rgb.convert("L"), drawn, fill=(1, 2, 3))
    with pytest.raises(ValueError, match="fill"):
        augment_pil(rgb, drawn, fill=300)
    with pytest.raises(ValueError, match="interpolation"):
        augment_pil(rgb, drawn, interpolation=InterpolationMode.BICUBIC)
    with pytest.raises(ValueError, match="mode 'L' or 'RGB'"):
        augment_pil(rgb.convert("RGBA"), drawn)


def test_zero_size_image():
    schedule = one_op("Cutout", 0.2)
    drawn = draw_one(*schedule.at(0), schedule.count_probs)
    assert drawn.entries
    out = augment_pil(PIL.Image.new("RGB", (0, 0)), drawn)
    assert out.size == (0, 0) and out.mode == "RGB"
