"""``augment_pil``: one image's drawn template applied to a PIL image with PIL's own operations.

torchvision's transforms send PIL images to PIL's C functions; so does HBAPolicy (issue 11): the template is
drawn exactly as for a tensor (:func:`~hba_augment.functional._augment.draw_one`, then one centre per
Cutout from the same generator), and applied with the PIL calls of SPEC section 1, with no tensor on the
image's way. Since the uint8 kernels reproduce PIL's 8-bit arithmetic, a PIL image and its tensor twin
come out with the same pixels under one seed:

- Geometric ops: ``Image.transform(AFFINE)`` with the very matrices the kernels warp with (float32, as
  built from the policy's magnitudes; Rotate's is the matrix of PIL's ``rotate`` up to float32 rounding),
  one transform per op in the order drawn, as the tensor path applies them. With NEAREST the pixels are
  the kernels' exactly. With BILINEAR they are PIL's own BILINEAR, as with torchvision; the uint8 kernels
  truncate the interpolated value as PIL does and differ from it by one level on 0.2-0.4% of the pixels
  (float32 against double source coordinates; ``benchmarks/pil_agreement.py --interpolation bilinear``).
  Non-integer fills are truncated to 8 bits, here as in the kernels.
- Invert, Solarize, Posterize and Brightness: the policy's 256-level tables, the ones the tensor path looks
  up (``OpSpec.fixed_table``), applied as PIL's point lookup.
- AutoContrast and Equalize: the lookup tables of ``ImageOps.autocontrast`` / ``ImageOps.equalize`` from
  PIL's extrema / histogram, computed with numpy instead of ImageOps' Python loops over 768 levels.
- Contrast, Color, Sharpness: ``ImageEnhance``'s blends (``Image.blend`` with its degenerate image).
- Cutout: ``Image.paste`` of the fill on the patch the kernel paints, from the same drawn centre.

``fill`` has the tensor path's meaning (None: 0; a number; one per channel), converted to 8-bit ink as the
uint8 kernels convert it (truncated).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
from PIL import Image, ImageEnhance
from torchvision.transforms import InterpolationMode

from . import _kernels as K
from ._augment import _SLOTS, _WARP_ENTRIES, Drawn, _fixed_tables, _warp_matrices
from ._table import NUM_OPS, OPS
from ._validation import Fill, fill_levels, interpolation_mode

__all__ = ["PIL_MODES", "augment_pil", "check_pil_mode"]

#: The PIL image modes the package augments (one band, or three).
PIL_MODES = ("L", "RGB")
_RESAMPLE = {"nearest": Image.Resampling.NEAREST, "bilinear": Image.Resampling.BILINEAR}
_RAMP = np.arange(256, dtype=np.float64)
_IDENTITY = np.arange(256, dtype=np.int64)
#: AFFINE data are kept for this many image sizes per policy (a dataset of many sizes rebuilds them).
_AFFINE_SIZES = 32

Ink = int | tuple[int, ...] | None


class _Context(NamedTuple):
    """What the ops need besides the image: the checked policy's host values, the fill as PIL ink, the
    resampling filter and the generator of Cutout's centres."""

    host: dict[Any, Any]
    policy: Any
    bands: int
    ink: Ink
    resample: Image.Resampling
    generator: torch.Generator | None


def check_pil_mode(img: Image.Image) -> None:
    """Raise ``ValueError`` unless ``img`` has one of :data:`PIL_MODES` (the one check of a PIL image's mode)."""
    if img.mode not in PIL_MODES:
        raise ValueError(f"PIL images must have mode 'L' or 'RGB', got {img.mode!r}; convert them first")


def augment_pil(
    img: Image.Image,
    drawn: Drawn,
    *,
    fill: Fill = None,
    interpolation: InterpolationMode | str = InterpolationMode.NEAREST,
    generator: torch.Generator | None = None,
) -> Image.Image:
    """Apply a template from :func:`~hba_augment.functional._augment.draw_one` (drawn on the CPU) to a PIL
    image, with PIL's operations.

    ``augment_pil(img, drawn, ...)`` has the pixels of ``augment_drawn(pil_to_tensor(img), drawn, ...)``
    (exactly with NEAREST; BILINEAR warps are PIL's own, see the module docstring), and draws the same
    Cutout centres from ``generator``.

    Args:
        img: a PIL image of mode ``"L"`` or ``"RGB"``; it is not modified.
        drawn: the template.
        fill: value of uncovered pixels and of the Cutout patch, 0..255, one number or one per channel;
            ``None`` means 0.
        interpolation: ``InterpolationMode.NEAREST`` or ``BILINEAR``, for the geometric ops.
        generator: CPU random stream of Cutout's centres (torch's default if ``None``).

    Returns:
        A new image of the same mode and size.

    Raises:
        ValueError: for another mode, a bad ``fill`` or ``interpolation`` (also when no op is drawn).
    """
    check_pil_mode(img)
    bands = len(img.mode)  # "L" or "RGB": one letter a band (getbands() costs more)
    ink = _ink(fill, bands)
    resample = _resample(interpolation)
    if not drawn.entries or img.width * img.height == 0:
        return img.copy()
    policy = drawn.policy
    ctx = _Context(policy.host, policy, bands, ink, resample, generator)
    out = img
    for entry in drawn.entries:
        out = _PIL_OPS[entry % _SLOTS % NUM_OPS](out, entry, ctx)
    return out


@functools.lru_cache(maxsize=16)
def _resample(interpolation: InterpolationMode | str | int) -> Image.Resampling:
    return _RESAMPLE[interpolation_mode(interpolation)]


# ---------------------------------------------------------------------------------------------- fill
def _ink(fill: Fill, bands: int) -> Ink:
    """``fill`` as PIL ink for an image of ``bands`` bands (``None`` for black), validated as the tensor
    path validates it."""
    if isinstance(fill, list):
        fill = tuple(fill)
    try:
        return _cached_ink(fill, bands)
    except TypeError:  # unhashable (a tensor, say)
        return _ink_of(fill, bands)


@functools.lru_cache(maxsize=64)
def _cached_ink(fill: Fill, bands: int) -> Ink:
    return _ink_of(fill, bands)


def _ink_of(fill: Fill, bands: int) -> Ink:
    # The kernels' conversion, to float32 levels and then uint8 (truncation), for the same 8-bit value.
    levels = fill_levels(fill, bands, True, torch.device("cpu"), torch.float32)
    if levels is None:
        return None
    values = levels.to(torch.uint8).flatten().tolist()
    return values[0] if bands == 1 else tuple(values)


def _black(ink: Ink, bands: int) -> int | tuple[int, ...]:
    if ink is not None:
        return ink
    return 0 if bands == 1 else (0,) * bands


# ---------------------------------------------------------------------------------------------- host values
def _magnitudes(ctx: _Context) -> list[float]:
    """The policy's magnitude table (each slot's magnitude, then after a sign flip) as Python floats."""
    values = ctx.host.get("magnitudes")
    if values is None:
        values = ctx.host["magnitudes"] = ctx.policy.table[0].tolist()
    return values


def _affine_data(ctx: _Context, entry: int, size: tuple[int, int]) -> tuple[float, ...]:
    """PIL AFFINE data of geometric table ``entry`` for an image of ``size`` (width, height): the float32
    matrix the kernels warp with, built once per policy and size."""
    per_size = ctx.host.setdefault("affine", {})
    data = per_size.get(size)
    if data is None:
        if len(per_size) >= _AFFINE_SIZES:
            per_size.clear()
        width, height = size
        rows = _warp_matrices(ctx.policy, height, width).flatten(1).tolist()
        data = per_size[size] = dict(zip(_WARP_ENTRIES, map(tuple, rows), strict=True))
    return data[entry]


def _fixed_lut(ctx: _Context, entry: int, bands: int) -> list[int]:
    """The tensor path's uint8 table of fixed-table ``entry``, repeated for each band."""
    luts = ctx.host.get(("luts", bands))
    if luts is None:
        rows = _fixed_tables(ctx.policy)[:, 0, 0].tolist()
        luts = ctx.host[("luts", bands)] = [row * bands for row in rows]
    return luts[entry]


# ---------------------------------------------------------------------------------------------- ops
def _lookup(img: Image.Image, lut: Sequence[int]) -> Image.Image:
    """``img.point(lut)`` for whole levels in 0..255, 256 per band.

    ``Image.point`` first rounds every entry in Python: for RGB its 768 ``round`` calls (about 70 us)
    cost several times the lookup itself on a 32x32 image. These tables hold whole levels already, so
    they go straight to the lookup that ``Image.point`` ends in.
    """
    img.load()
    return img._new(img.im.point(lut, None))


def _warp(img: Image.Image, entry: int, ctx: _Context) -> Image.Image:
    data = _affine_data(ctx, entry, img.size)
    return img.transform(img.size, Image.Transform.AFFINE, data, resample=ctx.resample, fillcolor=ctx.ink)


def _fixed(img: Image.Image, entry: int, ctx: _Context) -> Image.Image:
    return _lookup(img, _fixed_lut(ctx, entry, ctx.bands))


def _auto_contrast(img: Image.Image, entry: int, ctx: _Context) -> Image.Image:
    extrema = img.getextrema()
    if ctx.bands == 1:
        return _lookup(img, _auto_contrast_lut(*extrema))
    return _lookup(img, [level for lo, hi in extrema for level in _auto_contrast_lut(lo, hi)])


@functools.lru_cache(maxsize=1024)
def _auto_contrast_lut(lo: int, hi: int) -> list[int]:
    """ImageOps.autocontrast's table for a band of extrema ``lo``, ``hi``: level x -> int(x * scale +
    offset), scale = 255 / (hi - lo) and offset = -lo * scale in double precision; the identity for a
    constant band. It depends on the extrema alone: cached (natural images share a few pairs)."""
    if hi <= lo:
        return list(range(256))
    scale = 255.0 / (hi - lo)
    return np.clip(_RAMP * scale + -lo * scale, 0, 255).astype(np.int64).tolist()


def _equalize(img: Image.Image, entry: int, ctx: _Context) -> Image.Image:
    # ImageOps.equalize(img): per band, step = (pixels below the highest occupied level) // 255 and
    # level i -> (step // 2 + pixels below i) // step; the identity where step is 0.
    hist = np.array(img.histogram(), dtype=np.int64).reshape(-1, 256)
    below = np.cumsum(hist, axis=1) - hist
    top = 255 - np.argmax(hist[:, ::-1] > 0, axis=1)
    step = (below[np.arange(len(hist)), top] // 255)[:, None]
    lut = (step // 2 + below) // np.maximum(step, 1)
    lut = np.where(step > 0, np.minimum(lut, 255), _IDENTITY)
    return _lookup(img, lut.ravel().tolist())


def _contrast(img: Image.Image, entry: int, ctx: _Context) -> Image.Image:
    # ImageEnhance.Contrast(img).enhance(m): a blend with the mean grey level, rounded as ImageStat's
    # mean; the histogram's sum in Python instead of ImageStat's loops.
    grey = img if img.mode == "L" else img.convert("L")
    hist = grey.histogram()
    mean = int(sum(map(operator.mul, range(256), hist)) / (img.width * img.height) + 0.5)
    degenerate = Image.new(img.mode, img.size, mean if img.mode == "L" else (mean,) * 3)
    return Image.blend(degenerate, img, _magnitudes(ctx)[entry])


def _color(img: Image.Image, entry: int, ctx: _Context) -> Image.Image:
    return ImageEnhance.Color(img).enhance(_magnitudes(ctx)[entry])


def _sharpness(img: Image.Image, entry: int, ctx: _Context) -> Image.Image:
    return ImageEnhance.Sharpness(img).enhance(_magnitudes(ctx)[entry])


def _cutout(img: Image.Image, entry: int, ctx: _Context) -> Image.Image:
    # The kernel's draw and patch (functional._kernels.cutout): one (row, column) uniform pair from the
    # generator, centre = int(u * size) in float32, a round(m H) x round(m W) patch from centre - size // 2,
    # clipped. The products of float32 values are exact in double; np.float32 rounds them as torch does.
    width, height = img.size
    u_row, u_col = torch.rand(1, 2, generator=ctx.generator).view(2).tolist()
    fraction = _magnitudes(ctx)[entry]
    cy = min(int(np.float32(u_row * height)), height - 1)
    cx = min(int(np.float32(u_col * width)), width - 1)
    ph, pw = round(float(np.float32(fraction * height))), round(float(np.float32(fraction * width)))
    top, left = cy - (ph >> 1), cx - (pw >> 1)
    box = (max(left, 0), max(top, 0), min(left + pw, width), min(top + ph, height))
    out = img.copy()
    if box[2] > box[0] and box[3] > box[1]:
        out.paste(_black(ctx.ink, ctx.bands), box)
    return out


PilOp = Callable[[Image.Image, int, _Context], Image.Image]

#: The PIL twin of each op without a table or matrix, keyed by its kernel (only the table lists op names).
_BY_KERNEL: dict[Callable[..., Any], PilOp] = {
    K.auto_contrast: _auto_contrast,
    K.equalize: _equalize,
    K.contrast: _contrast,
    K.color: _color,
    K.sharpness: _sharpness,
    K.cutout: _cutout,
}


def _op_for(index: int) -> PilOp:
    spec = OPS[index]
    if spec.geometric:
        return _warp
    if spec.fixed_table:
        return _fixed
    if spec.kernel not in _BY_KERNEL:
        raise RuntimeError(f"functional._pil has no PIL operation for {spec.name}")
    return _BY_KERNEL[spec.kernel]


#: The PIL twin of each op, in table order.
_PIL_OPS: tuple[PilOp, ...] = tuple(_op_for(i) for i in range(NUM_OPS))
