"""How closely the op kernels of ``hba_augment.functional`` agree with the PIL calls of the contract, section 1.

On lossless CIFAR-10 images (``data_batch_1`` of the official python layout) this applies every op over a
grid of magnitudes, once with the kernel (on a uint8 batch, fill 0, NEAREST or with ``--interpolation
bilinear`` BILINEAR) and once with PIL image by image (the same resampling filter), and reports, in 8-bit
levels, the largest and the mean absolute difference and the fraction of pixels (any channel) that
differ. Interpolation changes the geometric ops only; with BILINEAR the kernels (``grid_sample``) and
PIL round the interpolated value differently on some pixels (one level at most). PIL images augmented by
HBAPolicy go through PIL's own BILINEAR, so they get PIL's values. Cutout has no PIL call (its structure is checked exactly in
tests/test_ops_pil.py) and is listed as such.

Conventions (``reference_pba.PIL_OPS``, which the tests use too): TranslateX m is PIL ``AFFINE (1, 0, round(m W), 0, 1, 0)`` (the
TF/PBA reference: positive m moves the content left), Rotate m is ``rotate(m)`` (counter-clockwise),
Solarize m (a strength, the contract, section 1) is ``solarize(img, 256 - m)``, Posterize m keeps ``8 - round(m)``
bits (m = 8, 0 bits: black, through PIL's former lookup table since Pillow 11 refuses ``posterize(img, 0)``).

Usage::

    python benchmarks/pil_agreement.py [--data-dir DIR] [--n-images 1000] [--dtype uint8|float32]
        [--interpolation nearest|bilinear] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import os
import pickle
import platform
import sys
import time
from pathlib import Path

import numpy as np
import PIL
import torch
from PIL import Image
from torchvision.transforms import InterpolationMode

from hba_augment.functional import OPS, apply_op

sys.path.insert(0, str(Path(__file__).resolve().parent))

from reference_pba import PIL_OPS

NEAREST = Image.Resampling.NEAREST
#: PIL's filter and the kernels' mode for each ``--interpolation``.
RESAMPLE = {"nearest": (NEAREST, InterpolationMode.NEAREST), "bilinear": (Image.Resampling.BILINEAR, InterpolationMode.BILINEAR)}
#: Points of each op's range [low, high] where it is measured (signed ops: with both signs). No point
#: gives a rounding tie for the 32-pixel translations or for Posterize's bits.
GRID_FRACTIONS = (0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0)


def default_data_dir() -> Path:
    env = os.environ.get("HBA_DATA_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "data"


def load_cifar(data_dir: Path, n: int) -> torch.Tensor:
    """The first ``n`` images of the official ``data_batch_1`` pickle, uint8 (n, 3, 32, 32)."""
    with open(data_dir / "cifar-10-batches-py" / "data_batch_1", "rb") as f:
        batch = pickle.load(f, encoding="bytes")
    data = np.asarray(batch[b"data"], dtype=np.uint8)[:n]
    if len(data) < n:
        raise SystemExit(f"data_batch_1 holds only {len(data)} images, asked for {n}")
    return torch.from_numpy(data.reshape(-1, 3, 32, 32).copy())


# The PIL calls of the contract's section 1, from their one home; Cutout has no PIL call to compare with
# (its centre is random; tests/test_ops_pil.py checks its structure exactly).
PIL_REFERENCE = {name: op for name, op in PIL_OPS.items() if name != "Cutout"}


def magnitude_grid(spec) -> list[float | None]:
    if not spec.has_magnitude:
        return [None]
    values = [round(spec.low + f * (spec.high - spec.low), 6) for f in GRID_FRACTIONS]
    if spec.signed:
        values = [-v for v in reversed(values) if v != 0] + values
    return values


def pil_batch(pil_images: list[Image.Image], op: str, magnitude, interpolation: str = "nearest") -> torch.Tensor:
    resample = RESAMPLE[interpolation][0]
    out = [np.asarray(PIL_REFERENCE[op](img, magnitude, 0, None, resample)) for img in pil_images]
    return torch.from_numpy(np.stack(out)).permute(0, 3, 1, 2)


def measure(
    images: torch.Tensor, pil_images, op: str, magnitude, dtype: torch.dtype, interpolation: str = "nearest"
) -> dict:
    ref = pil_batch(pil_images, op, magnitude, interpolation).double()
    mode = RESAMPLE[interpolation][1]
    if dtype == torch.uint8:
        out = apply_op(images, op, magnitude, interpolation=mode).double()
        differing = (out != ref).any(dim=1)
    else:
        out = apply_op(images.to(dtype) / 255, op, magnitude, interpolation=mode).double() * 255
        # A float result "differs" where it is more than one level (plus float32 rounding) from PIL's value.
        differing = ((out - ref).abs() > 1 + 1e-3).any(dim=1)
    diff = (out - ref).abs()
    return {
        "op": op,
        "magnitude": magnitude,
        "max": diff.max().item(),
        "mean": diff.mean().item(),
        "frac": differing.double().mean().item(),
        "worst_image_frac": differing.double().mean(dim=(1, 2)).max().item(),
    }


def fmt_levels(value: float, dtype: torch.dtype) -> str:
    return f"{value:.0f}" if dtype == torch.uint8 else f"{value:.3f}"


def markdown(rows: list[dict], dtype: torch.dtype, detail: bool) -> str:
    lines = []
    header = "| op | magnitudes | max abs diff (levels) | mean abs diff (levels) | differing pixels | worst magnitude |"
    lines += [header, "|---|---|---|---|---|---|"]
    for spec in OPS:
        mine = [r for r in rows if r["op"] == spec.name]
        if spec.name not in PIL_REFERENCE:
            lines.append(f"| {spec.name} | - | n/a | n/a | n/a | no PIL call (structure checked exactly in tests) |")
            continue
        worst = max(mine, key=lambda r: (r["max"], r["frac"]))
        mags = "none" if mine[0]["magnitude"] is None else f"{len(mine)} in [{mine[0]['magnitude']:g}, {mine[-1]['magnitude']:g}]"
        mean = sum(r["mean"] for r in mine) / len(mine)
        frac = sum(r["frac"] for r in mine) / len(mine)
        if worst["max"] < 1e-3:
            wm = "- (all exact)"
        else:
            wm = "-" if worst["magnitude"] is None else f"{worst['magnitude']:g}"
        lines.append(
            f"| {spec.name} | {mags} | {fmt_levels(worst['max'], dtype)} | {mean:.4f} | {frac:.3%} | {wm} |"
        )
    if detail:
        lines += ["", "| op | magnitude | max abs diff | mean abs diff | differing pixels | worst image |",
                  "|---|---|---|---|---|---|"]
        for r in rows:
            m = "-" if r["magnitude"] is None else f"{r['magnitude']:g}"
            lines.append(
                f"| {r['op']} | {m} | {fmt_levels(r['max'], dtype)} | {r['mean']:.4f} | {r['frac']:.3%} | "
                f"{r['worst_image_frac']:.2%} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=default_data_dir(), help="shared data folder (default: %(default)s)")
    parser.add_argument("--n-images", type=int, default=1000, help="images of data_batch_1 to use (default: %(default)s)")
    parser.add_argument("--dtype", choices=["uint8", "float32"], default="uint8", help="kernel input dtype (default: uint8)")
    parser.add_argument("--interpolation", choices=list(RESAMPLE), default="nearest",
                        help="resampling of the geometric ops, kernel and PIL alike (default: %(default)s)")
    parser.add_argument("--detail", action="store_true", help="also print one row per (op, magnitude)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads (default: %(default)s; tiny images gain nothing from more)")
    parser.add_argument("--out", type=Path, help="write the tables (with the per-magnitude one) to this markdown file")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    dtype = torch.uint8 if args.dtype == "uint8" else torch.float32
    images = load_cifar(args.data_dir, args.n_images)
    pil_images = [Image.fromarray(np.ascontiguousarray(img.permute(1, 2, 0).numpy()), mode="RGB") for img in images]
    start = time.perf_counter()
    rows = [
        measure(images, pil_images, spec.name, m, dtype, args.interpolation)
        for spec in OPS
        if spec.name in PIL_REFERENCE
        for m in magnitude_grid(spec)
    ]
    seconds = time.perf_counter() - start

    context = (
        f"{args.n_images} lossless CIFAR-10 images (data_batch_1), kernel input {args.dtype}, "
        f"{args.interpolation.upper()}, fill 0; torch {torch.__version__}, Pillow {PIL.__version__}, Python {platform.python_version()}; "
        f"{len(rows)} (op, magnitude) settings in {seconds:.1f} s"
    )
    summary = markdown(rows, dtype, args.detail)
    print(context + "\n")
    print(summary)
    if args.out is not None:
        full = markdown(rows, dtype, True)
        args.out.write_text(f"# Kernel vs PIL agreement\n\n{context}\n\n{full}\n")
        print(f"\nwrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
