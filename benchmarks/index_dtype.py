"""Would int32 indices make the batched uint8 call cheaper? The lookup and Equalize's histogram, timed with
int64 and int32 indices (issue 21, item 1: "fewer bytes per image").

Why: the uint8 call turns every pixel into an int64 index once (``hba_augment.functional._batched``: the
levels for the merged lookup's ``gather`` and Equalize's ``scatter_add_``), the largest single buffer of
the call (8 bytes a pixel, 55 KB of the 1,184 KB that the eager model of ``sync_free_bytes.py`` counts per
32x32 image). torch accepts int32 indices in ``gather`` and ``scatter_add_`` since 2.8; whether a kernel
then reads them as int32 or first casts them to int64 is the backend's choice, so this times it rather
than assumes it.

Each row times, on uint8 ``(B, 3, H, W)`` images resident on the device, the cast of the levels to the
index dtype and the package's own two kernels that read it (``functional._kernels.lookup``, a ``gather``
through per-image tables ``(B, 3, 256)``, and ``histogram``, a ``scatter_add_`` of ones); the two dtypes
alternate within each repetition (timings drift on a shared machine), the median of ``--repeats`` is kept.
The outputs of both dtypes are compared before timing (they must be equal).

Usage::

    python benchmarks/index_dtype.py --device cpu --threads 2 --out benchmarks/results/index_dtype_cpu
    python3 benchmarks/index_dtype.py --device cuda --out $OUT/index_dtype

writes ``OUT.json`` and ``OUT.md``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throughput import write_shape_rows

from hba_augment.functional import _kernels  # the kernels timed, not a copy of them

DTYPES = (torch.int64, torch.int32)
SHAPES = ((256, 32), (1024, 32), (4096, 32), (256, 224))


def _step(images: Tensor, tables: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """The batched call's own lookup and histogram (``functional._kernels``) on the levels as ``dtype``."""
    b, c, h, w = images.shape
    index = images.reshape(b, c, h * w).to(dtype)
    return _kernels.lookup(images, tables, index), _kernels.histogram(index)


def time_shape(batch: int, side: int, device: torch.device, repeats: int) -> dict[str, float]:
    """Median seconds of one :func:`_step` per index dtype, for ``batch`` images of ``side`` x ``side``."""
    generator = torch.Generator(device=device).manual_seed(0)
    images = torch.randint(0, 256, (batch, 3, side, side), dtype=torch.uint8, device=device, generator=generator)
    tables = torch.randint(0, 256, (batch, 3, 256), dtype=torch.uint8, device=device, generator=generator)
    reference = _step(images, tables, torch.int64)
    for dtype in DTYPES[1:]:
        if not all(torch.equal(a, b) for a, b in zip(reference, _step(images, tables, dtype), strict=True)):
            raise AssertionError(f"{dtype} indices gave other outputs than int64 at B={batch}, {side}x{side}")

    def once(dtype: torch.dtype) -> float:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        _step(images, tables, dtype)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - start

    for dtype in DTYPES:  # warm-up: allocator, kernels
        once(dtype)
    samples: dict[torch.dtype, list[float]] = {dtype: [] for dtype in DTYPES}
    for _ in range(repeats):
        for dtype in DTYPES:
            samples[dtype].append(once(dtype))
    return {str(dtype).removeprefix("torch."): statistics.median(s) for dtype, s in samples.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch's CPU threads (default: torch's own)")
    parser.add_argument("--shapes", default=",".join(f"{b}x{s}" for b, s in SHAPES), help="BxSIDE,...")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", type=Path, required=True, help="writes OUT.json and OUT.md")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    shapes = [tuple(int(v) for v in shape.split("x")) for shape in args.shapes.split(",")]
    rows = [{"batch": b, "side": s, **time_shape(b, s, device, args.repeats)} for b, s in shapes]
    write_shape_rows(
        args.out, " ".join(sys.argv), device, args.repeats, rows,
        title=f"Lookup and histogram with int64 and int32 indices ({device})",
        header=f"median of {args.repeats}.",
        columns="| B | side | int64 (ms) | int32 (ms) | int32 / int64 |",
        row_line=lambda row: (f"| {row['batch']} | {row['side']} | {row['int64'] * 1e3:.3f} | "
                              f"{row['int32'] * 1e3:.3f} | {row['int32'] / row['int64']:.2f} |"),
    )


if __name__ == "__main__":
    main()
