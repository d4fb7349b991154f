"""Choose how a campaign call lays out its trainings, from two ``train_speed.py`` runs made just before it.

Lanes (``hba_augment/_lanes.py``) put several trainings in one process so that their kernels share the GPU
where processes take turns; whether that is faster on a given GPU is measured, not assumed. Given the
``OUT.json`` of ``train_speed.py`` for the campaign's usual layout (e.g. ``--procs 8``) and for a lanes
layout (e.g. ``--procs 8 --lanes 3``), both in one mode (``graphs``), this compares the epochs per second of
all runs together and prints, on stdout, the ``gpu_campaign.py`` options of the lanes layout when it is at
least ``--min-gain`` times faster, else nothing:

    --lanes K --cuda-graphs --wall-seconds {"P":S}

``S``: how long one training of ``--epochs`` epochs takes at that layout, from the probe: its runs' median
seconds per epoch times the epochs, plus what a probe run spent besides its epochs after the first
(start-up, the first epoch's capture). The reasoning goes to stderr. Usage in one device call::

    flags=$(python3 benchmarks/pick_layout.py $OUT/speed_base.json $OUT/speed_lanes.json --epochs 200)
    python3 benchmarks/gpu_campaign.py ... $flags
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any


def layout(report: dict[str, Any], mode: str) -> dict[str, float]:
    """``procs``, ``lanes``, all runs' epochs per second, and one run's median seconds per epoch and overhead
    (wall time less its epochs after the first) in ``mode``; ``ValueError`` if a run of it failed."""
    rows = [r for r in report["rows"] if r["mode"] == mode]
    if not rows or any(r["exit_code"] != 0 or not r.get("median_epoch_seconds") for r in rows):
        raise ValueError(f"{mode}: not every run finished ({len(rows)} runs)")
    medians = [r["median_epoch_seconds"] for r in rows]
    overheads = [r["wall_seconds"] - (r["epochs"] - 1) * r["median_epoch_seconds"] for r in rows]
    return {"procs": report["procs"], "lanes": report.get("lanes", 1), "epochs_per_second": sum(1 / m for m in medians),
            "seconds_per_epoch": statistics.median(medians), "overhead": max(overheads)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("base", type=Path, help="train_speed.py OUT.json of the usual layout")
    p.add_argument("lanes", type=Path, help="train_speed.py OUT.json of the lanes layout")
    p.add_argument("--mode", default="graphs", help="the mode both ran (default: graphs)")
    p.add_argument("--epochs", type=int, default=200, help="epochs of the campaign's trainings (default: 200)")
    p.add_argument("--min-gain", type=float, default=1.3, help="how much faster lanes must be (default: 1.3)")
    args = p.parse_args(argv)
    try:
        base, lanes = (layout(json.loads(path.read_text()), args.mode) for path in (args.base, args.lanes))
    except (OSError, KeyError, ValueError) as e:
        print(f"pick_layout: no lanes ({e})", file=sys.stderr)
        return 0
    gain = lanes["epochs_per_second"] / base["epochs_per_second"]
    print(f"pick_layout: {base['procs']} x {base['lanes']}: {base['epochs_per_second']:.2f} epochs/s; "
          f"{lanes['procs']} x {lanes['lanes']}: {lanes['epochs_per_second']:.2f} epochs/s ({gain:.2f}x)",
          file=sys.stderr)
    if gain < args.min_gain or lanes["lanes"] < 2:
        print(f"pick_layout: no lanes (gain below {args.min_gain})", file=sys.stderr)
        return 0
    seconds = round(lanes["overhead"] + args.epochs * lanes["seconds_per_epoch"])
    # No spaces or quotes to strip: the shell splits $flags on spaces and passes the rest as it is.
    walls = json.dumps({str(lanes["procs"]): seconds}, separators=(",", ":"))
    print(f"--lanes {lanes['lanes']} --cuda-graphs --wall-seconds {walls}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
