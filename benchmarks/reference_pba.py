"""Reference: PBA's augmentation template applied image by image with PIL, as PBA does it.

This is the baseline that ``hba_augment.functional.augment`` replaces: one PIL image at a time, the 15 ops
of SPEC section 1 as the PIL calls the SPEC names (NEAREST resampling, fill 0 unless told otherwise), and
the template of SPEC section 2 drawn with Python's ``random`` (PBA's own loop: shuffle the 30 slots, flip
each slot's coin in that order, stop after K applied ops). It exists to be timed against the batched
implementation (``benchmarks/throughput.py``) and to check that both draw the same distribution
(``tests/test_reference_pba.py``); it is not part of the package.

Op conventions, identical to ``tests/test_ops_pil.py``: ShearX ``AFFINE (1, s, 0, 0, 1, 0)``, TranslateX
``AFFINE (1, 0, round(m W), 0, 1, 0)`` (positive m moves the content left, as PBA), Rotate
``rotate(m)`` (counter-clockwise), Solarize ``solarize(256 - m)``, Posterize keeps ``8 - round(m)`` bits
(strengths, SPEC section 1: 0 changes nothing, Posterize 8 gives black), Cutout paints a
``round(m H) x round(m W)`` patch centred on a uniformly drawn pixel, clipped at the borders.

Usage::

    from reference_pba import PBATemplate
    template = PBATemplate(prob, mag)            # (2, 15) arrays, SPEC magnitudes; seed=... for a stream
    out = template(pil_image)                     # mode "L" or "RGB"
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import numpy as np
from PIL import Image, ImageEnhance, ImageOps

from hba_augment.functional import NUM_OPS, OP_NAMES, OPS

__all__ = ["PIL_OPS", "PBATemplate"]

NEAREST = Image.Resampling.NEAREST
AFFINE = Image.Transform.AFFINE
#: Each op appears twice in the policy (PBA's two copies): 30 slots.
NUM_SLOTS = 2 * NUM_OPS

PilOp = Callable[[Image.Image, float, "int | tuple[int, ...]", random.Random], Image.Image]


def _affine(img: Image.Image, data: tuple[float, ...], fill: int | tuple[int, ...]) -> Image.Image:
    return img.transform(img.size, AFFINE, data, resample=NEAREST, fillcolor=fill)


def _posterize(img: Image.Image, bits: int) -> Image.Image:
    if bits == 0:
        # Pillow >= 11 refuses 0 bits; its former table i & ~(2**8 - 1) is 0: black, as SPEC says.
        return img.point([0] * 256 * len(img.getbands()))
    return ImageOps.posterize(img, bits)


def _cutout(img: Image.Image, m: float, fill: int | tuple[int, ...], rng: random.Random) -> Image.Image:
    w, h = img.size
    ph, pw = round(m * h), round(m * w)
    cy, cx = rng.randrange(h), rng.randrange(w)
    top, left = cy - ph // 2, cx - pw // 2
    box = (max(left, 0), max(top, 0), min(left + pw, w), min(top + ph, h))
    out = img.copy()
    if box[2] > box[0] and box[3] > box[1]:
        out.paste(fill, box)
    return out


#: The PIL call of every op (SPEC section 1), by name: ``op(img, magnitude, fill, rng) -> img``.
PIL_OPS: dict[str, PilOp] = {
    "ShearX": lambda img, m, fill, rng: _affine(img, (1, m, 0, 0, 1, 0), fill),
    "ShearY": lambda img, m, fill, rng: _affine(img, (1, 0, 0, m, 1, 0), fill),
    "TranslateX": lambda img, m, fill, rng: _affine(img, (1, 0, round(m * img.size[0]), 0, 1, 0), fill),
    "TranslateY": lambda img, m, fill, rng: _affine(img, (1, 0, 0, 0, 1, round(m * img.size[1])), fill),
    "Rotate": lambda img, m, fill, rng: img.rotate(m, resample=NEAREST, fillcolor=fill),
    "AutoContrast": lambda img, m, fill, rng: ImageOps.autocontrast(img),
    "Invert": lambda img, m, fill, rng: ImageOps.invert(img),
    "Equalize": lambda img, m, fill, rng: ImageOps.equalize(img),
    "Solarize": lambda img, m, fill, rng: ImageOps.solarize(img, 256 - m),
    "Posterize": lambda img, m, fill, rng: _posterize(img, 8 - round(m)),
    "Contrast": lambda img, m, fill, rng: ImageEnhance.Contrast(img).enhance(m),
    "Color": lambda img, m, fill, rng: ImageEnhance.Color(img).enhance(m),
    "Brightness": lambda img, m, fill, rng: ImageEnhance.Brightness(img).enhance(m),
    "Sharpness": lambda img, m, fill, rng: ImageEnhance.Sharpness(img).enhance(m),
    "Cutout": _cutout,
}
if tuple(PIL_OPS) != OP_NAMES:  # the table is the one list of ops; this file must follow it
    raise RuntimeError(
        f"reference_pba.PIL_OPS {tuple(PIL_OPS)} does not match functional.OP_NAMES {OP_NAMES}"
    )


class PBATemplate:
    """PBA's template (SPEC section 2) on one PIL image per call, with Python's ``random``.

    Args:
        prob: ``(2, 15)`` slot probabilities in [0, 1] (copy 0, then copy 1, ops in canonical order).
        mag: ``(2, 15)`` unsigned magnitudes in the ops' SPEC units (ignored for ops without one).
        count_probs: ``count_probs[k]`` is the probability that at most ``k`` ops are applied.
        fill: value of uncovered pixels and of the Cutout patch, 0..255, one number or one per channel.
        seed: seed of this template's own ``random.Random`` stream (``None``: seeded from the OS).
    """

    def __init__(
        self,
        prob: Sequence[Sequence[float]] | np.ndarray,
        mag: Sequence[Sequence[float]] | np.ndarray,
        count_probs: Sequence[float] = (0.2, 0.3, 0.5),
        *,
        fill: float | Sequence[float] | None = None,
        seed: int | None = None,
    ) -> None:
        prob_arr = np.asarray(prob, dtype=np.float64).reshape(NUM_SLOTS)
        mag_arr = np.asarray(mag, dtype=np.float64).reshape(NUM_SLOTS)
        if not ((prob_arr >= 0) & (prob_arr <= 1)).all():
            raise ValueError(f"prob must lie in [0, 1], got {prob_arr.tolist()}")
        self.prob = prob_arr.tolist()
        self.mag = mag_arr.tolist()
        self.count_probs = tuple(float(p) for p in count_probs)
        self.fill = fill
        self.rng = random.Random(seed)
        self._ops = [PIL_OPS[name] for name in OP_NAMES]
        self._signed = [spec.signed for spec in OPS]

    def _fill(self, img: Image.Image) -> int | tuple[int, ...]:
        bands = len(img.getbands())
        fill = 0 if self.fill is None else self.fill
        values = [int(fill)] * bands if isinstance(fill, (int, float)) else [int(v) for v in fill]
        return values[0] if bands == 1 else tuple(values)

    def draw(self) -> list[tuple[int, float]]:
        """One draw of the template: the ``(op index, signed magnitude)`` to apply, in order."""
        rng = self.rng
        k = rng.choices(range(len(self.count_probs)), weights=self.count_probs)[0]
        slots = list(range(NUM_SLOTS))
        rng.shuffle(slots)
        applied = []
        for slot in slots:
            if k == 0:
                break
            if rng.random() < self.prob[slot]:
                op = slot % NUM_OPS
                m = self.mag[slot]
                if self._signed[op] and rng.random() < 0.5:
                    m = -m
                applied.append((op, m))
                k -= 1
        return applied

    def __call__(self, img: Image.Image) -> Image.Image:
        """Augment one PIL image (mode "L" or "RGB"); returns a new image of the same mode and size."""
        fill = self._fill(img)
        for op, m in self.draw():
            img = self._ops[op](img, m, fill, self.rng)
        return img
