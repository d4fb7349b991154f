"""HBAPolicy (the contract, sections 2 and 5): template statistics, epochs, workers, seeding, input types, validation."""

from __future__ import annotations

import copy
import multiprocessing
import pickle

import numpy as np
import PIL.Image
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info
from torchvision import transforms as T
from torchvision import tv_tensors
from torchvision.transforms import InterpolationMode, v2

from hba_augment import pretrained
from hba_augment.functional import NUM_OPS, OP_NAMES, OPS
from hba_augment.functional import _augment as augment_module
from hba_augment.policy import HBAPolicy
from hba_augment.schedule import Schedule

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
FORK = pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="no fork start method")


def policy_arrays(slots: dict[tuple[int, str], tuple[float, float | None]] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(2, 15) prob and mag: every slot p=0 at its lowest magnitude, except ``slots[(copy, op)] = (p, m)``."""
    prob = np.zeros((2, NUM_OPS))
    mag = np.array([[spec.low if spec.has_magnitude else np.nan for spec in OPS]] * 2)
    for (c, op), (p, m) in (slots or {}).items():
        k = OP_NAMES.index(op)
        prob[c, k] = p
        if m is not None:
            mag[c, k] = m
    return prob, mag


def schedule(slots=None, *, epochs=1, count_probs=(0.2, 0.3, 0.5), name="test") -> Schedule:
    return Schedule.constant(*policy_arrays(slots), epochs=epochs, count_probs=count_probs, name=name)


def rich_schedule(epochs: int = 1) -> Schedule:
    """Every slot fires with probability 0.5 at mid-range magnitude."""
    prob = np.full((2, NUM_OPS), 0.5)
    mag = np.array([[(s.low + s.high) / 2 if s.has_magnitude else np.nan for s in OPS]] * 2)
    return Schedule.constant(prob, mag, epochs=epochs, name="rich")


# K = 1 always, Invert always: every image comes out exactly inverted, whatever its container.
INVERT_ALL = schedule({(0, "Invert"): (1.0, None)}, count_probs=(0.0, 1.0), name="invert")
IDENTITY = schedule(name="identity")


def images(n: int, c: int = 3, size: int = 8, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    # 1..254 so that Invert and Posterize(8) change every image
    return torch.randint(1, 255, (n, c, size, size), dtype=torch.uint8, generator=g)


def changed(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return (out != x).flatten(1).any(dim=1)


# ---------------------------------------------------------------------------------------- template statistics
N = 3000  # standard error of a fraction near 0.8: sqrt(0.16 / 3000) = 0.0073


@pytest.mark.parametrize(
    ("copy_", "op", "m"),
    [(0, "Invert", None), (1, "Invert", None), (0, "Posterize", 8.0), (1, "Rotate", 30.0), (0, "Brightness", 1.9)],
)
def test_single_certain_slot_fires_on_80_percent(copy_, op, m):
    # With count_probs (0.2, 0.3, 0.5), the slot is applied whenever K >= 1: P = 0.8.
    policy = HBAPolicy(schedule({(copy_, op): (1.0, m)}))
    x = images(N)
    torch.manual_seed(0)
    assert changed(policy(x), x).float().mean().item() == pytest.approx(0.8, abs=0.04)


@pytest.mark.parametrize(("count_probs", "expected"), [((0.5, 0.5), 0.5), ((1.0,), 0.0), ((0.0, 0.0, 1.0), 1.0)])
def test_count_probs_drive_the_rate(count_probs, expected):
    policy = HBAPolicy(schedule({(0, "Invert"): (1.0, None)}, count_probs=count_probs))
    x = images(N)
    torch.manual_seed(1)
    assert changed(policy(x), x).float().mean().item() == pytest.approx(expected, abs=0.04)


def test_two_certain_inverts_leave_30_percent_changed():
    # K=0: untouched (0.2); K=1: inverted once (0.3); K=2: inverted twice = untouched (0.5).
    policy = HBAPolicy(schedule({(0, "Invert"): (1.0, None), (1, "Invert"): (1.0, None)}))
    x = images(N)
    torch.manual_seed(2)
    out = policy(x)
    moved = changed(out, x)
    assert moved.float().mean().item() == pytest.approx(0.3, abs=0.04)
    torch.testing.assert_close(out[moved], 255 - x[moved], rtol=0, atol=0)
    torch.testing.assert_close(out[~moved], x[~moved], rtol=0, atol=0)


def test_slot_probability_is_used():
    # One slot with p = 0.5 and K >= 1 always: about half the images change.
    policy = HBAPolicy(schedule({(1, "Invert"): (0.5, None)}, count_probs=(0.0, 1.0)))
    x = images(N)
    torch.manual_seed(3)
    assert changed(policy(x), x).float().mean().item() == pytest.approx(0.5, abs=0.04)


@pytest.mark.parametrize(
    ("dtype", "size", "interpolation"),
    [
        (torch.uint8, 32, InterpolationMode.NEAREST),
        (torch.float32, 32, InterpolationMode.NEAREST),
        (torch.uint8, 64, InterpolationMode.NEAREST),
        # BILINEAR warps have no uint8 kernel: their rows of a uint8 batch go through float levels.
        (torch.uint8, 64, InterpolationMode.BILINEAR),
    ],
)
@pytest.mark.parametrize("count_probs", [(0.2, 0.3, 0.5), (0.0, 0.0, 0.0, 1.0)])
@pytest.mark.parametrize("chunk_bytes", [None, 5000, 20000])  # whole; parts of 1 image; parts of several
def test_single_images_draw_like_batch_rows(dtype, size, interpolation, count_probs, chunk_bytes, cifar_images, monkeypatch):
    # A single image takes its own code path (host-side picking, for speed); it must be the same template
    # on the same draws: with one generator, B single calls give the rows of one batched call. Cutout is
    # left out, as it draws its centres after the template (per call, not per image). chunk_bytes: large
    # CPU batches go in parts, each drawing in turn, which gives the same rows again.
    if chunk_bytes is not None:
        monkeypatch.setattr(augment_module, "_CHUNK_BYTES", chunk_bytes)
    prob = np.full((2, NUM_OPS), 0.5)
    prob[:, OP_NAMES.index("Cutout")] = 0.0
    prob[1, OP_NAMES.index("Invert")] = 0.0  # a p = 0 slot: never drawn on either path
    mag = rich_schedule().at(0)[1].numpy()
    policy = Schedule.constant(prob, mag, count_probs=count_probs)
    x = cifar_images[:48].repeat_interleave(size // 32, -1).repeat_interleave(size // 32, -2)
    x = x if dtype == torch.uint8 else x.float() / 255
    transform = HBAPolicy(policy, interpolation=interpolation)
    batched = transform(x, generator=torch.Generator().manual_seed(5))
    g = torch.Generator().manual_seed(5)
    singles = torch.stack([transform(image, generator=g) for image in x])
    torch.testing.assert_close(singles, batched, rtol=0, atol=0)
    assert changed(batched, x).sum() >= 24  # the draws did something


def test_per_image_independence_in_a_batch():
    x = images(1).expand(64, -1, -1, -1).contiguous()  # 64 copies of one image
    torch.manual_seed(4)
    out = HBAPolicy(rich_schedule())(x)
    distinct = {bytes(o.numpy()) for o in out}
    assert len(distinct) >= 16  # one shared draw would give a single distinct output
    # The 80% slot also splits an identical batch into changed and unchanged images.
    torch.manual_seed(4)
    moved = changed(HBAPolicy(schedule({(0, "Invert"): (1.0, None)}))(x), x)
    assert 0 < moved.sum() < 64


# ---------------------------------------------------------------------------------------- epochs
def two_phase(total_epochs: int | None = 10) -> HBAPolicy:
    """Entry 0: nothing fires; entry 1: every image inverted."""
    prob = np.stack([policy_arrays()[0], policy_arrays({(0, "Invert"): (1.0, None)})[0]])
    mag = np.stack([policy_arrays()[1]] * 2)
    return HBAPolicy(Schedule(prob, mag, count_probs=(0.0, 1.0), name="two-phase"), total_epochs=total_epochs)


def test_epoch_scaling():
    policy = two_phase(total_epochs=10)
    x = images(16)
    for epoch in range(12):
        policy.set_epoch(epoch)
        expected = x if epoch < 5 else 255 - x  # entry min(floor(e * 2 / 10), 1)
        torch.testing.assert_close(policy(x), expected, rtol=0, atol=0)
        prob, _ = policy.policy_at()
        assert prob.sum().item() == (0 if epoch < 5 else 1)


def test_epoch_default_total_is_schedule_length():
    policy = two_phase(total_epochs=None)
    x = images(4)
    torch.testing.assert_close(policy(x), x)
    policy.step()
    torch.testing.assert_close(policy(x), 255 - x)


def test_set_epoch_step_and_property():
    policy = two_phase()
    assert policy.epoch == 0
    policy.step()
    policy.step()
    assert policy.epoch == 2
    policy.set_epoch(7)
    assert policy.epoch == 7
    policy.epoch = 3
    assert policy.epoch == 3
    policy.set_epoch(np.int64(4))
    assert policy.epoch == 4
    assert policy._epoch.is_shared()


# ---------------------------------------------------------------------------------------- DataLoader workers
class EpochDataset(Dataset):
    """Returns, per item, the epoch the worker sees, whether the policy changed the image, and the worker id."""

    def __init__(self, policy: HBAPolicy, n: int = 8) -> None:
        self.policy = policy
        self.image = images(1, size=6)[0]
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        out = self.policy(self.image)
        info = get_worker_info()
        return self.policy.epoch, bool((out != self.image).any()), -1 if info is None else info.id


def run_epochs(policy: HBAPolicy, loader: DataLoader, epochs: int) -> list[tuple[list[int], list[bool], set[int]]]:
    seen = []
    for epoch in range(epochs):
        policy.set_epoch(epoch)
        epochs_seen, moved, workers = [], [], set()
        for e, c, w in loader:
            epochs_seen += e.tolist()
            moved += c.tolist()
            workers |= set(w.tolist())
        seen.append((epochs_seen, moved, workers))
    return seen


def check_epochs_reach_workers(context: str, persistent: bool, num_workers: int = 2) -> None:
    policy = two_phase(total_epochs=4)
    loader = DataLoader(
        EpochDataset(policy),
        batch_size=2,
        num_workers=num_workers,
        persistent_workers=persistent,
        multiprocessing_context=context,
    )
    for epoch, (epochs_seen, moved, workers) in enumerate(run_epochs(policy, loader, 4)):
        assert epochs_seen == [epoch] * 8
        assert moved == [epoch >= 2] * 8  # entry 1 (invert everything) from epoch 2 of 4
        assert workers == set(range(num_workers))


@FORK
@pytest.mark.parametrize("persistent", [True, False])
def test_epoch_reaches_forked_workers(persistent):
    check_epochs_reach_workers("fork", persistent)


@pytest.mark.slow
def test_epoch_reaches_spawned_persistent_workers():
    # Spawned workers unpickle the policy; the epoch must stay shared with the main process. One worker:
    # each spawned process re-imports torch, which is most of this test's time.
    check_epochs_reach_workers("spawn", persistent=True, num_workers=1)


class ImageDataset(Dataset):
    def __init__(self, policy: HBAPolicy) -> None:
        self.policy = policy
        self.image = images(1, size=8)[0]

    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int):
        return self.policy(self.image), get_worker_info().id


@FORK
def test_workers_draw_differently_and_seed_reproduces():
    def outputs(seed: int) -> dict[int, torch.Tensor]:
        loader = DataLoader(ImageDataset(HBAPolicy(rich_schedule())), batch_size=8, num_workers=2,
                            multiprocessing_context="fork")
        torch.manual_seed(seed)  # DataLoader derives the worker seeds from torch's RNG
        return {int(w[0]): x for x, w in loader}

    a, b, c = outputs(0), outputs(0), outputs(1)
    assert sorted(a) == [0, 1]
    assert not torch.equal(a[0], a[1])  # worker 0 and worker 1 augment the same image differently
    for w in (0, 1):
        torch.testing.assert_close(a[w], b[w], rtol=0, atol=0)
    assert not torch.equal(a[0], c[0])


# ---------------------------------------------------------------------------------------- seeding
def test_manual_seed_reproduces():
    policy = HBAPolicy(rich_schedule())
    x = images(32)
    torch.manual_seed(5)
    a = policy(x)
    torch.manual_seed(5)
    b = policy(x)
    c = policy(x)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.equal(b, c)


def test_generator_keyword():
    policy = HBAPolicy(rich_schedule())
    x = images(32)
    a = policy(x, generator=torch.Generator().manual_seed(6))
    torch.manual_seed(0)
    state = torch.get_rng_state()
    b = policy(x, generator=torch.Generator().manual_seed(6))
    assert torch.equal(torch.get_rng_state(), state)  # the default generator is left alone
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    img = T.functional.to_pil_image(x[0])
    pa = policy(img, generator=torch.Generator().manual_seed(7))
    pb = policy(img, generator=torch.Generator().manual_seed(7))
    assert np.array_equal(np.asarray(pa), np.asarray(pb))


# ---------------------------------------------------------------------------------------- input types
@pytest.mark.parametrize("size", [(9, 9), (96, 72)])  # small images cross as pixels, large ones as planes
def test_pil_rgb_and_l(size):
    policy = HBAPolicy(INVERT_ALL)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(1, 255, (3, size[1], size[0]), dtype=torch.uint8, generator=g)
    rgb = T.functional.to_pil_image(x)
    assert rgb.size == size
    out = policy(rgb)
    assert isinstance(out, PIL.Image.Image) and out.mode == "RGB" and out.size == rgb.size
    assert np.array_equal(np.asarray(out), 255 - np.asarray(rgb))
    gray = rgb.convert("L")
    out = policy(gray)
    assert out.mode == "L" and out.size == gray.size
    assert np.array_equal(np.asarray(out), 255 - np.asarray(gray))
    # A rotation keeps the channels and pixels where the tensor path puts them.
    rotate = HBAPolicy(schedule({(0, "Rotate"): (1.0, 20.0)}, count_probs=(0.0, 1.0)))
    torch.manual_seed(0)
    out = rotate(rgb)
    torch.manual_seed(0)
    assert np.array_equal(np.asarray(out), rotate(x).permute(1, 2, 0).numpy())


@pytest.mark.parametrize("size", [32, 64])
def test_pil_and_tensor_images_draw_alike(size, cifar_images):
    # PIL images draw their template before conversion (to skip it when no op applies): the same draws,
    # hence the same results, as their tensor twins; Cutout's centres included.
    policy = HBAPolicy(rich_schedule())
    x = cifar_images[:40].repeat_interleave(size // 32, -1).repeat_interleave(size // 32, -2)
    pils = [T.functional.to_pil_image(image) for image in x]
    torch.manual_seed(7)
    from_pil = [policy(image) for image in pils]
    torch.manual_seed(7)
    from_tensor = [policy(image) for image in x]
    for image, out, expected in zip(pils, from_pil, from_tensor, strict=True):
        assert out is not image
        assert np.array_equal(np.asarray(out), expected.permute(1, 2, 0).numpy())
    assert 0 < sum(not torch.equal(o, i) for o, i in zip(from_tensor, x, strict=True)) < len(x)


@pytest.mark.parametrize("shape", [(3, 5, 7), (1, 5, 7), (4, 3, 5, 7), (2, 3, 1, 5, 7), (0, 3, 5, 7)])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.float64])
def test_tensor_shapes_and_dtypes(shape, dtype):
    x = torch.rand(shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    x = (x * 255).round().to(torch.uint8) if dtype == torch.uint8 else x.to(dtype)
    before = x.clone()
    out = HBAPolicy(INVERT_ALL)(x)
    assert out.shape == x.shape and out.dtype == dtype and out.device == x.device
    expected = 255 - x if dtype == torch.uint8 else 1 - x
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-6)
    torch.testing.assert_close(x, before, rtol=0, atol=0)  # input untouched


@pytest.mark.parametrize(
    ("op", "m"),
    [("Invert", None), ("Solarize", 100.0), ("Posterize", 3.0), ("Brightness", 1.3), ("Contrast", 0.4),
     ("AutoContrast", None), ("Equalize", None)],
)
@pytest.mark.parametrize("copy_", [0, 1])
@pytest.mark.parametrize("size", [32, 64])  # single images below 64x64 use the cached tables
def test_pointwise_ops_in_the_template_are_the_ops(op, m, copy_, size, cifar_images):
    # One certain slot, one op per image: the template's lookups (tables cached per policy entry, merged
    # per step) must give exactly apply_op's result, for a batch and for single images.
    from hba_augment.functional import apply_op

    policy = HBAPolicy(schedule({(copy_, op): (1.0, m)}, count_probs=(0.0, 1.0)))
    x = cifar_images[:16].repeat_interleave(size // 32, -1).repeat_interleave(size // 32, -2)
    expected = apply_op(x, op, m)
    torch.testing.assert_close(policy(x), expected, rtol=0, atol=0)
    torch.testing.assert_close(torch.stack([policy(image) for image in x]), expected, rtol=0, atol=0)


@pytest.mark.parametrize("chunk_bytes", [None, 5000])
def test_per_image_policies_draw_like_single_calls(chunk_bytes, cifar_images, monkeypatch):
    # The search's case: a (B, 2, 15) policy, one row per image, also when a CPU batch goes in parts.
    from hba_augment.functional import augment

    if chunk_bytes is not None:
        monkeypatch.setattr(augment_module, "_CHUNK_BYTES", chunk_bytes)
    x = cifar_images[:40]
    g = torch.Generator().manual_seed(8)
    prob = torch.rand(len(x), 2, NUM_OPS, generator=g)
    prob[:, :, OP_NAMES.index("Cutout")] = 0.0
    low = torch.tensor([s.low if s.has_magnitude else 0.0 for s in OPS])
    high = torch.tensor([s.high if s.has_magnitude else 0.0 for s in OPS])
    mag = low + (high - low) * torch.rand(len(x), 2, NUM_OPS, generator=g)
    batched = augment(x, prob, mag, generator=torch.Generator().manual_seed(9))
    g = torch.Generator().manual_seed(9)
    singles = torch.stack([augment(x[i], prob[i], mag[i], generator=g) for i in range(len(x))])
    torch.testing.assert_close(singles, batched, rtol=0, atol=0)
    assert changed(batched, x).sum() >= 20


@pytest.mark.parametrize("size", [32, 64])
@pytest.mark.parametrize("ops", [("ShearX", "Invert", "Posterize"), tuple(OP_NAMES)])
def test_batch_input_untouched_when_rows_are_written(ops, size, cifar_images):
    # uint8 batches stay uint8 through the integer ops, whose results are written into the drawing rows:
    # never into the caller's tensor.
    prob = np.zeros((2, NUM_OPS))
    prob[:, [OP_NAMES.index(op) for op in ops]] = 0.5
    original = cifar_images.repeat_interleave(size // 32, -1).repeat_interleave(size // 32, -2)
    x = original.clone()
    torch.manual_seed(6)
    out = HBAPolicy(Schedule.constant(prob, rich_schedule().at(0)[1].numpy()))(x)
    torch.testing.assert_close(x, original, rtol=0, atol=0)
    assert 0 < changed(out, x).sum() < len(x)  # some rows written, not all


def test_leading_dims_draw_per_image():
    x = images(60).reshape(6, 10, 3, 8, 8)
    torch.manual_seed(8)
    moved = changed(HBAPolicy(schedule({(0, "Invert"): (1.0, None)}))(x).flatten(0, 1), x.flatten(0, 1))
    assert moved.float().mean().item() == pytest.approx(0.8, abs=0.2)
    assert 0 < moved.sum() < 60


def test_non_contiguous_input():
    x = images(4, size=6).permute(0, 1, 3, 2)  # a transposed view
    assert not x.is_contiguous()
    torch.testing.assert_close(HBAPolicy(INVERT_ALL)(x), 255 - x, rtol=0, atol=0)


def test_tv_tensors_image():
    policy = HBAPolicy(INVERT_ALL)
    for x in (images(1)[0], images(3)):
        img = tv_tensors.Image(x)
        out = policy(img)
        assert type(out) is tv_tensors.Image
        torch.testing.assert_close(out.as_subclass(torch.Tensor), 255 - x, rtol=0, atol=0)


def test_v1_compose():
    pil = T.functional.to_pil_image(images(1, size=10)[0])
    pipeline = T.Compose([T.RandomHorizontalFlip(p=0.0), HBAPolicy(INVERT_ALL), T.PILToTensor()])
    out = pipeline(pil)
    assert out.dtype == torch.uint8 and out.shape == (3, 10, 10)
    torch.testing.assert_close(out, 255 - T.functional.pil_to_tensor(pil), rtol=0, atol=0)
    tensor_pipeline = T.Compose([T.ConvertImageDtype(torch.float32), HBAPolicy(INVERT_ALL)])
    x = images(2)
    torch.testing.assert_close(tensor_pipeline(x), 1 - x.float() / 255, rtol=0, atol=1e-6)


def test_v2_compose():
    x = images(1, size=10)[0]
    pil = v2.functional.to_pil_image(x)
    pipeline = v2.Compose([v2.RandomHorizontalFlip(p=0.0), HBAPolicy(INVERT_ALL), v2.PILToTensor()])
    torch.testing.assert_close(pipeline(pil), 255 - x, rtol=0, atol=0)

    pipeline = v2.Compose([v2.ToImage(), HBAPolicy(INVERT_ALL), v2.ToDtype(torch.float32, scale=True)])
    out = pipeline(pil)
    assert type(out) is tv_tensors.Image and out.dtype == torch.float32
    torch.testing.assert_close(out.as_subclass(torch.Tensor), (255 - x).float() / 255, rtol=0, atol=1e-6)

    # Samples: the image is augmented, the rest passes through (as with v2's AutoAugment).
    img, label = pipeline(pil, 3)
    assert label == 3 and type(img) is tv_tensors.Image
    sample = v2.Compose([HBAPolicy(INVERT_ALL)])({"image": x, "label": torch.tensor(7), "name": "a"})
    torch.testing.assert_close(sample["image"], 255 - x, rtol=0, atol=0)
    assert sample["label"].item() == 7 and sample["name"] == "a"
    # With an explicit image, pure tensors are passed through.
    out_img, extra = HBAPolicy(INVERT_ALL)(tv_tensors.Image(x), x)
    assert torch.equal(extra, x) and torch.equal(out_img.as_subclass(torch.Tensor), 255 - x)
    out_pil, extra = HBAPolicy(INVERT_ALL)((pil, x))
    assert torch.equal(extra, x) and np.array_equal(np.asarray(out_pil), 255 - np.asarray(pil))


def test_interpolation_and_fill_reach_the_kernels():
    # Rotate by +-30 degrees always: the corners are uncovered and take the fill value.
    sched = schedule({(0, "Rotate"): (1.0, 30.0)}, count_probs=(0.0, 1.0))
    x = torch.full((8, 3, 16, 16), 200, dtype=torch.uint8)
    for interpolation in (InterpolationMode.NEAREST, InterpolationMode.BILINEAR):
        out = HBAPolicy(sched, interpolation=interpolation, fill=[10, 20, 30])(x)
        assert out[:, :, 0, 0].tolist() == [[10, 20, 30]] * 8
        assert (out[:, :, 8, 8] == 200).all()
    out = HBAPolicy(sched)(x)
    assert (out[:, :, 0, 0] == 0).all()  # fill None: black
    out = HBAPolicy(sched, fill=0.5)(x.float() / 255)
    torch.testing.assert_close(out[:, :, 0, 0], torch.full((8, 3), 0.5))
    pil = HBAPolicy(sched, fill=(10, 20, 30))(T.functional.to_pil_image(x[0]))
    assert pil.getpixel((0, 0)) == (10, 20, 30)
    bilinear = HBAPolicy(sched, interpolation=InterpolationMode.BILINEAR)(images(8, size=16))
    nearest = HBAPolicy(sched, interpolation=InterpolationMode.NEAREST)(images(8, size=16))
    assert not torch.equal(bilinear, nearest)


@CUDA
@pytest.mark.cuda
def test_cuda_tensors():
    policy = HBAPolicy(INVERT_ALL)
    x = images(6).cuda()
    out = policy(x)
    assert out.device == x.device and out.dtype == torch.uint8
    torch.testing.assert_close(out, 255 - x, rtol=0, atol=0)
    img = tv_tensors.Image(x.float() / 255)
    out = policy(img)
    assert type(out) is tv_tensors.Image and out.is_cuda
    prob, mag = policy.policy_at(x.device)
    assert prob.is_cuda and mag.is_cuda
    torch.manual_seed(9)
    a = HBAPolicy(rich_schedule())(x)
    torch.manual_seed(9)
    b = HBAPolicy(rich_schedule())(x)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    g = torch.Generator(device="cuda").manual_seed(3)
    assert HBAPolicy(rich_schedule())(x, generator=g).is_cuda


# ---------------------------------------------------------------------------------------- construction
@pytest.fixture
def shipped(tmp_path, monkeypatch):
    folder = tmp_path / "shipped"
    folder.mkdir()
    schedule(name="cifar10").save(folder / "cifar10.json")
    monkeypatch.setattr(pretrained, "_policy_dir", lambda: folder)
    return folder


def test_policy_sources(shipped, tmp_path, monkeypatch):
    assert HBAPolicy().schedule.name == "cifar10"  # the default name, looked up in the shipped folder
    assert HBAPolicy("cifar10").schedule == Schedule.load(shipped / "cifar10.json")
    rich_schedule().save(tmp_path / "mine.json")
    assert HBAPolicy(tmp_path / "mine.json").schedule.name == "rich"
    assert HBAPolicy(str(tmp_path / "mine.json")).schedule.name == "rich"
    monkeypatch.chdir(tmp_path)
    assert HBAPolicy("mine.json").schedule.name == "rich"
    s = rich_schedule()
    assert HBAPolicy(s).schedule is s


def test_unknown_policy_lists_shipped(shipped):
    with pytest.raises(ValueError, match=r"Unknown policy 'svhn'.*shipped: \['cifar10'\]"):
        HBAPolicy("svhn")


def test_nothing_shipped(tmp_path, monkeypatch):
    monkeypatch.setattr(pretrained, "_policy_dir", lambda: tmp_path)
    with pytest.raises(ValueError, match=r"Unknown policy 'cifar10'.*shipped: none"):
        HBAPolicy()


def test_bad_policy_file(tmp_path):
    with pytest.raises(ValueError, match=r"missing\.json: cannot read"):
        HBAPolicy(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text('{"format": "hba-schedule"')
    with pytest.raises(ValueError, match=r"bad\.json: not valid JSON"):
        HBAPolicy(str(tmp_path / "bad.json"))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"total_epochs": 0}, "total_epochs must be an integer >= 1, got 0"),
        ({"total_epochs": -3}, "total_epochs must be an integer >= 1"),
        ({"total_epochs": 10.0}, "total_epochs must be an integer >= 1"),
        ({"interpolation": InterpolationMode.BICUBIC}, "interpolation must be InterpolationMode.NEAREST or"),
        ({"interpolation": "cubic"}, "interpolation must be"),
        ({"interpolation": 3}, "interpolation must be"),  # PIL's BICUBIC (0 and 2 are NEAREST / BILINEAR)
        ({"interpolation": True}, "interpolation must be"),
        ({"fill": [1, 2]}, r"fill must have one value or one per channel \(images have 1 or 3 channels\), got 2"),
        ({"fill": {tv_tensors.Image: 300}}, r"fill\[Image\] must be"),
        ({"fill": {"image": 3}}, "fill dict keys must be types"),
        ({"fill": "black"}, "fill must be None, a number or a sequence"),
        ({"fill": -1}, "fill must be"),
        ({"fill": 256}, "fill must be"),
        ({"fill": True}, "fill must be"),
        ({"fill": []}, "fill must be"),
        ({"fill": [1, "a"]}, "fill must be"),
        ({"fill": float("nan")}, "fill must be"),
    ],
)
def test_constructor_validation(kwargs, match):
    kwargs.setdefault("policy", IDENTITY)
    with pytest.raises(ValueError, match=match):
        HBAPolicy(**kwargs)


@pytest.mark.parametrize(("policy", "named"), [(3, "int 3"), (None, "NoneType None"), (b"cifar10", "bytes")])
def test_policy_of_an_unsupported_type(policy, named):
    with pytest.raises(TypeError, match=f"policy must be a shipped schedule name, a path.*got {named}"):
        HBAPolicy(policy)


def test_interpolation_strings_accepted():
    assert HBAPolicy(IDENTITY, interpolation="bilinear").interpolation is InterpolationMode.BILINEAR


@pytest.mark.parametrize("epoch", [-1, 1.5, True, "2", None])
def test_epoch_validation(epoch):
    policy = HBAPolicy(IDENTITY)
    policy.set_epoch(2)
    with pytest.raises(ValueError, match="epoch must be an integer >= 0"):
        policy.set_epoch(epoch)
    with pytest.raises(ValueError, match="epoch must be an integer >= 0"):
        policy.epoch = epoch
    assert policy.epoch == 2


@pytest.mark.parametrize(
    ("make_input", "error", "match"),
    [
        (lambda: PIL.Image.new("RGBA", (4, 4)), ValueError, "mode 'L' or 'RGB', got 'RGBA'"),
        (lambda: PIL.Image.new("P", (4, 4)), ValueError, "got 'P'"),
        (lambda: torch.zeros(4, 4, dtype=torch.uint8), ValueError, r"\[\.\.\., C, H, W\], got \(4, 4\)"),
        (lambda: torch.zeros(3, 4, 4, dtype=torch.int32), ValueError, "uint8 or floating point, got dtype torch.int32"),
        (lambda: np.zeros((4, 4, 3), dtype=np.uint8), TypeError, "numpy.ndarray are not supported"),
        (lambda: [T.functional.to_pil_image(images(1)[0])] * 2, TypeError, "found 2"),
        (lambda: (tv_tensors.Image(images(1)[0]), tv_tensors.Image(images(1)[0])), TypeError, "found 2"),
        (lambda: (tv_tensors.Video(images(2)), tv_tensors.Mask(torch.zeros(8, 8))), TypeError, "Mask are not supported"),
        (lambda: ("a", 1), TypeError, "found 0"),
    ],
)
def test_bad_inputs(make_input, error, match):
    with pytest.raises(error, match=match):
        HBAPolicy(IDENTITY)(make_input())


def test_bad_fill_for_the_image_is_reported():
    policy = HBAPolicy(INVERT_ALL, fill=[1, 2, 3])
    with pytest.raises(ValueError, match=r"fill must have one value for images of 1 channel, got 3"):
        policy(images(2, c=1))  # 1 channel, 3 fill values
    with pytest.raises(ValueError, match="fill"):
        HBAPolicy(INVERT_ALL, fill=128)(images(2).float() / 255)  # float images use [0, 1]
    # Also when the image draws no op (a PIL image is then copied without conversion).
    for schedule_ in (INVERT_ALL, IDENTITY):
        with pytest.raises(ValueError, match="fill"):
            HBAPolicy(schedule_, fill=[1, 2, 3])(T.functional.to_pil_image(images(1, c=1)[0]))


def test_no_input():
    with pytest.raises(TypeError, match="needs an image"):
        HBAPolicy(IDENTITY)()


# ---------------------------------------------------------------------------------------- repr, pickle, state
def test_repr():
    policy = HBAPolicy(schedule(name="cifar10"), total_epochs=200)
    policy.set_epoch(3)
    assert repr(policy) == (
        "HBAPolicy(policy=cifar10, epoch=3, total_epochs=200, interpolation=InterpolationMode.NEAREST, fill=None)"
    )
    policy = HBAPolicy(IDENTITY, interpolation=InterpolationMode.BILINEAR, fill=(1, 2, 3))
    assert repr(policy) == (
        "HBAPolicy(policy=identity, epoch=0, total_epochs=None, interpolation=InterpolationMode.BILINEAR, fill=(1, 2, 3))"
    )
    assert "HBAPolicy(policy=identity" in repr(T.Compose([policy]))


def test_pickle_and_copies():
    policy = HBAPolicy(rich_schedule(epochs=4), total_epochs=8, fill=5)
    policy.set_epoch(6)
    policy(images(2))  # fills the per-device cache
    x = images(16)
    for other in (pickle.loads(pickle.dumps(policy)), copy.deepcopy(policy)):
        assert repr(other) == repr(policy)
        assert other.schedule == policy.schedule
        torch.manual_seed(10)
        a = policy(x)
        torch.manual_seed(10)
        torch.testing.assert_close(other(x), a, rtol=0, atol=0)
        other.set_epoch(1)  # copies are independent of the original
        assert policy.epoch == 6


def test_state_dict_carries_the_epoch():
    policy = HBAPolicy(IDENTITY)
    policy.set_epoch(11)
    restored = HBAPolicy(IDENTITY)
    restored.load_state_dict(policy.state_dict())
    assert restored.epoch == 11


def test_policy_cache_follows_the_epoch():
    policy = two_phase(total_epochs=2)
    p0, _ = policy.policy_at("cpu")
    assert policy.policy_at("cpu")[0] is p0  # cached
    policy.set_epoch(1)
    p1, m1 = policy.policy_at("cpu")
    assert p1.sum().item() == 1 and p1.dtype == torch.float32 and m1.shape == (2, NUM_OPS)


def test_the_epoch_is_checked_once_on_the_way_in_not_per_call(monkeypatch):
    # set_epoch and the constructor check epoch and total_epochs; a call only looks the entry up. (It
    # went through Schedule.index and then Schedule.at(index), which checked both again, on every image.)
    from hba_augment import schedule as schedule_module

    policy = two_phase(total_epochs=10)
    policy.set_epoch(7)
    checked = []
    monkeypatch.setattr(schedule_module, "_check_int", lambda value, *args: checked.append(value) or value)
    x = images(4)
    torch.testing.assert_close(policy(x), 255 - x)
    pil = policy(T.functional.to_pil_image(x[0]))
    assert np.array_equal(np.asarray(pil), 255 - x[0].permute(1, 2, 0).numpy())
    assert checked == []
    assert policy.schedule.index(7, 10) == 1 and checked == [7, 10]  # the public lookup still checks


@pytest.mark.parametrize("end", ["low", "high"])
def test_range_ends_run(end):
    # Every slot certain, every magnitude at an end of its range (float64 -> float32 must stay inside).
    prob = np.ones((2, NUM_OPS))
    mag = np.array([[getattr(s, end) if s.has_magnitude else np.nan for s in OPS]] * 2)
    policy = HBAPolicy(Schedule.constant(prob, mag, count_probs=(0.0, 0.0, 1.0)))
    x = images(32)
    torch.manual_seed(11)
    out = policy(x)
    assert out.shape == x.shape and changed(out, x).any()


def test_a_schedule_assigned_later_is_used(cifar_images):
    """The per-device policy cache is keyed by the schedule too: assigning another one takes effect."""
    from hba_augment import Schedule
    from hba_augment.functional import OPS

    policy = HBAPolicy("cifar10")
    before = policy.policy_at("cpu")
    mag = np.array([[spec.low if spec.has_magnitude else np.nan for spec in OPS]] * 2)
    policy.schedule = Schedule.constant(np.zeros((2, 15)), mag, name="none")
    prob, _ = policy.policy_at("cpu")
    assert not torch.equal(prob, before[0]) and torch.count_nonzero(prob) == 0


# ---------------------------------------------------------------------------------------- cuda_graphs
def test_cuda_graphs_is_a_checked_option_shown_in_the_repr():
    with pytest.raises(TypeError, match="cuda_graphs must be a bool, got str"):
        HBAPolicy(IDENTITY, cuda_graphs="yes")
    policy = HBAPolicy(IDENTITY, cuda_graphs=True)
    assert repr(policy).endswith("fill=None, cuda_graphs=True)")
    assert pickle.loads(pickle.dumps(policy)).cuda_graphs is True


def test_cuda_graphs_change_nothing_off_cuda():
    # Off CUDA the captured call is the call itself: the same pixels for the same seed, nothing kept.
    x = images(16)
    eager, graphs = HBAPolicy(rich_schedule(epochs=4)), HBAPolicy(rich_schedule(epochs=4), cuda_graphs=True)
    for epoch in (0, 3):
        eager.set_epoch(epoch)
        graphs.set_epoch(epoch)
        torch.manual_seed(epoch)
        a = eager(x)
        torch.manual_seed(epoch)
        torch.testing.assert_close(graphs(x), a, rtol=0, atol=0)
    assert graphs._graphs == {}  # nothing captured off CUDA
    # The call a graph would capture (used on CUDA only) is the transform's own: the same pixels here too.
    policy = HBAPolicy(rich_schedule(epochs=4), interpolation=InterpolationMode.BILINEAR, fill=9, cuda_graphs=True)
    policy.set_epoch(2)
    captured = policy._captured(x, None, 9)
    torch.manual_seed(5)
    a = policy(x)
    torch.manual_seed(5)
    torch.testing.assert_close(captured(x, *policy.policy_at("cpu")), a, rtol=0, atol=0)


@CUDA
@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_cuda_graphs_replay_the_eager_pixels_across_epochs(dtype):
    """Warm-up, capture and replays of one batch shape, the epoch changing after the capture: every call gives
    the eager policy's pixels from the same generator state (the policy is an input of the graph)."""
    x = images(32).cuda()
    x = x if dtype == torch.uint8 else x.float() / 255
    eager, graphs = HBAPolicy(rich_schedule(epochs=8)), HBAPolicy(rich_schedule(epochs=8), cuda_graphs=True)
    g_eager, g_graphs = (torch.Generator(device="cuda").manual_seed(4) for _ in range(2))
    for call in range(8):
        for policy in (eager, graphs):
            policy.set_epoch(call)
        torch.testing.assert_close(graphs(x, generator=g_graphs), eager(x, generator=g_eager), rtol=0, atol=0)
    assert len(graphs._graphs) == 1 and next(iter(graphs._graphs.values())).captured
    short = x[:5]  # another shape: its own graph, the same pixels
    torch.testing.assert_close(graphs(short, generator=g_graphs), eager(short, generator=g_eager), rtol=0, atol=0)


# ---------------------------------------------------------------------------------------- compile
def test_compile_is_a_checked_option_shown_in_the_repr():
    with pytest.raises(TypeError, match=r"compile must be a bool or a mapping of torch\.compile's arguments, got 'yes'"):
        HBAPolicy(IDENTITY, compile="yes")
    policy = HBAPolicy(IDENTITY, compile={"mode": "max-autotune"})
    assert repr(policy).endswith("fill=None, compile={'mode': 'max-autotune'})")
    assert pickle.loads(pickle.dumps(policy)).compile_options == {"mode": "max-autotune"}
    assert callable(policy.compile)  # nn.Module.compile, not shadowed by the option
    assert repr(HBAPolicy(IDENTITY, cuda_graphs=True, compile=True)).endswith("cuda_graphs=True, compile=True)")
    # Inductor's own CUDA graphs cannot be captured inside the transform's.
    for options in ({"mode": "reduce-overhead"}, {"mode": "max-autotune"}, {"options": {"triton.cudagraphs": True}}):
        with pytest.raises(ValueError, match="both capture CUDA graphs: choose one"):
            HBAPolicy(IDENTITY, cuda_graphs=True, compile=options)
    HBAPolicy(IDENTITY, cuda_graphs=True, compile={"mode": "max-autotune-no-cudagraphs"})


def test_compile_reaches_the_batched_call_across_epochs(monkeypatch):
    """On the accelerators' path (forced here on the CPU) the transform's batches go through
    ``functional.augment``'s ``compile`` with the transform's options, epoch after epoch, and give the eager
    transform's pixels from the same generator. ``torch.compile`` is replaced by a recorder that returns the
    function itself: what the compiled pixel work gives is tested in ``test_augment_sync_free.py``."""
    monkeypatch.setattr(augment_module, "_FORCE_SYNC_FREE", True)
    monkeypatch.setattr(augment_module, "_COMPILED", {})
    compiled_with = []

    def recorder(function, **options):
        compiled_with.append(options)
        return function

    monkeypatch.setattr(torch, "compile", recorder)
    x = images(16, size=12)
    eager = HBAPolicy(rich_schedule(epochs=4), fill=7)
    compiled = HBAPolicy(rich_schedule(epochs=4), fill=7, compile={"dynamic": False})
    g_eager, g_compiled = (torch.Generator().manual_seed(3) for _ in range(2))
    for epoch in (0, 2, 3):
        eager.set_epoch(epoch)
        compiled.set_epoch(epoch)
        torch.testing.assert_close(compiled(x, generator=g_compiled), eager(x, generator=g_eager), rtol=0, atol=0)
    # Compiled once, with the options given (and the package's own settings among inductor's options).
    defaults = {**augment_module._EAGER_NUMERICS, **augment_module._FUSION}
    assert compiled_with == [{"fullgraph": True, "dynamic": False, "options": defaults}]


def test_torch_compile_of_the_transform_gives_its_pixels():
    """``torch.compile(policy)``, as users compile kornia's modules: on the CPU the grouped path, whose shapes
    depend on the draws, runs eagerly inside it (dynamo failed on it before), so the transform gives its
    eager pixels for the same seed, batches and single images. (The accelerators' path traces:
    ``test_augment_sync_free.py``.)"""
    policy = HBAPolicy(rich_schedule(epochs=4))
    policy.set_epoch(2)
    torch._dynamo.reset()
    compiled = torch.compile(policy, backend="aot_eager")
    for x in (images(8, size=12), images(1, size=12)[0]):
        torch.manual_seed(6)
        out = compiled(x)
        torch.manual_seed(6)
        torch.testing.assert_close(out, policy(x), rtol=0, atol=0)
