"""Reference: PBA's augmentation template applied image by image with PIL, as PBA does it.

This is the baseline that ``hba_augment.functional.augment`` replaces: one PIL image at a time, the 15 ops
of the contract's section 1 as the PIL calls it names (NEAREST resampling, fill 0 unless told otherwise), and
the template of the contract, section 2 drawn with Python's ``random`` (PBA's own loop: shuffle the 30 slots, flip
each slot's coin in that order, stop after K applied ops). It exists to be timed against the batched
implementation (``benchmarks/throughput.py``) and to check that both draw the same distribution
(``tests/test_reference_pba.py``); it is not part of the package.

Op conventions, identical to ``tests/test_ops_pil.py``: ShearX ``AFFINE (1, s, 0, 0, 1, 0)``, TranslateX
``AFFINE (1, 0, round(m W), 0, 1, 0)`` (positive m moves the content left, as PBA), Rotate
``rotate(m)`` (counter-clockwise), Solarize ``solarize(256 - m)``, Posterize keeps ``8 - round(m)`` bits
(strengths, the contract, section 1: 0 changes nothing, Posterize 8 gives black), Cutout paints a
``round(m H) x round(m W)`` patch centred on a uniformly drawn pixel, clipped at the borders.

Usage::

    from reference_pba import PBATemplate
    template = PBATemplate(prob, mag)            # (2, 15) arrays, schedule magnitudes; seed=... for a stream
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

#: ``op(img, magnitude, fill, rng, resample=NEAREST) -> img``; ``resample`` matters to the geometric ops only.
PilOp = Callable[..., Image.Image]


def _affine(data: Callable[[float, int, int], tuple[float, ...]]) -> PilOp:
    """The PIL call of a geometric op whose AFFINE data is ``data(magnitude, width, height)``."""

    def op(img: Image.Image, m: float, fill: int | tuple[int, ...], rng: random.Random | None,
           resample: Image.Resampling = NEAREST) -> Image.Image:
        return img.transform(img.size, AFFINE, data(m, *img.size), resample=resample, fillcolor=fill)

    return op


def _rotate(img: Image.Image, m: float, fill: int | tuple[int, ...], rng: random.Random | None,
            resample: Image.Resampling = NEAREST) -> Image.Image:
    return img.rotate(m, resample=resample, fillcolor=fill)


def _pointwise(call: Callable[[Image.Image, float], Image.Image]) -> PilOp:
    """The PIL call of an op that moves no pixel: fill, rng and resample do not apply."""
    return lambda img, m, fill, rng, resample=NEAREST: call(img, m)


def _posterize(img: Image.Image, bits: int) -> Image.Image:
    if bits == 0:
        # Pillow >= 11 refuses 0 bits; its former table i & ~(2**8 - 1) is 0: black, as the contract says.
        return img.point([0] * 256 * len(img.getbands()))
    return ImageOps.posterize(img, bits)


def _cutout(img: Image.Image, m: float, fill: int | tuple[int, ...], rng: random.Random,
            resample: Image.Resampling = NEAREST) -> Image.Image:
    w, h = img.size
    ph, pw = round(m * h), round(m * w)
    cy, cx = rng.randrange(h), rng.randrange(w)
    top, left = cy - ph // 2, cx - pw // 2
    box = (max(left, 0), max(top, 0), min(left + pw, w), min(top + ph, h))
    out = img.copy()
    if box[2] > box[0] and box[3] > box[1]:
        out.paste(fill, box)
    return out


#: The PIL call of every op (the contract, section 1), by name: the one reference the benchmarks
#: (``pil_agreement.py``, this template) and the tests (``test_ops_pil.py``, ``test_pil_backend.py``) use.
#: TranslateX shifts by ``round(m W)`` pixels (Python's round, half to even, like the kernels' ``torch.round``).
PIL_OPS: dict[str, PilOp] = {
    "ShearX": _affine(lambda m, w, h: (1, m, 0, 0, 1, 0)),
    "ShearY": _affine(lambda m, w, h: (1, 0, 0, m, 1, 0)),
    "TranslateX": _affine(lambda m, w, h: (1, 0, round(m * w), 0, 1, 0)),
    "TranslateY": _affine(lambda m, w, h: (1, 0, 0, 0, 1, round(m * h))),
    "Rotate": _rotate,
    "AutoContrast": _pointwise(lambda img, m: ImageOps.autocontrast(img)),
    "Invert": _pointwise(lambda img, m: ImageOps.invert(img)),
    "Equalize": _pointwise(lambda img, m: ImageOps.equalize(img)),
    "Solarize": _pointwise(lambda img, m: ImageOps.solarize(img, 256 - m)),
    "Posterize": _pointwise(lambda img, m: _posterize(img, 8 - round(m))),
    "Contrast": _pointwise(lambda img, m: ImageEnhance.Contrast(img).enhance(m)),
    "Color": _pointwise(lambda img, m: ImageEnhance.Color(img).enhance(m)),
    "Brightness": _pointwise(lambda img, m: ImageEnhance.Brightness(img).enhance(m)),
    "Sharpness": _pointwise(lambda img, m: ImageEnhance.Sharpness(img).enhance(m)),
    "Cutout": _cutout,
}
if tuple(PIL_OPS) != OP_NAMES:  # the table is the one list of ops; this file must follow it
    raise RuntimeError(
        f"reference_pba.PIL_OPS {tuple(PIL_OPS)} does not match functional.OP_NAMES {OP_NAMES}"
    )


class PBATemplate:
    """PBA's template (the contract, section 2) on one PIL image per call, with Python's ``random``.

    Args:
        prob: ``(2, 15)`` slot probabilities in [0, 1] (copy 0, then copy 1, ops in canonical order).
        mag: ``(2, 15)`` unsigned magnitudes in the ops' schedule units (ignored for ops without one).
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
