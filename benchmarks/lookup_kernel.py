"""The uint8 lookup through per-image tables: int64 levels into ``gather`` against int32 offsets into one
``index_select`` (``functional._kernels.lookup`` and ``lookup_flat``), by batch size and image side.

Why: every uint8 pointwise op of the batched CPU call ends in one lookup (the merged tables of a step), the
largest pixel pass of the call at B = 256. ``gather`` takes int64 indices (int32 ones are cast to int64
first: ``benchmarks/index_dtype.py``), so each pixel is widened to 8 bytes before it is read;
``index_select`` reads int32 indices as such, at the price of two more calls (the tables' start offsets and
their addition). ``lookup`` takes the flat form on the CPU from ``_FLAT_LOOKUP_FROM`` values up; this
says where that pays.

Each row: uint8 ``(B, 3, side, side)`` images and ``(B, 3, 1, 256)`` float32 tables (as the call makes them)
on the device; both forms give the same pixels (checked first), then alternate within each repetition
(timings drift on a shared machine), thread CPU time on the CPU (wall time, synchronised, on a GPU), the
median of ``--repeats`` rounds of enough calls to last about a millisecond.

Usage::

    python benchmarks/lookup_kernel.py --out benchmarks/results/lookup_kernel_cpu
    python3 benchmarks/lookup_kernel.py --device cuda --out $OUT/lookup_kernel

writes ``OUT.json`` and ``OUT.md``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throughput import write_shape_rows

from hba_augment.functional import _kernels  # the kernels timed, not a copy of them

SHAPES = ((1, 32), (4, 32), (8, 32), (16, 32), (32, 32), (96, 32), (256, 32), (1, 224), (16, 224), (64, 224))


def forms(images: Tensor, tables: Tensor) -> dict[str, Callable[[], Tensor]]:
    """The two forms of the lookup, as the call would run them (the int64 cast inside the gather's)."""
    b, c, h, w = images.shape
    return {
        "gather": lambda: _kernels.lookup(images, tables, images.reshape(b, c, h * w).long()),
        "flat": lambda: _kernels.lookup_flat(images, tables),
    }


def time_shape(batch: int, side: int, device: torch.device, repeats: int) -> dict[str, float]:
    """Median seconds of one lookup in each form, for ``batch`` images of ``side`` x ``side``."""
    generator = torch.Generator(device=device).manual_seed(0)
    images = torch.randint(0, 256, (batch, 3, side, side), dtype=torch.uint8, device=device, generator=generator)
    tables = torch.randint(0, 256, (batch, 3, 1, 256), device=device, generator=generator).float()
    candidates = forms(images, tables)
    reference, flat = (run() for run in candidates.values())
    if not torch.equal(reference, flat):
        raise AssertionError(f"the flat lookup gave other pixels than the gather at B={batch}, {side}x{side}")
    cuda = device.type == "cuda"
    clock = time.perf_counter if cuda else time.thread_time

    def once(run: Callable[[], Tensor], calls: int) -> float:
        if cuda:
            torch.cuda.synchronize(device)
        start = clock()
        for _ in range(calls):
            run()
        if cuda:
            torch.cuda.synchronize(device)
        return (clock() - start) / calls

    calls = max(1, int(1e-3 / max(once(candidates["gather"], 1), 1e-6)))
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    for i in range(repeats):
        for name in candidates if i % 2 == 0 else list(candidates)[::-1]:
            samples[name].append(once(candidates[name], calls))
    return {name: statistics.median(s) for name, s in samples.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch's CPU threads")
    parser.add_argument("--shapes", default=",".join(f"{b}x{s}" for b, s in SHAPES), help="BxSIDE,...")
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--out", type=Path, required=True, help="writes OUT.json and OUT.md")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    shapes = [tuple(int(v) for v in shape.split("x")) for shape in args.shapes.split(",")]
    rows = [{"batch": b, "side": s, **time_shape(b, s, device, args.repeats)} for b, s in shapes]
    write_shape_rows(
        args.out, "python " + " ".join(sys.argv if argv is None else ["benchmarks/lookup_kernel.py", *argv]),
        device, args.repeats, rows, flat_from_values=_kernels._FLAT_LOOKUP_FROM,
        title=f"The uint8 lookup: int64 gather against int32 flat index_select ({device})",
        header=(f"median of {args.repeats}, the forms alternated. `lookup` takes the flat form on the CPU from "
                f"{_kernels._FLAT_LOOKUP_FROM:,} values (B x 3 x side^2) up."),
        columns="| B | side | gather, int64 (us) | flat, int32 (us) | flat / gather |",
        row_line=lambda row: (f"| {row['batch']} | {row['side']} | {row['gather'] * 1e6:.1f} | "
                              f"{row['flat'] * 1e6:.1f} | {row['flat'] / row['gather']:.2f} |"),
    )


if __name__ == "__main__":
    main()
