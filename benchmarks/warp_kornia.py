"""Per-call cost of kornia's ``warp_affine`` against torch's ``affine_grid`` + ``grid_sample`` (NEAREST).

This is the measurement behind the kernels' choice of plain ``grid_sample`` (``_kernels.affine``). Same
random float images and the same shear matrix for both; medians of repeated calls after warm-up.

    python benchmarks/warp_kornia.py [--threads 1]
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import time

import torch
import torch.nn.functional as F
from kornia.geometry.transform import warp_affine

from hba_augment._runner import source_commit


def _grid_sample(images: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    grid = F.affine_grid(theta, list(images.shape), align_corners=False)
    return F.grid_sample(images, grid, mode="nearest", padding_mode="zeros", align_corners=False)


def _median_us(fn, calls: int) -> float:
    for _ in range(10):
        fn()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--sizes", default="1,64,256", help="batch sizes, comma-separated (32x32 RGB)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    commit = source_commit() or "unknown"
    print(f"- {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, commit {commit}, torch {torch.__version__}, "
          f"{args.threads} thread(s)\n")
    print("| batch | kornia warp_affine (us/call) | affine_grid + grid_sample (us/call) | ratio |")
    print("|---|---|---|---|")
    for b in (int(s) for s in args.sizes.split(",")):
        images = torch.rand(b, 3, 32, 32) * 255
        matrix = torch.eye(2, 3).expand(b, 2, 3).clone()
        matrix[:, 0, 1] = 0.2
        calls = 200 if b == 1 else 30
        kornia_us = _median_us(lambda x=images, m=matrix: warp_affine(x, m, (32, 32), mode="nearest"), calls)
        torch_us = _median_us(lambda x=images, m=matrix: _grid_sample(x, m), calls)
        print(f"| {b} | {kornia_us:,.0f} | {torch_us:,.0f} | {kornia_us / torch_us:.1f}x |")


if __name__ == "__main__":
    main()
