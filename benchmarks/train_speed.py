"""How fast N trainings run side by side on one device, eager and with ``--cuda-graphs`` (issue 21; issue 20's
campaigns).

Paper-scale runs on a lent GPU are several trainings at once (``gpu_campaign.py``), and each is bound by the
host launching kernels: eight at once took 1.57 s per epoch each on an H100, where one alone took 0.62 s
(``benchmarks/campaigns/README.md``). ``train --cuda-graphs`` replays each full batch's whole step from one
CUDA graph. This starts ``--procs`` copies of the same ``hba-augment train`` command at once, for each mode
in turn (``--epochs``: ``graphs``, ``eager`` or ``compile``, by default ``graphs`` then ``eager``), and reads each run's ``history.jsonl``: the
median of its epochs' ``train_seconds`` (the first epoch, which captures the graph, excluded where there
are more), the run's wall time and its test error. Every mode runs on the same device in the same call, so
the ratio is a fair one. With ``--lanes K`` each process trains K seeds side by side in one process
(``train --seed 0,...,K-1``, :mod:`hba_augment._lanes`): on a GPU their kernels share it at once, where
processes take turns; compare ``--procs 8`` with ``--procs 1 --lanes 8`` by the epochs per second of all
runs together. With ``--fuse`` a process's K seeds train as one fused network (``train --fuse``,
:mod:`hba_augment.train.fused`) instead of K lanes.

Usage (on the lent GPU, the JPEG archive carried in ``.device/data``)::

    python3 benchmarks/train_speed.py --data-dir .device/data/cifar-10-jpeg.tar.gz --procs 8 \\
        --epochs graphs=20,eager=10 --out $OUT/train_speed

writes ``OUT.json`` and ``OUT.md``. On the CPU, ``--device cpu`` runs the same (the step is not captured
there: both modes run the same eager step), which is what the test does.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _provenance import git_commit

#: Each mode's options (``compile``: the network and an ``hba:`` policy's pixel work through inductor).
MODES = {"eager": [], "graphs": ["--cuda-graphs"], "compile": ["--compile"]}


def _epochs(text: str) -> dict[str, int]:
    out = {}
    for part in text.split(","):
        mode, _, value = part.partition("=")
        if mode not in MODES or not value.isdigit() or int(value) < 1:
            raise argparse.ArgumentTypeError(f"expected MODE=EPOCHS with MODE in {sorted(MODES)}, got {part!r}")
        out[mode] = int(value)
    return out


def train_command(args: argparse.Namespace, mode: str, out: Path) -> list[str]:
    """The ``hba-augment train`` command of one process of ``mode``: ``--lanes`` seeds (0, 1, ...) side by side,
    each in ``out`` with ``{seed}`` replaced."""
    seeds = ",".join(str(seed) for seed in range(args.lanes))
    return [sys.executable, "-m", "hba_augment", "train", "--dataset", args.dataset, "--data-dir", args.data_dir,
            "--preset", args.preset, "--model", args.model, "--policy", args.policy, "--epochs",
            str(args.epochs[mode]), "--train-size", str(args.train_size), "--device", args.device, "--threads",
            str(args.threads), "--no-progress", *shlex.split(args.extra), *MODES[mode], "--seed", seeds,
            *(["--fuse"] if args.fuse and args.lanes > 1 else []), "--out", str(out)]


def summarise(run: Path) -> dict[str, object]:
    """Per-epoch training seconds (median, first epoch excluded where there are more) and the test error of
    the run in ``run``."""
    history = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines() if line.strip()]
    seconds = [entry["train_seconds"] for entry in history]
    result = json.loads((run / "result.json").read_text()) if (run / "result.json").exists() else {}
    return {"epochs": len(seconds), "first_epoch_seconds": seconds[0] if seconds else None,
            "median_epoch_seconds": statistics.median(seconds[1:] or seconds) if seconds else None,
            "test_error": result.get("test_error"),
            "device_description": result.get("config", {}).get("device_description")}


def run_mode(args: argparse.Namespace, mode: str, root: Path) -> list[dict[str, object]]:
    """``--procs`` processes of ``mode`` at once, ``--lanes`` runs each; the runs' summaries, with their
    process's wall time and exit code."""
    procs = []
    for i in range(args.procs):
        name = f"{mode}-{i}"
        out = root / (f"{name}-lane{{seed}}" if args.lanes > 1 else name)
        log = open(root / f"{name}.log", "w", encoding="utf-8")  # closed below, once the process ended
        procs.append((name, out, log, time.perf_counter(), subprocess.Popen(
            train_command(args, mode, out), stdout=log, stderr=subprocess.STDOUT)))
    rows = []
    for name, out, log, start, proc in procs:
        code = proc.wait(timeout=args.timeout)
        wall = time.perf_counter() - start
        log.close()
        for seed in range(args.lanes):
            run = Path(str(out).replace("{seed}", str(seed)))
            row = {"mode": mode, "run": run.name, "exit_code": code, "wall_seconds": wall}
            if (run / "result.json").exists():
                row.update(summarise(run))
            if code != 0:
                row["log_tail"] = (root / f"{name}.log").read_text()[-2000:]
            rows.append(row)
    return rows


def pace(medians: list[float]) -> tuple[float, float]:
    """The median run's seconds per epoch and the epochs per second of all runs together at that pace: a
    campaign's throughput. (Not each run's own rate summed: in a probe of a few epochs the runs that start
    last run alone at its end, 0.8 s an epoch against 1.66 on 2026-11-28.)"""
    median = statistics.median(medians)
    return median, len(medians) / median


def _fmt(row: dict[str, object], key: str, spec: str = ".3f") -> str:
    return format(row[key], spec) if isinstance(row.get(key), int | float) else "-"


def markdown(meta: dict[str, object], rows: list[dict[str, object]]) -> str:
    lanes = "fused" if meta.get("fuse") else "lanes"
    layout = f"{meta['procs']} x {meta['lanes']} {lanes}" if meta.get("lanes", 1) > 1 else f"{meta['procs']}"
    lines = [f"# {layout} trainings side by side, per mode ({meta['device']})", "",
             f"- Command: `{meta['command']}`", f"- Date: {meta['date']}",
             f"- Commit: {meta.get('commit', 'unknown')}", "",
             "| mode | run | epochs | s per epoch (median) | first epoch s | wall s | test error | exit |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['mode']} | {r['run']} | {r.get('epochs', '-')} | {_fmt(r, 'median_epoch_seconds')} | "
                     f"{_fmt(r, 'first_epoch_seconds')} | {_fmt(r, 'wall_seconds', '.0f')} | "
                     f"{_fmt(r, 'test_error', '.2f')} | {r['exit_code']} |")
    failed = {r["run"].rsplit("-lane", 1)[0]: r["log_tail"] for r in rows if r.get("log_tail")}
    for name, tail in failed.items():
        # The exception's own line (the last ``SomeError: ...`` of the log), else the log's last line.
        lines_of = [line.strip() for line in tail.splitlines() if line.strip()] or ["(no output)"]
        raised = [line for line in lines_of if re.match(r"[\w.]+(Error|Exception|Interrupt)\b", line)]
        lines.append(f"\nProcess {name} failed: `{(raised or lines_of)[-1]}` (its log's end: OUT.json)")
    for mode in dict.fromkeys(r["mode"] for r in rows):
        values = [r["median_epoch_seconds"] for r in rows if r["mode"] == mode and r.get("median_epoch_seconds")]
        if values:
            median, together = pace(values)
            lines.append(f"\n{mode}: median over runs {median:.3f} s per epoch; all {len(values)} finished runs "
                         f"together {together:.2f} epochs per second")
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="imagefolder")
    p.add_argument("--data-dir", required=True)
    p.add_argument("--preset", default="cifar10")
    p.add_argument("--model", default="wrn-40-2")
    p.add_argument("--policy", default="hba:cifar10")
    p.add_argument("--train-size", type=int, default=4000)
    p.add_argument("--epochs", type=_epochs, default=_epochs("graphs=20,eager=10"),
                   help="MODE=EPOCHS,... in the order to run (default: graphs=20,eager=10)")
    p.add_argument("--procs", type=int, default=8, help="processes at once (default: 8)")
    p.add_argument("--lanes", type=int, default=1,
                   help="trainings per process, side by side (train --seed 0,1,...; default: 1)")
    p.add_argument("--fuse", action="store_true",
                   help="with --lanes K: each process trains its K seeds as one fused network (train --fuse; the "
                   "modes eager and graphs)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--threads", type=int, default=2, help="torch threads per training (default: 2)")
    p.add_argument("--extra", default="--amp --num-workers 2", help="more train options (default: the campaigns')")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds a mode may take (default: 600)")
    p.add_argument("--out", type=Path, help="write OUT.json and OUT.md")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.fuse and "compile" in args.epochs:
        raise SystemExit("train_speed: error: fused runs do not take --compile: drop the compile mode")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for mode in args.epochs:
            rows += run_mode(args, mode, Path(tmp))
    # The machine as the runs describe it (a CPU's model, cores and threads); "cpu" says too little.
    described = [r["device_description"] for r in rows if r.get("device_description")]
    device = described[0] if described else args.device
    if args.device.startswith("cuda"):
        import torch  # only here: the script itself runs no torch

        device = torch.cuda.get_device_name(torch.device(args.device))
    meta = {"procs": args.procs, "lanes": args.lanes, "fuse": args.fuse and args.lanes > 1, "device": device,
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), "commit": git_commit(),
            "command": "python3 benchmarks/train_speed.py " + shlex.join(sys.argv[1:] if argv is None else argv)}
    text = markdown(meta, rows)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps({**meta, "rows": rows}, indent=1) + "\n")
        args.out.with_suffix(".md").write_text(text)
    return 0 if all(r["exit_code"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
