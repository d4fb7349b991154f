"""What ``torch.compile`` gives the batched call (issue 21, section 1): eager against compiled, one process.

Times ``functional.augment`` on the first B lossless CIFAR-10 images (uint8, 32x32 unless ``--size``), every
slot p = 0.5 at mid-range magnitudes (``throughput.benchmark_schedule``), the policy unchecked (a check reads
the device), from a ``torch.Generator``. Candidates, on the path accelerators take (sync-free; forced on a
CPU):

- ``eager``: the call as it is;
- ``compiled``: ``augment(..., compile=True)``, the draws eager and the pixel work through inductor
  (compiled before timing, its compile time reported; checked to give the eager pixels).

On the CPU the default grouped path is timed beside them (what CPU users get). Passes alternate in an
order reversed on every other pass (ABBA); each row is the median over passes of the wall time of one call
(a device synchronisation closes each on accelerators). One torch thread on the CPU.

Usage::

    PYTHONPATH=. python benchmarks/compile_augment.py [--batch-size 256] [--size 32] [--passes 50] [--device cuda]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throughput import benchmark_schedule, default_data_dir, load_images  # shared data and schedule

import hba_augment.functional._augment as augment_module
from hba_augment._runner import source_commit
from hba_augment.functional import augment


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--passes", type=int, default=50)
    p.add_argument("--device", default="cpu")
    p.add_argument("--data-dir", type=Path, default=default_data_dir())
    args = p.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(1)
    images = load_images(args.data_dir, args.batch_size, args.size).to(device)
    prob, mag = (torch.as_tensor(t, dtype=torch.float32, device=device) for t in benchmark_schedule().at(0))

    def call(x: torch.Tensor, **kwargs) -> torch.Tensor:
        return augment(x, prob, mag, check_policy=False, generator=torch.Generator(device).manual_seed(0), **kwargs)

    def compiled(x: torch.Tensor) -> torch.Tensor:
        return call(x, compile=True)

    augment_module._FORCE_SYNC_FREE = True  # the accelerators' path, on any device
    start = time.perf_counter()
    first = compiled(images)
    _sync(device)
    compile_seconds = time.perf_counter() - start
    if not torch.equal(first, call(images)):
        raise SystemExit("the compiled call's pixels differ from the eager call's")

    def timed(fn: Callable[[torch.Tensor], torch.Tensor], sync_free: bool | None) -> Callable[[], float]:
        def run() -> float:
            augment_module._FORCE_SYNC_FREE = sync_free
            _sync(device)
            t = time.perf_counter()
            fn(images)
            _sync(device)
            return time.perf_counter() - t
        return run

    candidates = {"sync-free, eager": timed(call, True), "sync-free, torch.compile (inductor)": timed(compiled, True)}
    if device.type == "cpu":
        candidates["grouped, eager (the CPU's default)"] = timed(call, None)
    for run in candidates.values():
        run(), run()
    times: dict[str, list[float]] = {name: [] for name in candidates}
    order = list(candidates)
    for i in range(args.passes):
        for name in order if i % 2 == 0 else order[::-1]:
            times[name].append(candidates[name]())
    augment_module._FORCE_SYNC_FREE = None

    commit = source_commit() or "unknown"
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{platform.processor() or 'CPU'}, 1 thread"
    print(f"- date: {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}")
    print(f"- command: `python benchmarks/compile_augment.py {' '.join(sys.argv[1:] if argv is None else argv)}`")
    print(f"- commit: {commit}; torch {torch.__version__}; device: {where}; load average {os.getloadavg()[0]:.2f}")
    print(f"- B = {args.batch_size}, {args.size}x{args.size} uint8, {args.passes} passes (ABBA), median wall time per "
          f"call; compiling took {compile_seconds:.1f} s\n")
    print("| path | ms per call | img/s |")
    print("|---|---|---|")
    for name, values in times.items():
        t = statistics.median(values)
        print(f"| {name} | {t * 1e3:.2f} | {args.batch_size / t:,.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
