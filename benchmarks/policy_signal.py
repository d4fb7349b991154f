"""Can one round of a population search see which policy trains better? (issue 20)

A population search (``hba-augment search --objective population``) decides by the members' validation
accuracy after each round of ``exploit_every`` epochs. At paper scale two 4-member searches from the paper's
start trained networks at 19.79% and 20.56% against 20.35% for a null schedule of their settings (a search
whose scores are noise), and the members' accuracies did not rank with their policies' strength (Spearman's
rho about 0), so selection carried no measurable signal. This probe asks why, one round at a time:

1. a *trunk* network trained from scratch with the start policy held for ``--branch-at`` epochs (the search's
   model, data split, optimiser and learning-rate schedule; :class:`hba_augment.search._member.Worker`);
2. from the trunk's weights and optimiser state, one branch per (policy, replicate) trained ``--every``
   epochs and tested on the search's clean validation images, exactly as a member's round.

Replicate ``r`` gives every policy the same random streams (data order, augmentation draws, crop, flip and
Cutout): *common random numbers*, so the difference of two policies within a replicate is paired. The report
separates

- the *noise of one round*: the standard deviation over replicates of one policy's accuracy, what two
  members with the same policy and the same weights differ by (what an unpaired comparison, as PBT's, faces);
- the *noise of a paired difference*: the standard deviation over replicates of ``acc[p] - acc[start]``;
- the *signal*: each policy's mean accuracy minus the start's, with its paired standard error.

With ``--ema DECAY`` every network also keeps an exponential moving average of its weights (the population
search's ``--score-ema``), the trunk's included, and each branch is scored twice: on its weights (``raw``) and
on the average (``ema``), so the report says how much of the round noise is the high learning rate's bounce.

A policy effect well below the one-round noise cannot steer a few members' truncation selection, whatever
else the search does right; one that stands out only when paired says that sharing random streams (and
weights) across members would let a search see it. A systematic sign (weaker augmentation scores higher
after one round) is short-horizon bias: any greedy selection on this score moves towards less augmentation.

Policies: ``none`` (every probability 0: baseline augmentation only), ``start`` (the search's ``--init``),
``explored-K`` (``--explored`` explored copies of the start, :func:`hba_augment.search.pbt.explore`: the
neighbours a round of PBT compares), and ``NAME=SCHEDULE.json@EPOCH`` entries of a schedule (``--policy``;
e.g. PBA's published one at the branch epoch).

Results are one JSON file per (branch epoch, replicate) under ``--out`` (reused on a rerun, so an interrupted
probe continues); ``--report-only`` writes the table from them.

Usage::

    python benchmarks/policy_signal.py --data-dir ../shared/data/cifar-10-jpeg.tar.gz --model wrn-16-1 \\
        --epochs 100 --branch-at 20 --replicates 6 --out benchmarks/results/policy_signal/proxy \\
        --policy pba=benchmarks/results/paper_scale_cifar10/schedules/pba.json
    python benchmarks/policy_signal.py --out benchmarks/results/policy_signal/proxy --report-only
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

from hba_augment._runner import evaluate_model, source_commit
from hba_augment.schedule import Schedule
from hba_augment.search import pbt
from hba_augment.search._member import Worker, member_seed
from hba_augment.search.loop import SearchConfig, load_search_data
from hba_augment.search.priors import prior_policy

RESULTS_FOLDER = "results"
REPORT_FILE = "policy_signal.md"
# Seed streams of the probe's own draws (the members' use member_seed(seed, member, 0..2)).
_EXPLORE_STREAM, _REPLICATE_BASE = 7, 1000


def _policies(args: argparse.Namespace, branch_at: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Every policy the probe compares at ``branch_at``, by name: ``(prob, mag)`` arrays of shape (2, 15)."""
    start = prior_policy(args.init)
    out = {"none": (np.zeros_like(start.prob), start.mag.copy()), "start": (start.prob, start.mag)}
    for k in range(args.explored):
        rng = np.random.default_rng([args.seed, _EXPLORE_STREAM, k])
        out[f"explored-{k}"] = pbt.explore(start.prob, start.mag, rng)
    for spec in args.policy:
        name, _, path = spec.partition("=")
        path, _, at = path.partition("@")
        schedule = Schedule.load(path)
        # Without @EPOCH: the schedule stretched to the search's epochs, at the branch epoch.
        prob, mag = schedule.at(int(at), schedule.epochs) if at else schedule.at(branch_at, args.epochs)
        out[name] = (prob.numpy().astype(np.float64), mag.numpy().astype(np.float64))
    return out


def _config(args: argparse.Namespace) -> SearchConfig:
    config = SearchConfig.from_preset(
        args.preset, dataset=args.dataset, data_dir=args.data_dir, model=args.model, epochs=args.epochs,
        init=args.init, lr=args.lr, wd=args.wd, seed=args.seed, device=args.device, amp=args.amp,
        train_size=args.train_size, val_size=args.val_size, batch_size=args.batch_size)
    config.validate()
    return config


def _set_streams(member, seed: int, replicate: int) -> None:
    """Replicate ``replicate``'s random streams, the same for every policy (common random numbers)."""
    member.g_data.manual_seed(member_seed(seed, _REPLICATE_BASE + replicate, 1))
    member.g_aug.manual_seed(member_seed(seed, _REPLICATE_BASE + replicate, 2))


def run(args: argparse.Namespace) -> None:
    config = _config(args)
    out = Path(args.out)
    (out / RESULTS_FOLDER).mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(args.threads)
    train, val, source = load_search_data(config)
    start = prior_policy(args.init)
    for branch_at in args.branch_at:
        policies = _policies(args, branch_at)
        names = list(policies)
        todo = [r for r in range(args.replicates) if not _result_path(out, branch_at, r).exists()]
        if not todo:
            continue
        worker = Worker(config, train, val, list(range(len(names))), score_ema=args.ema)
        with tempfile.TemporaryDirectory() as tmp:
            trunk = Path(tmp) / "trunk.pt"
            t0 = time.perf_counter()
            worker.run_round([{"member": 0, "prob": start.prob, "mag": start.mag, "epochs": branch_at,
                               "save": str(trunk), "weights": None, "streams": None}])
            print(f"trunk: {branch_at} epochs with {args.init!r} in {time.perf_counter() - t0:.0f} s", flush=True)
            steps = worker.members[0].step
            for r in todo:
                t0 = time.perf_counter()
                tasks = []
                for m, name in enumerate(names):
                    member = worker.members[m]
                    member.load(trunk, None)
                    member.step, member.epoch = steps, branch_at
                    _set_streams(member, args.seed, r)
                    prob, mag = policies[name]
                    tasks.append({"member": m, "prob": prob, "mag": mag, "epochs": args.every,
                                  "save": str(Path(tmp) / f"branch_{m}.pt"), "weights": None, "streams": None})
                records = worker.run_round(tasks)
                scores = {"ema" if args.ema is not None else "raw": {
                    "val_acc": {names[rec["member"]]: rec["val_acc"] for rec in records},
                    "val_loss": {names[rec["member"]]: rec["val_loss"] for rec in records}}}
                if args.ema is not None:  # the weights themselves, as PBA scores them
                    raw = {n: evaluate_model(worker.members[m].model, worker.val_x, worker.val_y, worker.normalise,
                                             channels_last=worker.channels_last, amp=config.amp)
                           for m, n in enumerate(names)}
                    scores["raw"] = {"val_acc": {n: 1.0 - e / 100.0 for n, (_, e) in raw.items()},
                                     "val_loss": {n: loss for n, (loss, _) in raw.items()}}
                result = {
                    "branch_at": branch_at, "replicate": r, "every": args.every, "ema": args.ema,
                    "scores": scores,
                    "mean_p": {n: float(np.mean(policies[n][0])) for n in names},
                    "config": {"model": config.model, "epochs": config.epochs, "init": args.init, "lr": config.lr,
                               "wd": config.wd, "seed": args.seed, "train_size": config.train_size,
                               "val_size": config.val_size, "device": args.device, "source": source},
                    "seconds": time.perf_counter() - t0,
                    "command": args.command,
                }
                _result_path(out, branch_at, r).write_text(json.dumps(result, indent=1) + "\n")
                acc = scores["raw"]["val_acc"]
                best = max(acc, key=acc.get)
                print(f"epoch {branch_at} replicate {r}: best {best} ({result['seconds']:.0f} s)", flush=True)


def _result_path(out: Path, branch_at: int, replicate: int) -> Path:
    return out / RESULTS_FOLDER / f"branch{branch_at:03d}_rep{replicate:02d}.json"


def report(out: Path, command: str) -> str:
    """The Markdown table of every result under ``out``."""
    results = [json.loads(p.read_text()) for p in sorted((out / RESULTS_FOLDER).glob("*.json"))]
    if not results:
        raise SystemExit(f"no results under {out / RESULTS_FOLDER}")
    cfg = results[0]["config"]
    runs = sorted({r["command"] for r in results if "command" in r})
    lines = [
        "# One round of a population search: policy signal against round noise",
        "",
        *[f"- Run: `{run}`" for run in runs],
        f"- Report: `{command}`",
        f"- Commit: {source_commit() or 'unknown'}; date: {datetime.now(timezone.utc).isoformat(timespec='seconds')}; "
        f"{platform.machine()}, torch {torch.__version__}",
        f"- Search settings: {cfg['model']}, {cfg['epochs']} epochs (cosine), lr {cfg['lr']}, wd {cfg['wd']}, "
        f"{cfg['train_size']} training / {cfg['val_size']} validation images ({cfg['source']}), start "
        f"`{cfg['init']}`, seed {cfg['seed']}, device {cfg['device']}",
        "- Each row: branches from one trunk (the start held to the branch epoch), each trained for one round "
        f"({results[0]['every']} epochs) and tested on the validation images; replicate r gives every policy "
        "the same random streams. Accuracy in points.",
        "",
        "| branch epoch | EMA decay | score | policy | mean p | val acc, mean ± sd over replicates | "
        "minus start, mean ± se (paired) | paired sd | paired t |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    summary = []
    for branch_at, ema in sorted({(r["branch_at"], r["ema"] or 0.0) for r in results}):
        rows = [r for r in results if r["branch_at"] == branch_at and (r["ema"] or 0.0) == ema]
        n_rep = len(rows)
        for score in rows[0]["scores"]:
            names = list(rows[0]["scores"][score]["val_acc"])
            acc = {n: 100 * np.array([r["scores"][score]["val_acc"][n] for r in rows]) for n in names}
            noise = []
            for n in names:
                diff = acc[n] - acc["start"]
                sd = float(np.std(diff, ddof=1)) if n_rep > 1 else math.nan
                se = sd / math.sqrt(n_rep)
                t = float(np.mean(diff)) / se if n != "start" and se > 0 else math.nan
                noise.append(float(np.std(acc[n], ddof=1)) if n_rep > 1 else math.nan)
                own = n == "start"
                lines.append(f"| {branch_at} | {ema or '-'} | {score} | {n} | {rows[0]['mean_p'][n]:.3f} | "
                             f"{np.mean(acc[n]):.2f} ± {noise[-1]:.3f} | "
                             f"{'' if own else f'{np.mean(diff):+.3f} ± {se:.3f}'} | {'' if own else f'{sd:.3f}'} | "
                             f"{'' if own else f'{t:+.1f}'} |")
            explored = [n for n in names if n.startswith("explored-")]
            paired_sd = (float(np.mean([np.std(acc[n] - acc["start"], ddof=1) for n in explored]))
                         if explored and n_rep > 1 else math.nan)
            effect = float(np.mean([abs(np.mean(acc[n] - acc["start"])) for n in explored])) if explored else math.nan
            summary.append(f"| {branch_at} | {ema or '-'} | {score} | {n_rep} | {np.mean(noise):.3f} | "
                           f"{paired_sd:.3f} | {effect:.3f} |")
    lines += [
        "",
        "Per branch epoch and score: the noise of one round (a policy's sd over replicates, averaged over "
        "policies: two members with the same policy and weights differ by this times sqrt 2 when their streams "
        "differ), the sd of a paired difference between an explored neighbour and the start (averaged over "
        "neighbours: the noise left when their streams are shared), and the neighbours' mean |effect|.",
        "",
        "| branch epoch | EMA decay | score | replicates | one-round sd | paired sd (neighbours) | "
        "neighbours' mean abs effect |",
        "|---|---|---|---|---|---|---|",
        *summary,
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="folder of the results and the report")
    p.add_argument("--report-only", action="store_true", help="write the report from the results found")
    p.add_argument("--dataset", default="imagefolder")
    p.add_argument("--data-dir", default="../shared/data/cifar-10-jpeg.tar.gz")
    p.add_argument("--preset", default="cifar10")
    p.add_argument("--model", default="wrn-16-1")
    p.add_argument("--epochs", type=int, default=100, help="the search's epochs (its learning-rate schedule)")
    p.add_argument("--every", type=int, default=None, help="epochs per round (default: the search's, "
                   "pbt.default_exploit_every)")
    p.add_argument("--branch-at", default="20", help="comma-separated trunk lengths (epochs)")
    p.add_argument("--replicates", type=int, default=6)
    p.add_argument("--explored", type=int, default=3, help="explored copies of the start to compare")
    p.add_argument("--policy", action="append", default=[], help="NAME=SCHEDULE.json[@EPOCH] (repeatable)")
    p.add_argument("--init", default="paper", help="the start policy (the trunk's), as the search's --init")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--wd", type=float, default=0.0005)
    p.add_argument("--train-size", type=int, default=4000)
    p.add_argument("--val-size", type=int, default=10000)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--amp", action="store_true")
    p.add_argument("--ema", type=float, default=None, help="also score on an average of the weights with this "
                   "decay per step (the population search's --score-ema)")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    args.command = "python benchmarks/policy_signal.py " + " ".join(sys.argv[1:] if argv is None else argv)
    out = Path(args.out)
    if not args.report_only:
        args.branch_at = [int(x) for x in args.branch_at.split(",")]
        if args.every is None:
            args.every = pbt.default_exploit_every(args.epochs)
        run(args)
    text = report(out, args.command)
    (out / REPORT_FILE).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
