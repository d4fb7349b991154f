"""HBAPolicy against torchvision's own contract for its auto-augment transforms (issue 11).

Adapted from torchvision's test_transforms_v2.py (TestAutoAugmentTransforms) where HBAPolicy claims to be a
drop-in, with torchvision's transforms as the reference: input types and shapes, channel counts, float
ranges, empty images, fills, interpolations, scripting; and beyond torchvision's AutoAugment (which rejects
them): videos, and boxes, masks and key points that follow the image's geometric ops, checked against
``torchvision.transforms.v2.functional.affine`` on the same parameters.
"""

from __future__ import annotations

import math

import numpy as np
import PIL.Image
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torchvision import tv_tensors
from torchvision.transforms import InterpolationMode, v2
from torchvision.transforms.v2 import functional as TF

from hba_augment import HBAPolicy
from hba_augment import functional as HF
from hba_augment.functional import NUM_OPS, OP_NAMES, OPS
from hba_augment.functional import _augment as augment_module
from hba_augment.schedule import Schedule

pytestmark = pytest.mark.usefixtures("torch_single_thread")

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
GEOMETRIC = [spec.name for spec in OPS if spec.geometric]
POINTWISE = [spec.name for spec in OPS if not spec.geometric]


def schedule(ops: dict[str, float | None], count_probs=(0.0, 1.0), name="contract") -> Schedule:
    """Copy 0 of each op in ``ops`` fires with probability 1 at magnitude ``ops[op]``; K = 1 by default."""
    prob = np.zeros((2, NUM_OPS))
    mag = np.array([[spec.low if spec.has_magnitude else np.nan for spec in OPS]] * 2)
    for op, m in ops.items():
        prob[0, OP_NAMES.index(op)] = 1.0
        if m is not None:
            mag[0, OP_NAMES.index(op)] = m
    return Schedule.constant(prob, mag, count_probs=count_probs, name=name)


def rich(name="rich") -> Schedule:
    prob = np.full((2, NUM_OPS), 0.5)
    mag = np.array([[(s.low + s.high) / 2 if s.has_magnitude else np.nan for s in OPS]] * 2)
    return Schedule.constant(prob, mag, name=name)


INVERT = schedule({"Invert": None})


def tv_affine(inpt, op: str, m: float, canvas: tuple[int, int]):
    """torchvision's v2.functional.affine with the parameters of our op ``op`` at signed magnitude ``m``
    (the calls of torchvision's AutoAugment for ShearX/Y, Rotate; PBA's translation in pixels)."""
    height, width = canvas
    zero = {"angle": 0.0, "translate": [0, 0], "scale": 1.0, "shear": [0.0, 0.0]}
    if op == "ShearX":
        return TF.affine(inpt, **{**zero, "shear": [math.degrees(math.atan(m)), 0.0]}, center=[0, 0])
    if op == "ShearY":
        return TF.affine(inpt, **{**zero, "shear": [0.0, math.degrees(math.atan(m))]}, center=[0, 0])
    if op == "TranslateX":
        return TF.affine(inpt, **{**zero, "translate": [-round(m * width), 0]})
    if op == "TranslateY":
        return TF.affine(inpt, **{**zero, "translate": [0, -round(m * height)]})
    return TF.affine(inpt, **{**zero, "angle": -m})  # PIL and TF.rotate: counter-clockwise; affine: clockwise


def drawn_sign(out: torch.Tensor, image: torch.Tensor, op: str, m: float) -> float:
    """The signed magnitude the policy drew, read from the image: the op's output at +m or at -m."""
    matches = [s * m for s in (1.0, -1.0) if torch.equal(out, HF.apply_op(image, op, s * m))]
    assert matches, f"{op}: the image is neither the op at {m} nor at {-m}"
    return matches[0]


# ================================================================================== 1. inputs
LONE_TARGETS = [
    pytest.param(lambda: tv_tensors.Mask(torch.arange(64).view(8, 8) % 10), id="Mask"),
    pytest.param(lambda: tv_tensors.Mask(torch.zeros(1, 8, 8, dtype=torch.bool)), id="bool-Mask"),
    pytest.param(lambda: tv_tensors.BoundingBoxes([[0, 0, 2, 2]], format="XYXY", canvas_size=(8, 8)), id="BoundingBoxes"),
    pytest.param(lambda: tv_tensors.KeyPoints([[1.0, 2.0]], canvas_size=(8, 8)), id="KeyPoints"),
]


@pytest.mark.parametrize("make", LONE_TARGETS)
@pytest.mark.parametrize("wrap", ["alone", "v2.Compose"])
def test_lone_targets_raise_type_error_like_torchvision(make, wrap):
    # A lone Mask used to be augmented as images (labels 0..9 came back as {0, 1}, a plain Tensor).
    target = make()
    name = type(target).__name__
    for transform in (HBAPolicy(INVERT), v2.AutoAugment()):
        call = transform if wrap == "alone" else v2.Compose([transform])
        with pytest.raises(TypeError, match=f"Inputs of type {name} are not supported"):
            call(target)


@pytest.mark.parametrize(
    "shape", [(2, 8, 8), (4, 8, 8), (5, 2, 8, 8), (2, 4, 8, 8), (8, 8, 3), (2, 8, 8, 3), (8, 8, 1)], ids=str
)
def test_channels_other_than_1_or_3_rejected_every_call(shape):
    # They used to fail only when Contrast or Color was drawn (1 call in 10), or be read as C = H (HWC).
    # (torchvision's AutoAugment refuses them too, "permitted channel values are 1 or 3", but only when it
    # draws an op that checks, so that a test of it would be random.)
    x = torch.randint(0, 256, shape, dtype=torch.uint8)
    policy = HBAPolicy(rich())
    for seed in range(10):
        torch.manual_seed(seed)
        with pytest.raises(ValueError, match=rf"permitted channel values are 1 or 3.*{re_shape(shape)}"):
            policy(x)
    if len(shape) <= 4:
        with pytest.raises(ValueError, match="permitted channel values are 1 or 3"):
            HF.apply_op(x, "Invert")
        prob, mag = policy.policy_at()
        with pytest.raises(ValueError, match="permitted channel values are 1 or 3"):
            HF.augment(x, prob, mag)


def re_shape(shape) -> str:
    return str(tuple(shape)).replace("(", r"\(").replace(")", r"\)")


def test_channels_last_shape_gets_a_hint():
    with pytest.raises(ValueError, match=r"\(32, 32, 3\).*channels-last.*x\.permute\(2, 0, 1\)"):
        HBAPolicy(INVERT)(torch.zeros(32, 32, 3, dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"\(4, 32, 32, 3\).*channels-last.*x\.permute\(0, 3, 1, 2\)"):
        HBAPolicy(INVERT)(torch.zeros(4, 32, 32, 3, dtype=torch.uint8))


@pytest.mark.parametrize(
    ("values", "found"),
    [((0.0, 255.0), r"\[0, 255\].*ToDtype\(torch.float32, scale=True\)"), ((-0.5, 0.5), r"\[-0.5, "),
     ((0.0, math.nan), r"got \d+ NaN and 0 infinite"), ((0.0, math.inf), r"got 0 NaN and \d+ inf"),
     ((-math.inf, 1.0), r"got 0 NaN and \d+ inf")],
    ids=["0..255", "negative", "nan", "inf", "-inf"],
)
def test_float_images_outside_0_1_rejected_on_cpu(values, found, cifar_images):
    # ToDtype(torch.float32) without scale=True: Invert used to give -254..1.
    x = cifar_images[:4].float() / 255
    x[:, :, 0, 0] = values[0]
    x[:, :, -1, -1] = values[1]
    prob, mag = HBAPolicy(INVERT).policy_at()
    calls = [HBAPolicy(INVERT), lambda t: HF.apply_op(t, "Invert"), lambda t: HF.augment(t, prob, mag)]
    for call in calls:
        for images in (x, x[0]):
            with pytest.raises(ValueError, match=rf"float images must hold .*values in \[0, 1\].*{found}"):
                call(images)


@settings(max_examples=30, deadline=None)
@given(low=st.floats(-2.0, 2.0), high=st.floats(-2.0, 2.0))
def test_float_range_check_is_exact(low, high):
    x = torch.tensor([low, high, 0.5], dtype=torch.float64).view(1, 1, 3).expand(3, 1, 3).contiguous()
    inside = 0.0 <= min(low, high) and max(low, high) <= 1.0
    if inside:
        torch.testing.assert_close(HF.apply_op(x, "Invert"), 1 - x)
    else:
        with pytest.raises(ValueError, match=r"\[0, 1\]"):
            HF.apply_op(x, "Invert")


@CUDA
@pytest.mark.cuda
def test_float_range_not_checked_on_gpu():
    # Documented: a check would cost a host synchronisation per call; the GPU path does not pay it.
    x = torch.full((2, 3, 8, 8), 200.0, device="cuda")
    assert HBAPolicy(INVERT)(x).shape == x.shape


@pytest.mark.parametrize("shape", [(2, 3, 0, 0), (3, 0, 5), (1, 1, 4, 0), (0, 3, 0, 0)], ids=str)
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_images_without_pixels_pass_unchanged_like_torchvision(shape, dtype):
    x = torch.zeros(shape, dtype=dtype)
    expected = v2.AutoAugment()(x)  # torchvision returns them unchanged
    for out in (HBAPolicy(rich())(x), HF.apply_op(x, "Rotate", 10.0), HBAPolicy(rich())(tv_tensors.Image(x))):
        assert out.shape == expected.shape == x.shape and out.dtype == dtype


def test_numpy_array_named():
    with pytest.raises(TypeError, match=r"numpy\.ndarray are not supported.*permute"):
        HBAPolicy(INVERT)(np.zeros((8, 8, 3), dtype=np.uint8))
    with pytest.raises(TypeError, match=r"numpy\.ndarray"):
        HF.apply_op(np.zeros((3, 8, 8), dtype=np.uint8), "Invert")


@pytest.mark.parametrize("fill", [[1, 2], (1, 2, 3, 4), {tv_tensors.Image: [5, 6]}], ids=str)
def test_fill_of_wrong_length_rejected_at_construction(fill):
    # It used to be accepted, then fail inside a DataLoader worker.
    with pytest.raises(ValueError, match=r"one value or one per channel \(images have 1 or 3 channels\)"):
        HBAPolicy(INVERT, fill=fill)


def test_fill_length_message_for_grey_images():
    with pytest.raises(ValueError, match=r"fill must have one value for images of 1 channel, got 3"):
        HF.apply_op(torch.zeros(1, 4, 4, dtype=torch.uint8), "Rotate", 10.0, fill=(1, 2, 3))


# ================================================================================== 2. videos
def test_video_one_draw_for_all_frames(cifar_images):
    # Frame t of every video is the same image, so frames differ only if their draws do.
    frames = cifar_images[:5]
    video = tv_tensors.Video(frames.expand(12, -1, -1, -1, -1).clone())  # (12 videos, T=5, 3, 32, 32)
    policy = HBAPolicy(rich())
    torch.manual_seed(0)
    out = policy(video)
    assert type(out) is tv_tensors.Video and out.shape == video.shape and out.dtype == video.dtype
    # Same draws for every frame: each frame is what the video's one template gives that frame; frame 0
    # then tells the template apart. Every video with one draw is consistent across frames:
    single = HBAPolicy(rich())
    for v in range(12):
        # A video of one frame repeated T times: all output frames equal.
        torch.manual_seed(100 + v)
        still = single(tv_tensors.Video(frames[:1].expand(5, -1, -1, -1).clone()))
        assert all(torch.equal(still[0], still[t]) for t in range(5)), f"video {v}: frames drew differently"
    distinct = {bytes(out[v, 0].numpy()) for v in range(12)}
    assert len(distinct) >= 4  # and videos draw independently


def test_video_frames_get_the_ops_of_the_video(cifar_images):
    # T different frames: each output frame equals that frame augmented as a still video with the same
    # seed (the draws depend on the seed and the number of videos alone), Cutout's centre included.
    video = tv_tensors.Video(cifar_images[:6])
    policy = HBAPolicy(rich())
    for seed in range(6):
        torch.manual_seed(seed)
        out = policy(video)
        for t in range(6):
            torch.manual_seed(seed)
            still = policy(tv_tensors.Video(video[t : t + 1].expand(6, -1, -1, -1).clone()))
            assert torch.equal(out[t], still[0]), f"seed {seed}, frame {t}"


@pytest.mark.parametrize("chunk_bytes", [None, 4000, 20000])  # whole; parts of one video; of several
def test_video_batches_draw_per_video(chunk_bytes, cifar_images, monkeypatch):
    # Large CPU batches go in parts: a part holds whole videos, so frames still share their draws.
    if chunk_bytes is not None:
        monkeypatch.setattr(augment_module, "_CHUNK_BYTES", chunk_bytes)
    stills = cifar_images[:16, None].expand(-1, 3, -1, -1, -1).contiguous()  # 16 videos of 3 equal frames
    torch.manual_seed(2)
    out = HBAPolicy(rich())(tv_tensors.Video(stills))
    for v in range(16):
        assert torch.equal(out[v, 0], out[v, 1]) and torch.equal(out[v, 0], out[v, 2]), f"video {v}"
    assert sum(not torch.equal(out[v], stills[v]) for v in range(16)) >= 8


def test_augment_frames_validated(cifar_images):
    prob, mag = HBAPolicy(rich()).policy_at()
    for frames in (0, 5, 2.0, True):
        with pytest.raises(ValueError, match="frames must be an integer >= 1 dividing the batch size 6"):
            HF.augment(cifar_images[:6], prob, mag, frames=frames)


def test_video_in_samples_and_compose(cifar_images):
    video = tv_tensors.Video(cifar_images[:4])
    out, label = HBAPolicy(INVERT)(video, 3)
    assert type(out) is tv_tensors.Video and label == 3
    torch.testing.assert_close(out.as_subclass(torch.Tensor), 255 - cifar_images[:4], rtol=0, atol=0)
    sample = v2.Compose([HBAPolicy(INVERT), v2.ToDtype(torch.float32, scale=True)])({"video": video, "y": 1})
    assert type(sample["video"]) is tv_tensors.Video and sample["video"].dtype == torch.float32


# ================================================================================== 2. targets
def make_targets(canvas):
    height, width = canvas
    boxes = tv_tensors.BoundingBoxes(
        [[4.0, 5.0, 20.0, 18.0], [0.0, 0.0, width, height], [width - 6.0, 2.0, width, 12.0]],
        format="XYXY", canvas_size=canvas,
    )
    points = tv_tensors.KeyPoints([[3.5, 7.25], [width / 2, height / 2], [width - 1.0, height - 2.0]], canvas_size=canvas)
    labels = (torch.arange(height * width).view(height, width) * 7 // 13) % 11  # labels 0..10
    return boxes, points, tv_tensors.Mask(labels)


@pytest.mark.parametrize(("op", "m"), [("ShearX", 0.3), ("ShearY", 0.17), ("TranslateX", 0.25), ("TranslateY", 0.4), ("Rotate", 23.0)])
def test_geometric_op_moves_targets_like_torchvision_affine(op, m, cifar_images):
    policy = HBAPolicy(schedule({op: m}, count_probs=(0.0, 1.0)))
    canvas = (32, 32)
    boxes, points, mask = make_targets(canvas)
    signs = set()
    torch.manual_seed(0)  # both signs within 8 images (unseeded, 1 run in 128 would draw one sign only)
    for i in range(8):
        image = cifar_images[i]
        out, out_boxes, out_points, out_mask = policy(tv_tensors.Image(image), boxes, points, mask)
        signed = drawn_sign(out.as_subclass(torch.Tensor), image, op, m)
        signs.add(math.copysign(1, signed))
        assert type(out_boxes) is tv_tensors.BoundingBoxes and out_boxes.canvas_size == canvas
        assert type(out_points) is tv_tensors.KeyPoints and type(out_mask) is tv_tensors.Mask
        torch.testing.assert_close(out_boxes, tv_affine(boxes, op, signed, canvas), rtol=0, atol=1e-4)
        torch.testing.assert_close(out_points, tv_affine(points, op, signed, canvas), rtol=0, atol=1e-4)
        # The mask moves exactly as the image's pixels (the same NEAREST source pixels) ...
        as_image = HF.apply_op(mask.as_subclass(torch.Tensor).to(torch.uint8).unsqueeze(0), op, signed).squeeze(0)
        assert torch.equal(out_mask.as_subclass(torch.Tensor), as_image.long())
        # ... and as torchvision moves it, but for its NEAREST ties (PIL rounds x.5 the other way).
        theirs = tv_affine(mask, op, signed, canvas).as_subclass(torch.Tensor)
        assert (out_mask.as_subclass(torch.Tensor) != theirs).float().mean() < 0.1
    assert signs == {1.0, -1.0}  # both signs were drawn


def test_pointwise_ops_and_cutout_leave_targets(cifar_images):
    canvas = (32, 32)
    boxes, points, mask = make_targets(canvas)
    for op in POINTWISE:
        changed = 0
        spec = OPS[OP_NAMES.index(op)]
        policy = HBAPolicy(schedule({op: spec.high if spec.has_magnitude else None}))
        for image in cifar_images[:4]:
            out, out_boxes, out_points, out_mask = policy(tv_tensors.Image(image), boxes, points, mask)
            assert torch.equal(out_boxes, boxes) and torch.equal(out_points, points), op
            assert torch.equal(out_mask, mask), op  # Cutout does not erase mask labels
            changed += not torch.equal(out, image)
        assert changed, f"{op} never changed an image"


def test_two_geometric_ops_compose_in_order(cifar_images):
    # K = 2 with ShearX and Rotate certain: the targets follow both, in the order the image got them.
    policy = HBAPolicy(schedule({"ShearX": 0.1, "Rotate": 10.0}, count_probs=(0.0, 0.0, 1.0)))
    canvas = (32, 32)
    boxes = tv_tensors.BoundingBoxes([[10.0, 11.0, 20.0, 19.0]], format="XYXY", canvas_size=canvas)
    points = tv_tensors.KeyPoints([[12.0, 14.0], [18.5, 16.0]], canvas_size=canvas)
    orders = set()
    torch.manual_seed(0)
    for i in range(12):
        image = cifar_images[i]
        out, out_boxes, out_points = policy(image, boxes, points)
        found = None
        for first, second in (("ShearX", "Rotate"), ("Rotate", "ShearX")):
            m1, m2 = (0.1 if first == "ShearX" else 10.0), (0.1 if second == "ShearX" else 10.0)
            for s1 in (1, -1):
                for s2 in (1, -1):
                    if torch.equal(out, HF.apply_op(HF.apply_op(image, first, s1 * m1), second, s2 * m2)):
                        found = (first, s1 * m1, second, s2 * m2)
        assert found is not None
        orders.add(found[0])
        # Boxes well inside the image: torchvision clamps nothing between the two calls.
        expected_points = tv_affine(tv_affine(points, found[0], found[1], canvas), found[2], found[3], canvas)
        torch.testing.assert_close(out_points, expected_points, rtol=0, atol=1e-4)
        # A box through two affine calls is the box of the box: at least the composed map's box, which is
        # what one call with the composition gives; it contains the moved key points of its corners.
        expected_box = tv_affine(tv_affine(boxes, found[0], found[1], canvas), found[2], found[3], canvas)
        assert (out_boxes[0, :2] >= expected_box[0, :2] - 1e-4).all() and (out_boxes[0, 2:] <= expected_box[0, 2:] + 1e-4).all()
        corners = tv_tensors.KeyPoints([[10.0, 11.0], [20.0, 11.0], [20.0, 19.0], [10.0, 19.0]], canvas_size=canvas)
        moved = tv_affine(tv_affine(corners, found[0], found[1], canvas), found[2], found[3], canvas)
        torch.testing.assert_close(out_boxes[0, :2], moved.amin(0), rtol=0, atol=1e-4)
        torch.testing.assert_close(out_boxes[0, 2:], moved.amax(0), rtol=0, atol=1e-4)
    assert orders == {"ShearX", "Rotate"}


def test_boxes_clamped_like_torchvision_and_sanitised_in_compose(cifar_images):
    canvas = (32, 32)
    policy = HBAPolicy(schedule({"TranslateX": 0.45}))
    boxes = tv_tensors.BoundingBoxes([[2.0, 2.0, 10.0, 10.0], [20.0, 4.0, 30.0, 28.0]], format="XYXY", canvas_size=canvas)
    pipeline = v2.Compose([policy, v2.SanitizeBoundingBoxes()])
    for i in range(6):
        torch.manual_seed(i)
        out, out_boxes = policy(tv_tensors.Image(cifar_images[i]), boxes)
        signed = drawn_sign(out.as_subclass(torch.Tensor), cifar_images[i], "TranslateX", 0.45)
        # 14 pixels either way: one box leaves the canvas, clamped to a degenerate box as torchvision does.
        torch.testing.assert_close(out_boxes, tv_affine(boxes, "TranslateX", signed, canvas), rtol=0, atol=0)
        assert ((out_boxes[:, 2] - out_boxes[:, 0]) == 0).sum() == 1
        torch.manual_seed(i)
        sample = pipeline({"image": tv_tensors.Image(cifar_images[i]), "boxes": boxes, "labels": torch.tensor([1, 2])})
        assert len(sample["boxes"]) == len(sample["labels"]) == 1  # SanitizeBoundingBoxes drops it


def test_batch_masks_follow_their_own_image(cifar_images):
    # The images carry their mask's labels: after a NEAREST geometric op, image and mask still agree,
    # image by image, whatever op each one drew.
    labels = torch.randint(0, 12, (32, 1, 16, 16), generator=torch.Generator().manual_seed(0), dtype=torch.uint8)
    images = (labels * 20).expand(-1, 3, -1, -1).contiguous()
    policy = HBAPolicy(schedule({op: OPS[OP_NAMES.index(op)].high for op in GEOMETRIC}))
    torch.manual_seed(1)
    out, masks = policy(images, tv_tensors.Mask(labels.squeeze(1).long()))
    assert masks.shape == (32, 16, 16)
    torch.testing.assert_close(masks.as_subclass(torch.Tensor), (out[:, 0] // 20).long(), rtol=0, atol=0)
    assert len({bytes(m.numpy()) for m in masks}) >= 16  # per-image draws


@CUDA
@pytest.mark.cuda
def test_cuda_video_and_targets(cifar_images):
    stills = tv_tensors.Video(cifar_images[:8, None].expand(-1, 4, -1, -1, -1).contiguous().cuda())
    out = HBAPolicy(rich())(stills)
    assert type(out) is tv_tensors.Video and out.is_cuda
    assert all(torch.equal(out[v, 0], out[v, t]) for v in range(8) for t in range(4))
    labels = torch.randint(0, 12, (16, 1, 16, 16), dtype=torch.uint8, device="cuda")
    images = (labels * 20).expand(-1, 3, -1, -1).contiguous()
    policy = HBAPolicy(schedule({op: OPS[OP_NAMES.index(op)].high for op in GEOMETRIC}))
    out, masks = policy(images, tv_tensors.Mask(labels.squeeze(1)))
    assert masks.is_cuda and torch.equal(masks.as_subclass(torch.Tensor), out[:, 0] // 20)
    boxes = tv_tensors.BoundingBoxes([[2, 3, 12, 14]], format="XYXY", canvas_size=(32, 32), device="cuda")
    out, moved = policy(tv_tensors.Image(cifar_images[0].cuda()), boxes)
    assert moved.is_cuda and not torch.equal(moved, boxes)


def test_targets_with_a_batch_of_images():
    images = torch.zeros(2, 3, 8, 8, dtype=torch.uint8)
    boxes = tv_tensors.BoundingBoxes([[0, 0, 2, 2]], format="XYXY", canvas_size=(8, 8))
    with pytest.raises(TypeError, match="BoundingBoxes go with one image per sample; got a batch of 2"):
        HBAPolicy(INVERT)(images, boxes)
    with pytest.raises(ValueError, match=r"Mask must have shape \[\*batch, \.\.\., H, W\]"):
        HBAPolicy(INVERT)(images, tv_tensors.Mask(torch.zeros(3, 8, 8)))
    with pytest.raises(ValueError, match="canvas_size"):
        HBAPolicy(INVERT)(images[0], tv_tensors.BoundingBoxes([[0, 0, 2, 2]], format="XYXY", canvas_size=(9, 8)))


def test_pil_image_with_targets_draws_like_pil_alone(cifar_images):
    policy = HBAPolicy(rich())
    canvas = (32, 32)
    boxes, _, mask = make_targets(canvas)
    moved = 0
    for i in range(12):
        pil = TF.to_pil_image(cifar_images[i])
        torch.manual_seed(i)
        alone = policy(pil)
        torch.manual_seed(i)
        out, out_boxes, out_mask = policy(pil, boxes, mask)
        assert isinstance(out, PIL.Image.Image) and np.array_equal(np.asarray(out), np.asarray(alone))
        assert type(out_mask) is tv_tensors.Mask and out_mask.shape == mask.shape
        moved += not torch.equal(out_boxes, boxes)
    assert moved > 0


# ================================================================================== 3. torchvision surface
def test_fill_dict_form(cifar_images):
    policy = HBAPolicy(
        schedule({"Rotate": 30.0}), fill={tv_tensors.Image: 128, tv_tensors.Mask: 255, "others": 7}
    )
    image = cifar_images[0]
    out, mask = policy(tv_tensors.Image(image), tv_tensors.Mask(torch.ones(32, 32, dtype=torch.uint8)))
    assert (out[:, 0, 0] == 128).all() and mask[0, 0] == 255 and mask[16, 16] == 1
    assert (policy(image)[:, 0, 0] == 7).all()  # a pure tensor: "others"
    assert policy(TF.to_pil_image(image)).getpixel((0, 0)) == (7, 7, 7)
    assert (HBAPolicy(schedule({"Rotate": 30.0}), fill={torch.Tensor: 9})(image)[:, 0, 0] == 9).all()
    assert (HBAPolicy(schedule({"Rotate": 30.0}), fill={tv_tensors.Image: 9})(image)[:, 0, 0] == 0).all()  # no key: None
    assert (HBAPolicy(schedule({"Rotate": 30.0}), fill={PIL.Image.Image: [1, 2, 3]})(TF.to_pil_image(image)).getpixel((0, 0)) == (1, 2, 3))


def test_fill_outside_the_images_scale_rejected_saying_so(cifar_images):
    with pytest.raises(ValueError, match=r"fill values must lie in \[0, 1\] for float images.*own scale"):
        HBAPolicy(schedule({"Rotate": 30.0}), fill=128)(cifar_images[:2].float() / 255)
    with pytest.raises(ValueError, match=r"\[0, 255\] for uint8 and PIL images"):
        HBAPolicy(INVERT, fill={tv_tensors.Image: 256})


@pytest.mark.parametrize(
    ("given", "mode"),
    [(PIL.Image.NEAREST, InterpolationMode.NEAREST), (PIL.Image.BILINEAR, InterpolationMode.BILINEAR),
     (PIL.Image.Resampling.NEAREST, InterpolationMode.NEAREST), (PIL.Image.Resampling.BILINEAR, InterpolationMode.BILINEAR),
     (0, InterpolationMode.NEAREST), (2, InterpolationMode.BILINEAR)],
    ids=str,
)
def test_pillow_interpolation_constants(given, mode, cifar_images):
    policy = HBAPolicy(schedule({"Rotate": 17.0}), interpolation=given)
    assert policy.interpolation is mode
    x = cifar_images[:8]
    expected = HBAPolicy(schedule({"Rotate": 17.0}), interpolation=mode)(x, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(policy(x, generator=torch.Generator().manual_seed(0)), expected, rtol=0, atol=0)
    torch.testing.assert_close(HF.rotate(x, 17.0, interpolation=given), HF.rotate(x, 17.0, interpolation=mode))


@pytest.mark.parametrize("given", [PIL.Image.BICUBIC, PIL.Image.Resampling.LANCZOS, 3, True], ids=str)
def test_other_interpolations_rejected(given):
    with pytest.raises(ValueError, match=r"interpolation must be InterpolationMode\.NEAREST or"):
        HBAPolicy(INVERT, interpolation=given)


@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_scripting_and_tracing_give_a_clear_error():
    policy = HBAPolicy(INVERT)
    with pytest.raises(RuntimeError, match="HBAPolicy cannot be scripted or traced with TorchScript"):
        torch.jit.script(policy)
    with pytest.raises(RuntimeError, match="HBAPolicy cannot be scripted or traced with TorchScript"):
        torch.jit.trace(policy, (torch.rand(3, 8, 8),))


# ================================================================================== 5. state identity
def test_state_from_another_schedule_is_refused():
    policy = HBAPolicy(rich())
    policy.set_epoch(5)
    state = policy.state_dict()
    same = HBAPolicy(rich())
    same.load_state_dict(state)
    assert same.epoch == 5
    other = HBAPolicy(rich(name="rich"), total_epochs=10)
    other.load_state_dict(state)  # the same schedule, trained for another length: fine
    changed = Schedule.constant(rich().prob[0] * 0.5, rich().mag[0], name="rich")  # same name, other content
    for target in (HBAPolicy(changed), HBAPolicy(INVERT)):
        with pytest.raises(ValueError, match=r"saved with schedule 'rich' \(content [0-9a-f]{16}\), but this policy follows"):
            target.load_state_dict(state)
        assert target.epoch == 0


def test_state_without_identity_still_loads():
    policy = HBAPolicy(rich())
    policy.load_state_dict({"_extra_state": {"epoch": 7}})  # a state saved before the identity was stored
    assert policy.epoch == 7
