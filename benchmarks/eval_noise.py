"""How much of one run's noise is the test set's? Image by image agreement of runs that differ only by seed
(issue 20's decisions).

At paper scale one run's test error varies by about 0.35 points from seed to seed, so telling two policies
0.4 apart takes about 12 seeds of each (``benchmarks/RESULTS.md``, "How many seeds a decision needs"). Part
of that noise may not be the networks at all but the 10,000 test images: if two runs of one policy are
equally good networks that get *different* images wrong, their test errors differ by chance by about
``sqrt(d / N)``, ``d`` the fraction of the ``N`` images exactly one of them gets right (each image a coin of
its own: Jordan 2023, "On the variance of neural network training and testing"). That part shrinks with
more images, and Reduced CIFAR-10 leaves 46,000 training images unused: a held-out pool (``--eval-split
val`` of ``hba-augment train``). The rest, how far apart the networks really are, does not.

For every finished run given (a ``hba-augment train --out`` folder with ``result.json`` and
``checkpoint.pt``), this evaluates the final network on its test set and on the pool (the train split less
the run's training images), image by image, and keeps which images it got right (``<out>/correct/``, one
``.npz`` a run: a rerun of the report evaluates nothing again). Runs whose settings differ only by
``seed`` form a group; for every pair in a group it reports, on each set, the difference of errors
``delta``, the disagreement ``d``, the chance part ``sqrt(d / N)`` and ``z = delta / sqrt(d / N)``. Over all
pairs, ``mean z^2`` near 1 says the seeds differ by the images' chance alone (then the pool's 4.6x more
images cut one run's noise about 2.1x); well above 1, by the networks (the excess, ``mean(delta^2 - d/N)``,
is their own variance, which no evaluation set removes).

Usage::

    python benchmarks/eval_noise.py benchmarks/results/proxy_200ep/runs/*-seed* \\
        benchmarks/results/proxy_wrn16_2/runs/*-seed* --out benchmarks/results/eval_noise [--threads 1]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import itertools
import json
import math
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _provenance import git_commit  # noqa: E402

from hba_augment._runner import Standardisation, describe_device  # noqa: E402
from hba_augment.models import create_model  # noqa: E402
from hba_augment.train.config import TrainConfig  # noqa: E402
from hba_augment.train.trainer import load_data  # noqa: E402

__all__ = ["chance_sd", "class_agreement", "class_errors", "main", "pair_stats"]

SETS = ("test", "pool")


def chance_sd(a: np.ndarray, b: np.ndarray) -> float:
    """The part of ``error(a) - error(b)`` (percent) that the images' chance alone gives: ``100 sqrt(d / N)``,
    ``d`` the fraction of the ``N`` images exactly one run gets right (``a``, ``b``: bool, right or not)."""
    return 100.0 * math.sqrt(np.mean(a != b) / a.size)


def class_errors(right: np.ndarray, labels: np.ndarray, classes: int) -> np.ndarray:
    """Error (percent) on each class, ``(classes,)``; NaN for a class without images."""
    wrong = np.bincount(labels[~right], minlength=classes)
    count = np.bincount(labels, minlength=classes)
    with np.errstate(invalid="ignore", divide="ignore"):
        return 100.0 * wrong / count


def class_agreement(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    """Pearson's r between two runs' per-class differences of error on the test set and on the pool: near 1,
    the seeds' networks favour the same classes on both (their difference is the networks'); near 0, chance."""
    test, pool = a["test_classes"] - b["test_classes"], a["pool_classes"] - b["pool_classes"]
    keep = np.isfinite(test) & np.isfinite(pool)
    if keep.sum() < 3 or test[keep].std() == 0 or pool[keep].std() == 0:
        return float("nan")
    return float(np.corrcoef(test[keep], pool[keep])[0, 1])


def pair_stats(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    """``delta`` (percent, error of a less b), ``d`` (disagreement), ``chance`` and ``z`` of two runs."""
    delta = 100.0 * (np.mean(~a) - np.mean(~b))
    chance = chance_sd(a, b)
    return {"delta": delta, "d": float(np.mean(a != b)), "chance": chance,
            "z": delta / chance if chance > 0 else 0.0}


def _config(record: dict[str, Any], eval_split: str, pool_size: int | None) -> TrainConfig:
    """The run's settings, testing on ``eval_split``: ``"test"``, the test split (the run's own test set if it
    tested there); ``"val"``, the pool (``pool_size`` images, or all)."""
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    values = {k: v for k, v in record["config"].items() if k in names and k != "preset"}
    own = values.get("eval_split", "test") == eval_split == "test"
    values.update(eval_split=eval_split, test_size=pool_size if eval_split == "val" else
                  values.get("test_size") if own else None)
    if isinstance(values.get("classes"), list):
        values["classes"] = tuple(values["classes"])
    return TrainConfig.from_preset(record["config"]["preset"], **values)


def _group_key(record: dict[str, Any]) -> str:
    """What a run is, but for its seed (runs of one group are seeds of one experiment)."""
    config = {k: v for k, v in record["config"].items() if k in {f.name for f in dataclasses.fields(TrainConfig)}}
    for k in ("seed", "device", "num_workers", "eval_every", "eval_batch_size", "checkpoint_every", "compile",
              "data_dir"):
        config.pop(k, None)
    return json.dumps(config, sort_keys=True)


@torch.no_grad()
def _correct(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor, normalise: Standardisation,
             channels_last: bool, amp: bool, batch_size: int = 500) -> np.ndarray:
    """Which images ``model`` gets right, bool ``(N,)``: the trainer's test (its batch size, layout,
    standardisation and autocast) image by image."""
    model.eval()
    device = next(model.parameters()).device
    right = []
    for start in range(0, len(labels), batch_size):
        x = normalise(images[start : start + batch_size].to(device))
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            logits = model(x)
        right.append(logits.argmax(1) == labels[start : start + batch_size].to(device))
    return torch.cat(right).cpu().numpy()


def _evaluate(run: Path, record: dict[str, Any], data: dict[tuple, Any], pool_size: int | None,
              device: torch.device) -> dict[str, np.ndarray]:
    """Which images of the test set and of the pool the final network of ``run`` gets right (``"test"``,
    ``"pool"``), and its error (percent) on each class of each (``"test_classes"``, ``"pool_classes"``)."""
    std = record["config"]["standardisation"]  # the run's own, as recorded (not recomputed)
    normalise = Standardisation.of(torch.tensor(std["mean"]), torch.tensor(std["std"]), device)
    state = torch.load(run / "checkpoint.pt", map_location="cpu", weights_only=False)
    out, model = {}, None
    for name, split in zip(SETS, ("test", "val"), strict=True):
        cfg = _config(record, split, pool_size)
        key = (cfg.dataset, str(Path(cfg.data_dir).resolve()), cfg.train_size, cfg.test_size, cfg.subset_seed, split,
               cfg.image_size, cfg.classes)
        if key not in data:
            data[key] = load_data(cfg)[1]
        held = data[key]
        if model is None:
            model = create_model(cfg.model, len(held.classes))
            model.load_state_dict(state["model"])
            model = model.to(device, memory_format=torch.channels_last if cfg.channels_last else torch.contiguous_format)
        out[name] = _correct(model, held.images, held.labels, normalise, cfg.channels_last, cfg.amp)
        out[f"{name}_classes"] = class_errors(out[name], held.labels.numpy(), len(held.classes))
    return out


def _setup(record: dict[str, Any]) -> str:
    """How a summary row names a group's network and length."""
    return f"{record['config']['model']}, {record['config']['epochs']} epochs"


def _tested(record: dict[str, Any]) -> bool:
    """Whether the run's recorded error is the test split's (not a validation run's)."""
    return record["config"].get("eval_split", "test") == "test"


def _recorded(record: dict[str, Any]) -> str:
    return f"{record['test_error']:.2f}" if _tested(record) else "a validation run"


def _label(run: Path) -> str:
    return f"{run.parent.parent.name}/{run.name}" if run.parent.name == "runs" else run.name


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="finished hba-augment train --out folders")
    parser.add_argument("--out", type=Path, required=True, help="folder of the report and correct/*.npz")
    parser.add_argument("--pool-size", type=int, default=None,
                        help="held-out pool: a class-balanced subset of this many of the unused training images "
                             "(default: all of them)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--device", default="cpu", help="torch device of the evaluation (runs on a GPU: its "
                        "rounding differs, so the recomputed test error may differ from the recorded one by an image)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    (args.out / "correct").mkdir(parents=True, exist_ok=True)

    data: dict[tuple, Any] = {}
    runs, groups = {}, defaultdict(list)
    for run in sorted(args.runs):
        label = _label(run)
        file = args.out / "correct" / (label.replace("/", "__") + ".npz")
        if not (run / "result.json").is_file() or not (file.is_file() or (run / "checkpoint.pt").is_file()):
            print(f"skipped (not finished, or no checkpoint): {run}", flush=True)
            continue
        record = json.loads((run / "result.json").read_text())
        request = -1 if args.pool_size is None else args.pool_size
        if file.is_file():  # evaluated before: a report joins runs of several calls
            with np.load(file) as saved:
                if int(saved["pool_request"]) != request:
                    raise SystemExit(f"{file} holds a pool of --pool-size {int(saved['pool_request'])} (-1: all), "
                                     f"not {request}: use another --out")
                right = {name: np.unpackbits(saved[name], count=int(saved[f"{name}_n"])).astype(bool) for name in SETS}
                right.update({f"{name}_classes": saved[f"{name}_classes"] for name in SETS})
        else:
            right = _evaluate(run, record, data, args.pool_size, torch.device(args.device))
            np.savez_compressed(file, pool_request=request, **{name: np.packbits(right[name]) for name in SETS},
                                **{f"{name}_n": right[name].size for name in SETS},
                                **{f"{name}_classes": right[f"{name}_classes"] for name in SETS})
        runs[label] = (record, right)
        groups[_group_key(record)].append(label)
        print(f"{label}: test {100 * np.mean(~right['test']):.2f} (recorded {_recorded(record)}), "
              f"pool {100 * np.mean(~right['pool']):.2f}", flush=True)

    pairs = []
    for labels in groups.values():
        for a, b in itertools.combinations(labels, 2):
            stats = {name: pair_stats(runs[a][1][name], runs[b][1][name]) for name in SETS}
            pairs.append((a, b, {**stats, "class_r": class_agreement(runs[a][1], runs[b][1])}))
    _write(args, sys.argv[1:] if argv is None else argv, runs, pairs)


def _write(args: argparse.Namespace, argv: list[str], runs: dict, pairs: list) -> None:
    lines = [
        "# Image by image agreement of runs that differ only by seed (`benchmarks/eval_noise.py`)\n",
        f"- Command: `python benchmarks/eval_noise.py {' '.join(argv)}`",
        f"- Date: {datetime.datetime.now(datetime.UTC).isoformat(timespec='seconds')}; commit {git_commit()}; "
        f"device {describe_device(torch.device(args.device))}",
        "- test: the run's own test set; pool: the train split less the run's training images (`--eval-split val`)",
        "",
        "| run | test images | test error (%) (recorded) | pool images | pool error (%) |",
        "|---|---|---|---|---|",
    ]
    for label, (record, right) in runs.items():
        lines.append(f"| {label} | {right['test'].size:,} | {100 * np.mean(~right['test']):.2f} "
                     f"({_recorded(record)}) | {right['pool'].size:,} | {100 * np.mean(~right['pool']):.2f} |")
    lines += ["", "Pairs of runs that differ only by seed: `delta` = error of the first less the second (points), "
              "`d` = fraction of images exactly one gets right, `chance` = 100 sqrt(d / N), `z` = delta / chance; "
              "`class r`: Pearson's r of the two sets' per-class differences (near 1: the networks favour the same "
              "classes on both).",
              "", "| pair | test delta | test d | test chance | test z | pool delta | pool d | pool chance | pool z | "
              "class r |", "|---|---|---|---|---|---|---|---|---|---|"]
    for a, b, stats in pairs:
        t, p = stats["test"], stats["pool"]
        lines.append(f"| {a} - {b} | {t['delta']:+.2f} | {t['d']:.3f} | {t['chance']:.2f} | {t['z']:+.2f} | "
                     f"{p['delta']:+.2f} | {p['d']:.3f} | {p['chance']:.2f} | {p['z']:+.2f} | {stats['class_r']:+.2f} |")
    summary = {}
    if pairs:
        lines += ["", "Over the pairs of each network and length, and of all (a difference's variance: `sd of delta`^2 = "
                  "its chance part^2 + the networks' part):", "",
                  "| pairs of | set | pairs | mean z^2 | sd of delta (points) | its chance part | the networks' part "
                  "mean(delta^2 - chance^2), points^2 |", "|---|---|---|---|---|---|---|"]
        setups = sorted({_setup(runs[a][0]) for a, _, _ in pairs})
        for setup in [*setups, *(["all"] if len(setups) > 1 else [])]:
            chosen = [st for a, _, st in pairs if setup in ("all", _setup(runs[a][0]))]
            for name in SETS:
                stats = [st[name] for st in chosen]
                z2 = float(np.mean([st["z"] ** 2 for st in stats]))
                sd = math.sqrt(np.mean([st["delta"] ** 2 for st in stats]))
                chance = math.sqrt(np.mean([st["chance"] ** 2 for st in stats]))
                excess = float(np.mean([st["delta"] ** 2 - st["chance"] ** 2 for st in stats]))
                summary.setdefault(setup, {})[name] = {"pairs": len(stats), "mean_z2": z2, "sd_delta": sd,
                                                       "chance": chance, "excess": excess}
                lines.append(f"| {setup} | {name} | {len(stats)} | {z2:.2f} | {sd:.2f} | {chance:.2f} | {excess:+.3f} |")
            summary[setup]["class_r"] = float(np.nanmean([st["class_r"] for st in chosen]))
            # The two sets' images are disjoint: if the networks differ alike on both, the sets' deltas differ
            # by the two chances alone.
            summary[setup]["sd_test_less_pool"] = math.sqrt(np.mean([(st["test"]["delta"] - st["pool"]["delta"]) ** 2
                                                                     for st in chosen]))
            summary[setup]["its_chance"] = math.sqrt(np.mean([st["test"]["chance"] ** 2 + st["pool"]["chance"] ** 2
                                                              for st in chosen]))
        lines += ["", "Do the networks differ alike on both sets? Mean `class r`, and the sd of (test delta - pool delta) "
                  "against what chance alone gives it:", ""]
        lines += [f"- {setup}: class r {v['class_r']:+.2f}; test delta - pool delta: sd {v['sd_test_less_pool']:.2f}, "
                  f"chance {v['its_chance']:.2f}" for setup, v in summary.items()]
    (args.out / "eval_noise.md").write_text("\n".join(lines) + "\n")
    (args.out / "eval_noise.json").write_text(json.dumps(
        {"runs": {label: {"test_error": 100 * float(np.mean(~r["test"])), "pool_error": 100 * float(np.mean(~r["pool"])),
                          "recorded_test_error": rec["test_error"] if _tested(rec) else None} for label, (rec, r) in runs.items()},
         "pairs": [{"a": a, "b": b, **s} for a, b, s in pairs], "summary": summary}, indent=1) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
