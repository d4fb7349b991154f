"""The per-image PIL reference of PBA's template (benchmarks/reference_pba.py), the benchmarks' baseline:
it must apply the contract's ops with the template's statistics, and draw what ``functional.augment`` draws."""

from __future__ import annotations

import collections
import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from hba_augment import functional as F

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "reference_pba.py"
_spec = importlib.util.spec_from_file_location("reference_pba", _PATH)
reference_pba = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(reference_pba)
PBATemplate = reference_pba.PBATemplate

N = 2000  # standard error of a fraction near 0.8: sqrt(0.16 / 2000) = 0.009


def policy(slots: dict[tuple[int, str], tuple[float, float | None]] | None = None):
    """(2, 15) prob and mag: every slot p=0 at its lowest magnitude, except ``slots[(copy, op)] = (p, m)``."""
    prob = np.zeros((2, F.NUM_OPS))
    mag = np.array([[s.low if s.has_magnitude else np.nan for s in F.OPS]] * 2)
    for (c, op), (p, m) in (slots or {}).items():
        k = F.OP_NAMES.index(op)
        prob[c, k] = p
        if m is not None:
            mag[c, k] = m
    return prob, mag


def random_images(n: int, size: int = 8, seed: int = 0) -> list[Image.Image]:
    rng = np.random.default_rng(seed)
    # 1..254 so that Invert changes every image
    return [Image.fromarray(a) for a in rng.integers(1, 255, (n, size, size, 3), dtype=np.uint8)]


def changed_fraction(template: PBATemplate, images: list[Image.Image]) -> float:
    return float(
        np.mean([np.asarray(template(img)).tobytes() != np.asarray(img).tobytes() for img in images])
    )


@pytest.mark.parametrize(("copy_", "op", "m"), [(0, "Invert", None), (1, "Rotate", 30.0), (0, "Cutout", 0.2)])
def test_single_certain_slot_fires_on_80_percent(copy_, op, m):
    # count_probs (0.2, 0.3, 0.5): the one certain slot is applied whenever K >= 1, P = 0.8.
    template = PBATemplate(*policy({(copy_, op): (1.0, m)}), seed=0)
    assert changed_fraction(template, random_images(N)) == pytest.approx(0.8, abs=0.03)


def test_two_certain_inverts_leave_30_percent_changed():
    # K=0: untouched (0.2); K=1: inverted once (0.3); K=2: inverted twice, untouched again (0.5).
    template = PBATemplate(*policy({(0, "Invert"): (1.0, None), (1, "Invert"): (1.0, None)}), seed=1)
    assert changed_fraction(template, random_images(N)) == pytest.approx(0.3, abs=0.03)


def test_slot_probability_and_sign():
    # One TranslateX slot at p = 0.5 with K >= 1 always: half the images move, half of those to each side.
    template = PBATemplate(*policy({(0, "TranslateX"): (0.5, 0.25)}), count_probs=(0.0, 1.0), seed=2)
    image = Image.fromarray(np.tile(np.arange(8, dtype=np.uint8) + 1, (8, 1)))  # value = column + 1
    firsts = collections.Counter(int(np.asarray(template(image))[0, 0]) for _ in range(N))
    # round(0.25 * 8) = 2 pixels: +m shows column 2 (value 3) at x=0, -m shows the fill 0.
    assert set(firsts) == {1, 3, 0}
    assert firsts[1] / N == pytest.approx(0.5, abs=0.035)
    assert firsts[3] / N == pytest.approx(0.25, abs=0.03)
    assert firsts[0] / N == pytest.approx(0.25, abs=0.03)


def test_first_op_follows_the_template():
    # With K >= 1, slot s is the first op applied iff it fires and no other slot fired before it in the
    # random order: P = 0.7 * p_s * integral_0^1 prod_{t != s} (1 - p_t u) du (u: s's place in the order).
    rng = np.random.default_rng(3)
    prob = rng.uniform(0, 1, (2, F.NUM_OPS))
    prob[:, 3] = 0.0  # TranslateY never fires
    p = prob.flatten()
    u, weights = np.polynomial.legendre.leggauss(40)  # exact for these polynomials of degree 29
    u, weights = (u + 1) / 2, weights / 2
    first = np.array(
        [p[s] * np.sum(weights * np.prod(1 - np.delete(p, s)[:, None] * u, axis=0)) for s in range(30)]
    )
    expected = 0.7 * (first[: F.NUM_OPS] + first[F.NUM_OPS :])  # by op: both copies
    mag = np.array([[(s.low + s.high) / 2 if s.has_magnitude else np.nan for s in F.OPS]] * 2)
    template = PBATemplate(prob, mag, count_probs=(0.3, 0.7), seed=4)
    n = 20000
    counts = collections.Counter(next(iter(template.draw()), (-1, 0.0))[0] for _ in range(n))
    observed = np.array([counts[op] / n for op in range(F.NUM_OPS)])
    assert counts[3] == 0
    # 4 standard errors per op (at most 0.014 here), and the "no op" share
    assert np.all(np.abs(observed - expected) <= 4 * np.sqrt(expected * (1 - expected) / n) + 1e-9)
    assert counts[-1] / n == pytest.approx(1 - expected.sum(), abs=4 * np.sqrt(0.3 * 0.7 / n))


@pytest.mark.parametrize("op", [name for name in F.OP_NAMES if name != "Cutout"])
def test_ops_agree_with_the_kernels(op, cifar_images):
    # The reference's PIL calls are the contract's: on real images they agree with the batched kernels
    # (exactly for pointwise ops and translations; blends within a level; other warps nearly everywhere).
    spec = F.OPS[F.op_index(op)]
    m = None if not spec.has_magnitude else (-0.6 if spec.signed else 0.6) * spec.high + 0.4 * spec.low
    images = cifar_images[:16]
    out = F.apply_op(images, op, m)
    ref = torch.stack(
        [
            torch.from_numpy(
                np.asarray(
                    reference_pba.PIL_OPS[op](Image.fromarray(x.permute(1, 2, 0).numpy()), m, 0, None)
                ).copy()
            ).permute(2, 0, 1)
            for x in images
        ]
    )
    diff = (out.int() - ref.int()).abs()
    if spec.geometric and op not in ("TranslateX", "TranslateY"):
        assert (diff.amax(dim=1) > 0).float().mean().item() <= 0.02, op
    else:
        assert diff.max().item() <= (
            0 if op in ("Invert", "Solarize", "Posterize", "TranslateX", "TranslateY") else 1
        ), op


def test_cutout_patch_and_fill():
    image = Image.new("RGB", (10, 10), (5, 6, 7))
    template = PBATemplate(
        *policy({(0, "Cutout"): (1.0, 0.2)}), count_probs=(0.0, 1.0), fill=(200, 100, 50), seed=6
    )
    for _ in range(50):
        out = np.asarray(template(image))
        painted = (out == (200, 100, 50)).all(axis=2)
        rows, cols = np.nonzero(painted.any(axis=1))[0], np.nonzero(painted.any(axis=0))[0]
        assert painted.sum() == len(rows) * len(cols) and 1 <= len(rows) <= 2 and 1 <= len(cols) <= 2
        assert ((out == (5, 6, 7)).all(axis=2) | painted).all()
