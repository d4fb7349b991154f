"""Screen search variants on the CPU by their dynamics: does ``lambda`` follow a signal, and how far does it go?

Each variant is an ``hba-augment search`` command line (on top of the paper's Reduced CIFAR-10 protocol with
the CPU proxy network, WRN-16-1, on the CIFAR-10 JPEG copy) run for the first ``--epochs-run`` epochs of its
200-epoch schedule (a checkpoint per epoch: a later invocation continues it). The table then says, per
variant, over the epochs run:

- per-epoch |t|: the mean over the 54 hyperparameters of |mean / standard error| of one epoch's gradients
  (noise alone gives about 0.8; ``hba_augment.search.loop.hypergradient_consistency``);
- pooled |t| and the fraction above 2: the same over the epochs' mean gradients, so that a small push
  that keeps its sign from epoch to epoch shows (noise alone: about 0.8 and 0.05);
- how far ``lambda`` went from its start (root mean square over the 54 logits) and the policy it reached.

This screens and debugs; it does not rank policies (the proxy network is too small for that: decide at
paper scale, ``benchmarks/campaigns/``).

Usage::

    python benchmarks/search_dynamics.py --out runs/screen \\
        ta="--init trivialaugment" teacher-ta="--init trivialaugment --objective teacher"
    python benchmarks/search_dynamics.py --out runs/screen --report-only   # every variant found in --out
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "cifar-10-jpeg.tar.gz"
BASE = ["--dataset", "imagefolder", "--preset", "cifar10", "--model", "wrn-16-1", "--threads", "1"]


class _Stop(Exception):
    pass


def run_variant(name: str, options: str, out: Path, data: Path, epochs_run: int) -> None:
    """Run (or continue) the first ``epochs_run`` epochs of one variant's search into ``out/<name>``."""
    import torch

    from hba_augment.search.cli import build_parser, config_from_args
    from hba_augment.search.loop import run_search

    torch.set_num_threads(1)
    argv = [*BASE, "--data-dir", str(data), *shlex.split(options), "--out", str(out / name), "--name", name]
    config = config_from_args(build_parser().parse_args(argv), "cpu")

    def stop(metrics: dict) -> None:
        print(f"{name}: epoch {metrics['epoch']} |t| {metrics['hypergrad_abs_t_mean']:.2f} "
              f"rms {metrics['lambda_rms_from_start']:.3f}", flush=True)
        if metrics["epoch"] + 1 >= epochs_run:
            raise _Stop

    (out / name).mkdir(parents=True, exist_ok=True)
    (out / name / "options.txt").write_text(options + "\n", encoding="utf-8")
    try:
        run_search(config, out / name, resume=True, progress=False, plot=False, on_epoch_end=stop,
                   log=lambda m: None, command=shlex.join(["hba-augment", "search", *argv]))
    except _Stop:
        pass


def summary(folder: Path, epochs: int | None = None) -> dict:
    """The table's row of one variant's ``metrics.jsonl`` (its first ``epochs`` epochs)."""
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rows = rows[:epochs] if epochs else rows
    means = [r["hypergrad_mean"] for r in rows]
    pooled = []
    for j in range(len(means[0])):
        column = [m[j] for m in means]
        sd = statistics.stdev(column) if len(column) > 1 else math.nan
        pooled.append(statistics.fmean(column) / (sd / math.sqrt(len(column)) + 1e-300))
    last = rows[-1]
    options = (folder / "options.txt").read_text().strip() if (folder / "options.txt").exists() else "?"
    return {"variant": folder.name, "options": options, "epochs": len(rows),
            "per_epoch_abs_t": statistics.fmean(r["hypergrad_abs_t_mean"] for r in rows),
            "pooled_abs_t": statistics.fmean(abs(t) for t in pooled),
            "pooled_over_2": sum(abs(t) > 2 for t in pooled) / len(pooled),
            "rms_from_start": last["lambda_rms_from_start"], "mean_prob": last["mean_prob"],
            "max_prob": last["max_prob"], "mean_mag_fraction": last["mean_mag_fraction"],
            "train_loss": last["train_loss"]}


def table(rows: list[dict]) -> str:
    lines = ["| variant | options | epochs | per-epoch abs t | pooled abs t | pooled abs t > 2 | rms from start | "
             "mean p | max p | mean mag | train loss |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['variant']} | `{r['options']}` | {r['epochs']} | {r['per_epoch_abs_t']:.2f} | "
                     f"{r['pooled_abs_t']:.2f} | {r['pooled_over_2']:.2f} | {r['rms_from_start']:.2f} | "
                     f"{r['mean_prob']:.3f} | {r['max_prob']:.3f} | {r['mean_mag_fraction']:.3f} | "
                     f"{r['train_loss']:.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("variants", nargs="*", help="NAME=\"search options\" (e.g. ta=\"--init trivialaugment\")")
    p.add_argument("--out", required=True, help="folder of the variants' search folders")
    p.add_argument("--data", default=str(DATA), help="the CIFAR-10 JPEG archive")
    p.add_argument("--epochs-run", type=int, default=40, help="epochs of each 200-epoch search to run (default: 40)")
    p.add_argument("--report-only", action="store_true", help="run nothing: table the variants found in --out")
    args = p.parse_args(argv)
    out = Path(args.out)
    variants = dict(v.split("=", 1) for v in args.variants)
    if not args.report_only:
        for name, options in variants.items():
            run_variant(name, options, out, Path(args.data), args.epochs_run)
    names = list(variants) or sorted(d.name for d in out.iterdir() if (d / "metrics.jsonl").exists())
    print(table([summary(out / name, args.epochs_run) for name in names]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
