"""What the batched path without host synchronisation moves through memory per image (issue 21): base and now.

From B = 4,096 on, an H100 runs the eager sync-free call at the speed of its memory, not of its launches
(``benchmarks/RESULTS.md``, "On the H100 (2026-11-27)"). So this script models what the GPU pays: it records
every aten op one call dispatches (``TorchDispatchMode``, on the CPU, with the accelerators' path forced) and
adds up the bytes each op reads and writes: every tensor argument read once (a broadcast operand at its own
size, not the expanded one; the ``out=`` tensor not read), every result written once (an in-place op reads
and writes its tensor), views free. A model, not a measurement: it knows no cache (an operand read by three
channels counts three times only when it is really three times as big), and the GPU's route through
``from_levels`` (float -> uint8 directly) skips one int16 pass the CPU's route makes here. It also times the
call's thread CPU time at the same batch, base and now interleaved (ABBA), on this CPU.

With ``--compiled``, it also compiles the working tree's pixel work (``augment(..., compile=True)``: inductor,
``fullgraph``) and adds up the buffers inductor's generated code writes per image: what ``torch.compile``
should save on a GPU, whose inductor fuses the same graph (lowered as a GPU's where the two differ; see
:func:`compiled_buffers`). Each buffer is written once and read at least once, and the input comes on top,
so the traffic is some small multiple of that figure.

Usage::

    PYTHONPATH=. python benchmarks/sync_free_bytes.py --base c2ead9e [--batch-size 1024] [--size 32]
        [--passes 12] [--compiled] [--out benchmarks/results/sync_free_bytes]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime
import importlib
import json
import math
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _provenance import git_commit  # noqa: E402
from compare_commits import import_base  # noqa: E402
from sync_free import _policy  # noqa: E402
from throughput import default_data_dir, load_images  # noqa: E402

import hba_augment  # noqa: E402
import hba_augment.functional._augment as augment_module  # noqa: E402

_FREE = {"view", "_unsafe_view", "expand", "slice", "select", "unsqueeze", "squeeze", "permute", "t", "unbind",
         "split", "split_with_sizes", "as_strided", "alias", "detach", "empty", "empty_like", "empty_strided"}


def footprint(tensor: torch.Tensor) -> int:
    """Bytes of the distinct elements a tensor addresses: its size without its broadcast (stride-0) dims."""
    elements = 1
    for size, stride in zip(tensor.shape, tensor.stride(), strict=True):
        elements *= size if stride else 1
    return elements * tensor.element_size()


class BytesRecorder(TorchDispatchMode):
    """Counts the ops dispatched and the bytes they read and write (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0
        self.bytes = 0
        self.per_op: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func.overloadpacket.__name__
        self.ops += 1
        if name in _FREE:
            return out
        reads = [a for a in torch.utils._pytree.tree_leaves((args, {k: v for k, v in kwargs.items() if k != "out"}))
                 if isinstance(a, torch.Tensor)]
        writes = [o for o in torch.utils._pytree.tree_leaves(out) if isinstance(o, torch.Tensor)]
        moved = sum(map(footprint, reads)) + sum(map(footprint, writes))
        self.bytes += moved
        self.per_op[name] += moved
        return out


_BUFFER = re.compile(r"empty_strided_\w+\(\(([^)]*)\), \([^)]*\), (torch\.\w+)\)")


def _gpu_realize_rules() -> dict[str, int]:
    """Inductor's rules for what to write to memory, set to a GPU's values where the CPU has its own: a larger
    op count and more accumulated reads before a value is written (torch 2.14.1's ``realize_cpu_opcount_threshold``
    50 and ``realize_cpu_acc_reads_threshold`` 12, against 30 and 8 elsewhere), and a rule on many users
    that only the CPU applies (``realize_opusers_threshold``, off here). Counted with the CPU's values, the
    32x32 uint8 call wrote about half what it does with a GPU's (2026-11-28)."""
    from torch._inductor import config

    rules = {"realize_opusers_threshold": 1 << 30}
    for name, default in (("realize_opcount_threshold", "_realize_opcount_threshold_default"),
                          ("realize_acc_reads_threshold", "_realize_acc_reads_threshold_default")):
        if hasattr(config, default):  # (older torch: one value for every device, nothing to set)
            rules[name] = getattr(config, default)
    return rules


@contextlib.contextmanager
def _as_on_a_gpu(module) -> Iterator[None]:
    """Within: ``module`` (an ``_augment``) takes the accelerators' path and augments a batch whole, as on a
    GPU (the CPU takes the grouped path and augments large batches in parts)."""
    module._FORCE_SYNC_FREE = True
    module._CHUNK_BYTES, chunk_bytes = math.inf, module._CHUNK_BYTES
    try:
        yield
    finally:
        module._FORCE_SYNC_FREE, module._CHUNK_BYTES = None, chunk_bytes


def compiled_buffers(images: torch.Tensor, prob: torch.Tensor, mag: torch.Tensor) -> list[tuple[str, str, int]]:
    """The buffers inductor's code writes for the pixel work of one forced sync-free call with ``compile=True``,
    as ``(shape, dtype, bytes)``, the output among them. The draws, eager, are not in it.

    Equalize's histogram is a scatter-add of float counts. A GPU's inductor writes it into its own kernel
    (atomic adds, the index computed where it is read); the CPU's, by default, hands it to aten's
    ``scatter_reduce_``, which needs its int64 index as a buffer of 8 bytes a pixel, more than half of all
    the buffers at 224x224. So this lowers the scatter as a GPU does (``cpp.fallback_scatter_reduce_sum``
    off), and decides what to write by a GPU's rules (:func:`_gpu_realize_rules`): the count is of the
    graph a GPU would run, not of the CPU's."""
    from torch._inductor.utils import run_and_get_code  # inductor's own way to see its code; imported late

    def call(x: torch.Tensor) -> torch.Tensor:
        return hba_augment.functional.augment(x, prob, mag, check_policy=False, compile=True)

    torch._dynamo.reset()  # compiled afresh, so that its code is generated (and seen) here
    # Without reuse, and without kernels that write their result over a buffer they read (in_out_ptr),
    # every buffer a kernel writes is its own allocation, so the allocations count the writes.
    with _as_on_a_gpu(augment_module), torch._inductor.config.patch({
            "allow_buffer_reuse": False, "inplace_buffers": False, "cpp.fallback_scatter_reduce_sum": False,
            **_gpu_realize_rules()}):
        _, sources = run_and_get_code(call, images)
    return [(shape, dtype, math.prod(int(v) for v in shape.split(",") if v.strip())
             * getattr(torch, dtype.removeprefix("torch.")).itemsize)
            for source in sources for shape, dtype in _BUFFER.findall(source)]


def record(module, function, images: torch.Tensor, prob: torch.Tensor, mag: torch.Tensor) -> BytesRecorder:
    """One call of ``function`` (``module`` its ``_augment``) as on a GPU (:func:`_as_on_a_gpu`), after a
    warm-up call."""
    with _as_on_a_gpu(module):
        function(images, prob, mag, generator=torch.Generator().manual_seed(0))
        with BytesRecorder() as recorder:
            function(images, prob, mag, generator=torch.Generator().manual_seed(0))
    return recorder


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="git commit (or a git-archive tar of it) to compare with")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--passes", type=int, default=12)
    parser.add_argument("--data-dir", type=Path, default=default_data_dir())
    parser.add_argument("--compiled", action="store_true",
                        help="also count the buffers of the compiled call (inductor; about 30 s of compiling per dtype)")
    parser.add_argument("--out", type=Path, help="write OUT.md and OUT.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    images = load_images(args.data_dir, args.batch_size, args.size)
    prob, mag = _policy()
    b = args.batch_size
    lines = [
        f"# Bytes per image of the sync-free batched call, and its CPU time ({args.size}x{args.size}, B = {b})", "",
        f"- Command: `PYTHONPATH=. python benchmarks/sync_free_bytes.py {' '.join(sys.argv[1:] if argv is None else argv)}`",
        f"- Date: {datetime.datetime.now(datetime.UTC).isoformat(timespec='seconds')}; commit: {git_commit()} "
        f"(the package: {Path(hba_augment.__file__).parent}); torch {torch.__version__}, 1 thread; "
        f"load average {os.getloadavg()[0]:.2f}",
        "- Every slot p = 0.5, mid-range magnitudes; lossless CIFAR-10; the accelerators' path forced on the CPU.",
        "", "| package | dtype | aten ops per call | bytes moved per image (model) | x the image's bytes | "
        "CPU ms per call (median) | img/s on this CPU |", "|---|---|---|---|---|---|---|",
    ]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        base = import_base(args.base, Path(tmp))
        base_module = importlib.import_module("hba_base.functional._augment")
        candidates = {
            f"base ({args.base})": (base_module, base.functional.augment),
            "now": (augment_module, hba_augment.functional.augment),
        }
        for dtype in (torch.uint8, torch.float32):
            x = images if dtype == torch.uint8 else images.float() / 255
            times = {name: [] for name in candidates}
            for module, _ in candidates.values():
                module._FORCE_SYNC_FREE = True
            for i in range(args.passes):
                for name in list(candidates) if i % 2 == 0 else list(candidates)[::-1]:
                    start = time.thread_time()
                    candidates[name][1](x, prob, mag, generator=torch.Generator().manual_seed(i))
                    times[name].append(time.thread_time() - start)
            for name, (module, function) in candidates.items():
                recorder = record(module, function, x, prob, mag)
                per_image = recorder.bytes / b
                median = statistics.median(times[name])
                dtype_name = str(dtype).removeprefix("torch.")
                results[f"{name} {dtype_name}"] = {
                    "ops": recorder.ops, "bytes_per_image": per_image, "cpu_ms": median * 1e3,
                    "top_ops": {k: v / b for k, v in recorder.per_op.most_common(8)},
                }
                lines.append(f"| {name} | {dtype_name} | {recorder.ops} | {per_image / 1e3:,.0f} KB | "
                             f"{per_image / x[0].nbytes:,.0f} | {median * 1e3:.1f} | {b / median:,.0f} |")
    if args.compiled:
        lines += ["", "| dtype | compiled call (now): buffers written per image, the output included | buffers | "
                  "the largest |", "|---|---|---|---|"]
        for dtype in (torch.uint8, torch.float32):
            x = images if dtype == torch.uint8 else images.float() / 255
            buffers = compiled_buffers(x, prob, mag)
            total = sum(size for _, _, size in buffers)
            dtype_name = str(dtype).removeprefix("torch.")
            largest = sorted(buffers, key=lambda item: -item[2])[:6]
            results[f"compiled {dtype_name}"] = {
                "buffer_bytes_per_image": total / b, "buffers": len(buffers),
                "largest": [{"shape": shape, "dtype": name, "bytes_per_image": size / b} for shape, name, size in largest],
            }
            lines.append(f"| {dtype_name} | {total / b / 1e3:,.1f} KB | {len(buffers)} | "
                         + "; ".join(f"({shape}) {name.removeprefix('torch.')}: {size / b / 1e3:,.1f} KB"
                                     for shape, name, size in largest[:4]) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".md").write_text(text)
        args.out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
