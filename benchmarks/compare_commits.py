"""A/B of HBAPolicy's speed: the package as it was at a git commit against the working tree, in one process.

The base commit's ``hba_augment`` is exported with ``git archive`` into a temporary folder under the name
``hba_base`` (its modules import each other relatively, so it runs side by side with the current
package). Both transforms get the same schedule (all 30 slots p = 0.5, mid-range magnitudes) and the same
lossless CIFAR-10 images; passes alternate between the two, and each row reports the median thread CPU
time per image. Interleaving in one process is what makes the comparison fair on a machine whose speed
drifts by tens of percent within minutes.

Usage::

    python benchmarks/compare_commits.py --base 9bd248a [--sizes 32,224] [--batch-size 256] [--per-image 64]
        [--repeats 41,7]
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import io
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _provenance import git_commit  # noqa: E402
from throughput import default_data_dir, load_images  # noqa: E402

import hba_augment  # noqa: E402
from hba_augment.functional import OPS  # noqa: E402


def import_base(commit: str, folder: Path):
    """``hba_augment`` at ``commit``, imported as ``hba_base`` from ``folder``.

    ``commit`` may also be the path of a tar file made by ``git archive --format=tar -o FILE COMMIT
    hba_augment``: the lent GPU's copy of the repository has no git, so the base travels as such a file.
    """
    if Path(commit).is_file():
        archive = Path(commit).read_bytes()
    else:
        archive = subprocess.run(
            ["git", "archive", "--format=tar", commit, "hba_augment"], cwd=HERE.parent, capture_output=True,
            check=True,
        ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    (folder / "hba_augment").rename(folder / "hba_base")
    sys.path.insert(0, str(folder))
    return importlib.import_module("hba_base")


def policy(package) -> torch.nn.Module:
    prob = np.full((2, len(OPS)), 0.5)
    mag = np.array([[(s.low + s.high) / 2 if s.has_magnitude else np.nan for s in OPS]] * 2)
    return package.HBAPolicy(package.Schedule.constant(prob, mag, name="bench-p0.5-mid"))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="git commit to compare the working tree with")
    parser.add_argument("--sizes", default="32,224")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--per-image", type=int, default=64, help="images per pass of the per-image rows")
    parser.add_argument("--repeats", default="41,7", help="passes per size (one number, or one per size)")
    parser.add_argument("--data-dir", type=Path, default=default_data_dir())
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    sizes = [int(s) for s in args.sizes.split(",")]
    repeats = [int(r) for r in args.repeats.split(",")]
    repeats = repeats * len(sizes) if len(repeats) == 1 else repeats
    if len(repeats) != len(sizes):
        # (the default, two numbers, goes with the default sizes; one size alone takes the first)
        if args.repeats != parser.get_default("repeats"):
            parser.error(f"--repeats needs one number or one per size ({len(sizes)}), got {args.repeats!r}")
        repeats = repeats[: len(sizes)] + repeats[-1:] * (len(sizes) - len(repeats))
    with tempfile.TemporaryDirectory() as tmp:
        base = import_base(args.base, Path(tmp))
        transforms = {"base": policy(base), "now": policy(hba_augment)}
        print(f"- date: {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}")
        print(f"- command: `{' '.join(['python', *sys.argv])}`")
        print(f"- base: {args.base}; now: {git_commit()}; torch threads 1; thread CPU time, medians")
        print()
        print(f"| size | path | base ({args.base}) img/s | now img/s | speed-up |")
        print("|---|---|---|---|---|")
        for size, passes in zip(sizes, repeats, strict=True):
            batch = load_images(args.data_dir, args.batch_size, size)
            singles = list(batch[: args.per_image])
            pils = [Image.fromarray(x.permute(1, 2, 0).numpy()) for x in singles]
            rows = {
                f"batched (B={len(batch)})": (lambda t, b=batch: t(b), len(batch)),
                "per image, PIL": (lambda t, ps=pils: [t(p) for p in ps], len(pils)),
                "per image, tensor": (lambda t, xs=singles: [t(x) for x in xs], len(singles)),
            }
            times: dict[tuple[str, str], list[float]] = {}
            for run, _ in rows.values():  # warm-up
                for t in transforms.values():
                    run(t)
            for _ in range(passes):
                for path, (run, count) in rows.items():
                    for name, t in transforms.items():
                        start = time.thread_time()
                        run(t)
                        times.setdefault((path, name), []).append((time.thread_time() - start) / count)
            for path in rows:
                old, new = (statistics.median(times[(path, name)]) for name in ("base", "now"))
                print(f"| {size} | {path} | {1 / old:,.0f} | {1 / new:,.0f} | {old / new:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
