"""``functional.augment(..., return_applied=True)``: which slots each image applied, on every path."""

from __future__ import annotations

import pytest
import torch

from hba_augment import functional as F

INVERT = F.OP_NAMES.index("Invert")
# Unsigned ops that change every image of random levels in 1..254 (no sign coin to reproduce).
POINTWISE = ("Invert", "Solarize", "Posterize", "Brightness")


def _policy(slots: dict[tuple[int, str], tuple[float, float | None]]) -> tuple[torch.Tensor, torch.Tensor]:
    prob = torch.zeros(2, F.NUM_OPS)
    mag = torch.tensor([[s.low if s.has_magnitude else float("nan") for s in F.OPS]] * 2)
    for (copy, op), (p, m) in slots.items():
        prob[copy, F.OP_NAMES.index(op)] = p
        if m is not None:
            mag[copy, F.OP_NAMES.index(op)] = m
    return prob, mag


def _levels(n: int, size: int = 8, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, 255, (n, 3, size, size), dtype=torch.uint8, generator=g)


def _changed(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    return (x != out).flatten(1).any(1)


def test_each_applied_slot_is_what_the_image_went_through(cifar_images):
    # K is at most 1 (count_probs (0.2, 0.8)), so an image applies one slot or none, and the image is that
    # slot's op applied alone: the mask names the op and the copy (the copies' magnitudes differ).
    x = cifar_images
    n = len(x)
    slots = {}
    for copy in range(2):
        for op in POINTWISE:
            spec = F.OPS[F.OP_NAMES.index(op)]
            m = spec.low + (0.2 + 0.3 * copy) * (spec.high - spec.low) if spec.has_magnitude else None
            slots[copy, op] = (0.3, m)
    prob, mag = _policy(slots)
    out, applied = F.augment(x, prob, mag, (0.2, 0.8), generator=torch.Generator().manual_seed(0),
                             return_applied=True)
    assert applied.shape == (n, 2, F.NUM_OPS) and applied.dtype == torch.bool
    assert int(applied.flatten(1).sum(1).max()) == 1 and 0 < int(applied.sum()) < n
    for i in range(n):
        hits = applied[i].nonzero().tolist()
        if not hits:
            torch.testing.assert_close(out[i], x[i], rtol=0, atol=0)
            continue
        ((copy, op),) = hits
        expected = F.apply_op(x[i], op, None if torch.isnan(mag[copy, op]) else float(mag[copy, op]))
        torch.testing.assert_close(out[i], expected, rtol=0, atol=0)


def test_the_mask_does_not_change_the_draws(cifar_images):
    prob, mag = torch.full((2, F.NUM_OPS), 0.2), torch.tensor([[s.high if s.has_magnitude else float("nan")
                                                               for s in F.OPS]] * 2)
    plain = F.augment(cifar_images[:64], prob, mag, generator=torch.Generator().manual_seed(3))
    out, matrices, applied = F.augment(cifar_images[:64], prob, mag, generator=torch.Generator().manual_seed(3),
                                       return_matrices=True, return_applied=True)
    torch.testing.assert_close(out, plain, rtol=0, atol=0)
    assert matrices.shape == (64, 2, 3) and applied.shape == (64, 2, F.NUM_OPS)
    # At most len(count_probs) - 1 = 2 ops per image, and the geometry moved only where a geometric op ran.
    assert int(applied.flatten(1).sum(1).max()) <= 2
    geometric = torch.tensor([s.geometric for s in F.OPS])
    moved = (matrices != torch.eye(2, 3, dtype=torch.float64)).flatten(1).any(1)
    assert not moved[~applied[:, :, geometric].flatten(1).any(1)].any()


@pytest.mark.parametrize(("n", "size", "frames"), [(1, 8, 1), (3, 8, 1), (48, 8, 4), (40, 256, 1)],
                         ids=["one image", "batch", "videos", "CPU batch in parts"])
def test_every_path_reports_the_slot(n, size, frames):
    # One slot can fire: the image changed exactly where the mask says it applied that slot.
    x = _levels(n, size, seed=n)
    prob, mag = _policy({(1, "Invert"): (0.5, None)})
    out, applied = F.augment(x, prob, mag, generator=torch.Generator().manual_seed(1), frames=frames,
                             return_applied=True)
    assert applied.shape == (n, 2, F.NUM_OPS)
    assert torch.equal(applied[:, 1, INVERT], _changed(x, out))
    assert applied.sum() == applied[:, 1, INVERT].sum()
    if frames > 1:
        per_video = applied.view(n // frames, frames, -1)
        assert torch.equal(per_video, per_video[:, :1].expand_as(per_video))


def test_unbatched_image_gets_a_batch_of_one():
    x = _levels(1)[0]
    prob, mag = _policy({(0, "Invert"): (1.0, None)})
    out, applied = F.augment(x, prob, mag, (0.0, 1.0), return_applied=True)
    assert out.shape == x.shape and applied.shape == (1, 2, F.NUM_OPS)
    assert applied[0, 0, INVERT] and int(applied.sum()) == 1


@pytest.mark.parametrize("shape", [(0, 3, 8, 8), (2, 3, 0, 8)], ids=["no images", "no pixels"])
def test_nothing_applied_without_pixels(shape):
    prob, mag = _policy({(0, "Invert"): (1.0, None)})
    _, applied = F.augment(torch.zeros(shape, dtype=torch.uint8), prob, mag, return_applied=True)
    assert applied.shape == (shape[0], 2, F.NUM_OPS) and not applied.any()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_mask_matches_the_changed_images():
    x = _levels(64).cuda()
    prob, mag = _policy({(1, "Invert"): (0.5, None)})
    out, applied = F.augment(x, prob, mag, generator=torch.Generator("cuda").manual_seed(0), return_applied=True)
    assert applied.device == x.device
    assert torch.equal(applied[:, 1, INVERT], _changed(x, out))
