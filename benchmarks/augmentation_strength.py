"""How much each policy changes its training images, over a training run (issue 10's reasoning).

A diagnostic, not a quality measure: for every policy of the Reduced CIFAR-10 comparison it augments the
same class-balanced images of the CIFAR-10 JPEG copy at several epochs of a ``--epochs``-epoch run and
reports the mean absolute pixel change (levels of 255) and the fraction of images left unchanged, the
policy alone (no flip, crop or Cutout: those are the same for every policy but ``none`` / ``baseline``).
HBA schedules are scaled to the run length as ``hba-augment train`` does; torchvision's policies do not
change with the epoch.

    python benchmarks/augmentation_strength.py --images 1000 --out benchmarks/results/reduced_cifar10/strength.md

``--twins-of SEARCH --count N`` places a population search among N of its twin nulls
(``benchmarks/pbt_null.py``: its own explore draws, noise for its scores) by its mean change over the
measured epochs: what its selection chose per pixel, beyond its draws. A search whose amount of augmentation
was held (``--amount held``) can still choose weaker ops; this sees it.

    python benchmarks/augmentation_strength.py --images 500 --epochs 100 --at 0,10,20,30,40,50,60,70,80,90,99 \
        --twins-of benchmarks/results/proxy_population/searches/population-ta-held --count 20
"""

from __future__ import annotations

import argparse
import datetime
import platform
import shlex
import sys
from pathlib import Path

import torch
from torchvision.transforms import v2

from hba_augment import HBAPolicy
from hba_augment._runner import source_commit
from hba_augment.datasets import balanced_split, load_dataset
from hba_augment.schedule import Schedule

sys.path.insert(0, str(Path(__file__).resolve().parent))  # pbt_null, for --twins-of

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "cifar-10-jpeg.tar.gz"
SCHEDULES = REPO / "benchmarks" / "results" / "reduced_cifar10" / "schedules"
POLICIES = ("autoaugment", "randaugment", "trivialaugment", "hba:cifar10", f"pba=hba:{SCHEDULES / 'pba.json'}",
            f"initial=hba:{SCHEDULES / 'initial.json'}", f"last=hba:{SCHEDULES / 'last.json'}",
            f"shuffled=hba:{SCHEDULES / 'shuffled.json'}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default=str(DEFAULT_DATA), help="the CIFAR-10 JPEG copy (ImageFolder archive)")
    p.add_argument("--images", type=int, default=1000, help="class-balanced training images (subset seed 0)")
    p.add_argument("--epochs", type=int, default=100, help="length of the training run the schedules are scaled to")
    p.add_argument("--at", default="0,25,50,75,99", help="epochs to measure at, comma-separated")
    p.add_argument("--policies", default=",".join(POLICIES), help="comma-separated [LABEL=]policy items")
    p.add_argument("--seed", type=int, default=0, help="seed of the draws")
    p.add_argument("--out", help="also write the table (markdown) here")
    p.add_argument("--twins-of", metavar="SEARCH",
                   help="instead of --policies: the population search in SEARCH and --count of its twin nulls, "
                   "with a summary of where the search sits among them")
    p.add_argument("--count", type=int, default=20, help="twin nulls for --twins-of (noise seeds 0..count-1)")
    return p


def _transform(policy: str | Schedule, epochs: int) -> tuple[torch.nn.Module, bool]:
    """The policy as a uint8 ``(C, H, W)`` transform, and whether it follows the epoch."""
    if isinstance(policy, Schedule):
        return HBAPolicy(policy, total_epochs=epochs), True
    if policy.startswith("hba:"):
        return HBAPolicy(policy[4:], total_epochs=epochs), True
    table = {"autoaugment": v2.AutoAugment(v2.AutoAugmentPolicy.CIFAR10), "randaugment": v2.RandAugment(),
             "trivialaugment": v2.TrivialAugmentWide()}
    if policy not in table:
        raise SystemExit(f"unknown policy {policy!r}; expected hba:<schedule> or one of {sorted(table)}")
    return table[policy], False


def measure(transform: torch.nn.Module, images: torch.Tensor, seed: int) -> tuple[float, float]:
    """Mean absolute change (levels) and fraction of images unchanged, each image augmented on its own."""
    torch.manual_seed(seed)
    out = torch.stack([transform(img) for img in images])
    diff = (out.float() - images.float()).abs()
    return diff.mean().item(), (diff.flatten(1).amax(1) == 0).float().mean().item()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    at = [int(e) for e in args.at.split(",")]
    data = load_dataset("imagefolder", args.data_dir, split="train")
    images = data.images[balanced_split(data.labels, [args.images], seed=0)[0]]
    header = "| policy | " + " | ".join(f"epoch {e}" for e in at) + " |"
    commit = source_commit() or "unknown"
    lines = [f"`{shlex.join(['python', 'benchmarks/augmentation_strength.py', *(sys.argv[1:] if argv is None else argv)])}`"
             f", commit {commit}, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
             f"{platform.processor() or platform.machine()}, torch {torch.__version__}.", "",
             f"Mean absolute pixel change (levels of 255) / fraction of images unchanged, {args.images} "
             f"CIFAR-10 (JPEG copy) training images, the policy alone, schedules scaled to {args.epochs} epochs.",
             "", header, "|---|" + "---|" * len(at)]
    if args.twins_of:
        from pbt_null import twin_null_schedule

        folder = Path(args.twins_of)
        items = [(folder.name, Schedule.load(folder / "schedule.json"))]
        items += [(f"twin-{k}", twin_null_schedule(folder, k)) for k in range(args.count)]
    else:
        items = [(label or policy, policy) for label, _, policy in (i.rpartition("=") for i in args.policies.split(","))]
    means = []
    for label, policy in items:
        transform, by_epoch = _transform(policy, args.epochs)
        cells, changes = [], []
        for e in at:
            if by_epoch:
                transform.set_epoch(e)
            if by_epoch or not cells:
                change, unchanged = measure(transform, images, args.seed)
            cells.append(f"{change:.1f} / {unchanged:.2f}")
            changes.append(change)
        means.append(sum(changes) / len(changes))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    if args.twins_of:
        twins = torch.tensor(means[1:], dtype=torch.float64)
        lines += ["", f"Mean change over the measured epochs: the search {means[0]:.1f}; its {len(twins)} twins "
                  f"{twins.mean():.1f} ± {twins.std():.1f} (min {twins.min():.1f}, max {twins.max():.1f}); "
                  f"twins below the search: {(twins < means[0]).double().mean():.2f}."]
        print(lines[-1])
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
