"""Choose how a campaign call lays out its trainings, from two ``train_speed.py`` runs made just before it.

Lanes (``hba_augment/_lanes.py``) put several trainings in one process so that their kernels share the GPU
where processes take turns; whether that is faster on a given GPU is measured, not assumed. Given the
``OUT.json`` of ``train_speed.py`` for the campaign's usual layout (e.g. ``--procs 8``, mode ``graphs``) and
for one or more lanes layouts (e.g. ``--procs 8 --lanes 2 --epochs graphs=5,eager=5``, ``--procs 4 --lanes
4``), this compares the epochs per second of all runs together, and prints, on stdout, the
``gpu_campaign.py`` options of the fastest layout and mode in which every run finished that is at least
``--min-gain`` times faster than the usual one and whose training fits ``--fit``, else nothing
(``--cuda-graphs`` only for the mode ``graphs``):

    --max-procs P --lanes K [--fuse] [--cuda-graphs] --wall-seconds {"P":S}

(``--fuse`` where the layout was probed fused: ``train_speed.py --fuse``, each process's K trainings as one
network.)

``S``: how long one training of ``--epochs`` epochs takes at that layout, from the probe: its runs' median
seconds per epoch times the epochs, plus what a probe run spent besides its epochs after the first
(start-up, the first epoch's capture), scaled, with ``--plan``, by how far the probe's estimate for the
usual layout fell short of the plan's measured ``train.wall_seconds`` there (1.36x on 2026-11-28: a real
training tests every tenth epoch and reads its own data), times ``--headroom``; a layout whose ``S`` passes
``--fit`` is not chosen (the campaign would start no training). The reasoning goes to stderr. Usage in one device call::

    flags=$(python3 benchmarks/pick_layout.py $OUT/speed_base.json $OUT/speed_lanes.json --epochs 200 \\
        --plan benchmarks/campaigns/paper_scale_cifar10.json --fit 490)
    python3 benchmarks/gpu_campaign.py ... $flags
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_speed import pace  # the probe's own measure of a layout


def layout(report: dict[str, Any], mode: str) -> dict[str, float]:
    """``procs``, ``lanes``, all runs' epochs per second, and one run's median seconds per epoch and overhead
    (wall time less its epochs after the first) in ``mode``; ``ValueError`` if a run of it failed."""
    rows = [r for r in report["rows"] if r["mode"] == mode]
    if not rows or any(r["exit_code"] != 0 or not r.get("median_epoch_seconds") for r in rows):
        raise ValueError(f"{mode}: not every run finished ({len(rows)} runs)")
    overheads = [r["wall_seconds"] - (r["epochs"] - 1) * r["median_epoch_seconds"] for r in rows]
    median, together = pace([r["median_epoch_seconds"] for r in rows])
    return {"procs": report["procs"], "lanes": report.get("lanes", 1), "fuse": bool(report.get("fuse")),
            "epochs_per_second": together, "seconds_per_epoch": median, "overhead": max(overheads)}


def training_seconds(measured: dict[str, float], epochs: int) -> float:
    """One training of ``epochs`` epochs at a layout's pace, from its probe."""
    return measured["overhead"] + epochs * measured["seconds_per_epoch"]


def _refusal(args: argparse.Namespace, lanes: int, gain: float, seconds: int) -> str:
    """Why a layout of ``lanes`` a process, ``gain`` times the usual layout's pace and ``seconds`` a training
    is not chosen (``""``: it may be)."""
    if lanes < 2:
        return "one training a process"
    if args.max_lanes is not None and lanes > args.max_lanes:
        return f"more lanes than --max-lanes {args.max_lanes}"
    if gain < args.min_gain:
        return f"gain below {args.min_gain}"
    if args.fit is not None and seconds > args.fit:
        return f"more than the {args.fit:.0f} s of --fit"
    return ""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("base", type=Path, help="train_speed.py OUT.json of the usual layout")
    p.add_argument("lanes", type=Path, nargs="+", help="train_speed.py OUT.json of each lanes layout probed")
    p.add_argument("--mode", default="graphs", help="the usual layout's mode (default: graphs)")
    p.add_argument("--epochs", type=int, default=200, help="epochs of the campaign's trainings (default: 200)")
    p.add_argument("--plan", type=Path,
                   help="the campaign plan: its train.wall_seconds at the usual layout's process count calibrates "
                   "the printed time (default: the probe's estimate as it is)")
    p.add_argument("--headroom", type=float, default=1.2,
                   help="factor on the lanes' estimate (default: 1.2; on 2026-11-28 three lanes took more than "
                   "1.10x the scaled estimate, and a training that does not finish is lost)")
    p.add_argument("--fit", type=float,
                   help="seconds a training may take in the call the flags are for (its --budget less the margin "
                   "and the start): layouts whose training would take longer are not chosen (default: no limit)")
    p.add_argument("--max-lanes", type=int,
                   help="layouts with more lanes a process are not chosen: policy_quality.py fills a process's lanes "
                   "with seeds of one policy, so a campaign of 3 seeds a policy uses at most 3 (default: no limit)")
    p.add_argument("--min-gain", type=float, default=1.3, help="how much faster lanes must be (default: 1.3)")
    p.add_argument("--out", type=Path,
                   help="also write the printed options to this file, empty where no lanes are chosen (for a call "
                   "that cannot capture stdout, e.g. a step of benchmarks/campaigns/issue21_gpu.sh)")
    args = p.parse_args(argv)
    flags = _choose(args)
    if flags:
        print(flags)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(flags + "\n" if flags else "")
    return 0


def _choose(args: argparse.Namespace) -> str:
    """The ``gpu_campaign.py`` options of the chosen layout, ``""`` for none (the reasoning to stderr)."""
    try:
        base = layout(json.loads(args.base.read_text()), args.mode)
    except (OSError, KeyError, ValueError) as e:
        print(f"pick_layout: no lanes (the usual layout: {e})", file=sys.stderr)
        return ""
    scale = 1.0
    if args.plan is not None:
        # A real training tests every tenth epoch and reads its own data, which a few-epoch probe does not
        # show: scale by what the plan measured for the usual layout against what its probe says.
        measured = json.loads(args.plan.read_text())["train"].get("wall_seconds", {}).get(str(base["procs"]))
        if measured:
            scale = measured / training_seconds(base, args.epochs)
            print(f"pick_layout: the plan's {measured:.0f} s at {base['procs']} processes is {scale:.2f}x the "
                  f"probe's estimate; each layout's estimate is scaled alike", file=sys.stderr)
    print(f"pick_layout: {base['procs']} x {base['lanes']} ({args.mode}): {base['epochs_per_second']:.2f} epochs/s",
          file=sys.stderr)
    # Every layout and mode probed in which each run finished (eager lanes are the fallback where a capture
    # fails beside other lanes, as one process in eight did on 2026-11-28), if faster enough and short enough.
    chosen: tuple[str, dict[str, float], int] | None = None
    for path in args.lanes:
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            print(f"pick_layout: {path}: not read ({e})", file=sys.stderr)
            continue
        for mode in dict.fromkeys(r["mode"] for r in report.get("rows", [])):
            fused = " fused" if report.get("fuse") else ""
            name = f"{report.get('procs')} x {report.get('lanes', 1)}{fused} ({mode})"
            try:
                lanes = layout(report, mode)
            except (KeyError, ValueError) as e:
                print(f"pick_layout: {name}: not chosen ({e})", file=sys.stderr)
                continue
            gain = lanes["epochs_per_second"] / base["epochs_per_second"]
            seconds = round(training_seconds(lanes, args.epochs) * scale * args.headroom)
            why = _refusal(args, lanes["lanes"], gain, seconds)
            print(f"pick_layout: {name}: {lanes['epochs_per_second']:.2f} epochs/s ({gain:.2f}x), a training "
                  f"{seconds} s{': not chosen, ' + why if why else ''}", file=sys.stderr)
            if not why and (chosen is None or lanes["epochs_per_second"] > chosen[1]["epochs_per_second"]):
                chosen = (mode, lanes, seconds)
    if chosen is None:
        print("pick_layout: no lanes", file=sys.stderr)
        return ""
    mode, lanes, seconds = chosen
    procs = int(lanes["procs"])
    # No spaces or quotes to strip: the shell splits $flags on spaces and passes the rest as it is.
    walls = json.dumps({str(procs): seconds}, separators=(",", ":"))
    graphs = " --cuda-graphs" if mode == "graphs" else ""
    fuse = " --fuse" if lanes["fuse"] else ""
    return f"--max-procs {procs} --lanes {lanes['lanes']}{fuse}{graphs} --wall-seconds {walls}"


if __name__ == "__main__":
    sys.exit(main())
