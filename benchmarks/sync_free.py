"""The batched path without host synchronisation (issue 21): its cost on the CPU, and what every call dispatches.

Times ``functional.augment`` on the first B lossless CIFAR-10 images (uint8, 32x32 unless ``--size``), all
30 slots p = 0.5, mid-range magnitudes, in one process: the package at ``--base`` (exported as
``hba_base``, see ``compare_commits.py``), the working tree's default CPU path, and the working tree's
sync-free path (what accelerators take) forced on the CPU. Passes alternate, in an order reversed on every
other pass (ABBA), so that neither candidate always runs first; each row is the median thread CPU time.
Image by image (``(3, H, W)`` tensors through ``augment``, PIL images through ``HBAPolicy``, base against now)
and the sync-free path (against the default path again) are timed in three more comparisons, with a tenth
of the passes. With ``--device cuda`` (any accelerator), the batch alone is timed on it instead, with
``device_rows``: base, the grouped and the sync-free path, and the sync-free call replayed from a CUDA graph.
Then counts the aten ops one call dispatches (``TorchDispatchMode``) on each of the working tree's paths,
for two batch sizes and two seeds, and the host-synchronising ones among them.

Usage::

    PYTHONPATH=. python benchmarks/sync_free.py --base 1f581be [--batch-size 256] [--size 32] [--passes 200]
        [--per-image 64] [--device cuda]

(``PYTHONPATH=.``: a script's folder comes first on ``sys.path``, so without it ``hba_augment`` is whichever
copy the environment installed, not necessarily this working tree's; the run prints which it timed.)
"""

from __future__ import annotations

import argparse
import collections
import datetime
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils._python_dispatch import TorchDispatchMode

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _provenance import git_commit  # noqa: E402
from compare_commits import import_base  # noqa: E402
from throughput import default_data_dir, load_images  # noqa: E402

import hba_augment  # noqa: E402
import hba_augment.functional._augment as augment_module  # noqa: E402
from hba_augment.functional import OPS, augment  # noqa: E402

SYNC_OPS = {"_local_scalar_dense", "nonzero", "masked_select", "unique", "_unique2", "bincount", "is_nonzero"}


class _Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def _policy() -> tuple[torch.Tensor, torch.Tensor]:
    prob = torch.full((2, len(OPS)), 0.5)
    mag = torch.tensor([[(s.low + s.high) / 2 if s.has_magnitude else np.nan for s in OPS]] * 2, dtype=torch.float32)
    return prob, mag


def device_rows(images: torch.Tensor, base, passes: int, device: torch.device) -> dict[str, tuple[float, float]]:
    """On an accelerator: per call, the median wall time from launch to the results (synchronised before
    and after), and the median host time until the call returns (the time the host is held: the grouped
    path waits there for the device), for base, now grouped, now sync-free, and (CUDA) the sync-free call
    replayed from a CUDA graph; candidates interleaved."""
    images = images.to(device)
    prob, mag = (t.to(device) for t in _policy())

    def call(function, sync_free: bool | None = None):
        def run():
            augment_module._FORCE_SYNC_FREE = sync_free
            return function(images, prob, mag)
        return run

    candidates = {
        "base, grouped": call(base.functional.augment),
        "now, grouped": call(augment, False),
        "now, sync-free": call(augment, True),
    }
    if device.type == "cuda":
        run = candidates["now, sync-free"]
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-up off the capture, as torch.cuda.graphs asks
            run(), run()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            run()
        candidates["now, sync-free, CUDA graph replay"] = graph.replay
    synchronize = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for run in candidates.values():
        run(), run()
    wall = {name: [] for name in candidates}
    host = {name: [] for name in candidates}
    order = list(candidates)
    for i in range(passes):
        for name in order if i % 2 == 0 else order[::-1]:
            synchronize()
            start = time.perf_counter()
            candidates[name]()
            host[name].append(time.perf_counter() - start)
            synchronize()
            wall[name].append(time.perf_counter() - start)
    augment_module._FORCE_SYNC_FREE = None
    return {name: (statistics.median(wall[name]), statistics.median(host[name])) for name in candidates}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True,
                        help="git commit to compare the working tree with, or a tar of it made by git archive (no git)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--passes", type=int, default=200)
    parser.add_argument("--per-image", type=int, default=64, help="images per pass of the image-by-image rows")
    parser.add_argument("--data-dir", type=Path, default=default_data_dir())
    parser.add_argument("--device", default="cpu", help="an accelerator: time the batch there instead (see device_rows)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    images = load_images(args.data_dir, args.batch_size, args.size)
    prob, mag = _policy()
    if args.device != "cpu":
        device = torch.device(args.device)
        with tempfile.TemporaryDirectory() as tmp:
            rows = device_rows(images, import_base(args.base, Path(tmp)), args.passes, device)
        print(f"- date: {datetime.datetime.now(datetime.UTC).isoformat(timespec='seconds')}")
        print(f"- command: `python benchmarks/sync_free.py {' '.join(sys.argv[1:] if argv is None else argv)}`")
        print(f"- package timed: {Path(hba_augment.__file__).parent}; commit: {git_commit()}; torch {torch.__version__}")
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else str(device)
        print(f"- device: {name}; B = {args.batch_size}, {args.size}x{args.size} uint8, {args.passes} passes, medians\n")
        print("| path | ms per call (launch to results) | img/s | ms the host is held |")
        print("|---|---|---|---|")
        for row, (wall, held) in rows.items():
            print(f"| {row} | {wall * 1e3:.2f} | {args.batch_size / wall:,.0f} | {held * 1e3:.2f} |")
        return
    with tempfile.TemporaryDirectory() as tmp:
        base = import_base(args.base, Path(tmp))

        # Every candidate draws from a generator seeded alike: the same templates, hence the same work.
        def timed(function, sync_free: bool = False) -> float:
            augment_module._FORCE_SYNC_FREE = sync_free
            generator = torch.Generator().manual_seed(0)
            start = time.thread_time()
            function(images, prob, mag, generator=generator)
            return time.thread_time() - start

        def per_image(function) -> float:
            generator = torch.Generator().manual_seed(0)
            start = time.thread_time()
            for image in images[: args.per_image]:
                function(image, prob, mag, generator=generator)
            return (time.thread_time() - start) * len(images) / args.per_image  # per B images

        pils = [Image.fromarray(x.permute(1, 2, 0).numpy()) for x in images[: args.per_image]]
        schedule = (prob.numpy(), mag.numpy())

        def per_pil(package, transform={}) -> float:  # noqa: B006 (one transform per package, kept)
            if package not in transform:
                transform[package] = package.HBAPolicy(package.Schedule.constant(*schedule))
            generator = torch.Generator().manual_seed(0)
            start = time.thread_time()
            for image in pils:
                transform[package](image, generator=generator)
            return (time.thread_time() - start) * len(images) / len(pils)  # per B images

        # Four comparisons, each of two candidates: a slow candidate next to a fast one evicts its caches
        # and would bias whichever runs after it.
        comparisons = [
            {
                f"base ({args.base}), grouped": lambda: timed(base.functional.augment),
                "now, grouped (the CPU's default)": lambda: timed(augment),
            },
            {
                f"base ({args.base}), image by image ((3, H, W) tensors)": lambda: per_image(base.functional.augment),
                "now, image by image ((3, H, W) tensors)": lambda: per_image(augment),
            },
            {
                f"base ({args.base}), HBAPolicy on PIL images, image by image": lambda: per_pil(base),
                "now, HBAPolicy on PIL images, image by image": lambda: per_pil(hba_augment),
            },
            {
                "now, grouped (again, beside the next row)": lambda: timed(augment),
                "now, sync-free (the accelerators' path) on the CPU": lambda: timed(augment, True),
            },
        ]
        times = {}
        passes_each = (args.passes, *[max(1, args.passes // 10)] * 3)
        for passes, candidates in zip(passes_each, comparisons, strict=True):
            for run in candidates.values():  # warm-up: caches, the policy's check
                run(), run()
            order = list(candidates)
            times.update({name: [] for name in order})
            for i in range(passes):
                for name in order if i % 2 == 0 else order[::-1]:
                    times[name].append(candidates[name]())
        augment_module._FORCE_SYNC_FREE = None

    print(f"- date: {datetime.datetime.now(datetime.UTC).isoformat(timespec='seconds')}")
    print(f"- command: `python benchmarks/sync_free.py {' '.join(sys.argv[1:] if argv is None else argv)}`")
    print(f"- package timed: {Path(hba_augment.__file__).parent}")
    print(f"- commit: {git_commit()}; torch {torch.__version__}, 1 thread; load average {os.getloadavg()[0]:.2f}")
    print(f"- B = {args.batch_size}, {args.size}x{args.size} uint8, {args.passes} passes each ({args.passes // 10} for the last six rows; "
          f"image by image: {args.per_image} images a pass), thread CPU time per {args.batch_size} images, medians\n")
    print(f"| path | ms per {args.batch_size} images | img/s |")
    print("|---|---|---|")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"| {name} | {median * 1e3:.2f} | {args.batch_size / median:,.0f} |")

    print("\n| path | dtype | B | seed | aten ops per call | host-synchronising ops |")
    print("|---|---|---|---|---|---|")
    for sync_free in (False, True):
        augment_module._FORCE_SYNC_FREE = sync_free
        for dtype in (torch.uint8, torch.float32):
            for b in (4, 64):
                for seed in (0, 1):
                    x = images[:b] if dtype == torch.uint8 else images[:b].float() / 255
                    augment(x, prob, mag, generator=torch.Generator().manual_seed(seed))
                    with _Recorder() as recorder:
                        augment(x, prob, mag, generator=torch.Generator().manual_seed(seed))
                    syncs = collections.Counter(op for op in recorder.ops if op in SYNC_OPS)
                    path = "sync-free" if sync_free else "grouped"
                    print(f"| {path} | {str(dtype).removeprefix('torch.')} | {b} | {seed} | {len(recorder.ops)} | "
                          f"{dict(syncs) or '-'} |")
    augment_module._FORCE_SYNC_FREE = None


if __name__ == "__main__":
    main()
