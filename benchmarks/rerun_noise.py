"""Run-to-run noise of trained policies: the same run trained again, on another machine.

``policy_quality.py`` records each finished run (``<out>/results/*.json``) with what defines it: its
``hba-augment train`` arguments and the schedule's content. On one machine a run is repeatable bit for bit,
so a rerun there tells nothing; on another machine (another CPU, other vector code) the arithmetic differs
from the first step, and after a full training the two runs are two draws of the same experiment. This
script finds every run recorded on more than one machine and reports how far the copies' test errors (and
losses) lie apart: the noise of one training run, which decides how many seeds a comparison of two policies
needs (``benchmarks/RESULTS.md``).

Two records are the same run when their arguments agree once the schedule file's path is replaced by its
content's digest and ``--test-size`` by the number of test images the run actually used (the whole split
and ``--test-size`` of its size are the same run).

Usage::

    python benchmarks/rerun_noise.py [--root benchmarks/results] [--model wrn-16-1] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from policy_quality import SCHEDULE_DIGEST, canonical_key  # the records' key is the benchmark's own

REPO = Path(__file__).resolve().parents[1]

__all__ = ["load_runs", "main", "rerun_pairs", "summarise"]


def _identity(record: dict[str, Any]) -> tuple[str, ...] | None:
    """What defines a recorded run, independent of where its files were (see the module docstring)."""
    key, result = record.get("key"), record.get("result", {})
    if not isinstance(key, list) or "test_error" not in result:
        return None
    key = canonical_key(key)  # a record from before an option became value-free is the same run
    digest = next((k for k in key if isinstance(k, str) and k.startswith(SCHEDULE_DIGEST)), None)
    out, skip = [], False
    for i, arg in enumerate(key):
        if skip:
            skip = False
        elif arg == "--test-size":
            skip = True
        elif arg == "--policy":
            value = key[i + 1]
            out += ["--policy", digest if digest and value.startswith("hba:") else value]
            skip = True
        elif arg != digest:
            out.append(arg)
    out += ["test-images", str(result.get("test_images")), "data", str(result.get("config", {}).get("data_fingerprint"))]
    return tuple(out)


def load_runs(root: Path, model: str | None = None) -> list[dict[str, Any]]:
    """Every record under ``root`` (``**/results/*.json`` of ``policy_quality.py``), as ``{"identity",
    "machine", "test_error", "test_loss", "path"}``; ``model`` keeps only that network's runs."""
    runs = []
    for path in sorted(root.glob("**/results/*.json")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        identity = _identity(record) if isinstance(record, dict) else None
        if identity is None:
            continue
        config = record["result"].get("config", {})
        if model is not None and config.get("model") != model:
            continue
        runs.append({"identity": identity, "machine": config.get("device_description", "?"),
                     "test_error": float(record["result"]["test_error"]),
                     "test_loss": float(record["result"].get("test_loss", math.nan)), "path": path})
    return runs


def rerun_pairs(runs: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Pairs of records of the same run on two different machines (the first record of each machine; runs
    repeated on one machine are copies, not draws)."""
    by_run: dict[tuple[str, ...], dict[str, dict[str, Any]]] = defaultdict(dict)
    for run in runs:
        by_run[run["identity"]].setdefault(run["machine"], run)
    pairs = []
    for machines in by_run.values():
        names = sorted(machines)
        pairs += [(machines[a], machines[b]) for i, a in enumerate(names) for b in names[i + 1:]]
    return pairs


def summarise(pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, float]:
    """Differences of the paired copies (second machine minus first, machines in name order): their count,
    mean, standard deviation, root mean square, and the noise of one run they imply (rms / sqrt 2: two
    independent draws of the same run differ by sqrt 2 times one draw's sd)."""
    errors = [b["test_error"] - a["test_error"] for a, b in pairs]
    losses = [b["test_loss"] - a["test_loss"] for a, b in pairs]
    if not errors:
        return {"pairs": 0}
    rms = math.sqrt(sum(d * d for d in errors) / len(errors))
    return {"pairs": len(errors), "mean": statistics.fmean(errors),
            "sd": statistics.stdev(errors) if len(errors) > 1 else math.nan, "rms": rms,
            "run_sd": rms / math.sqrt(2), "loss_rms": math.sqrt(sum(d * d for d in losses) / len(losses))}


def _policy(identity: tuple[str, ...]) -> str:
    value = identity[identity.index("--policy") + 1]
    return value[:len(SCHEDULE_DIGEST) + 16] + "..." if value.startswith(SCHEDULE_DIGEST) else value


def _markdown(pairs: list[tuple[dict[str, Any], dict[str, Any]]], summary: dict[str, float], command: str) -> str:
    lines = ["# Run-to-run noise: the same run on two machines", "", f"- Command: `{command}`", "",
             "| run (record) | seed | machine A | machine B | test error A | B | B - A | test loss B - A |",
             "|---|---|---|---|---|---|---|---|"]
    for a, b in pairs:
        seed = a["identity"][a["identity"].index("--seed") + 1] if "--seed" in a["identity"] else "?"
        lines.append(f"| {a['path'].parent.parent.name}/{a['path'].name} ({_policy(a['identity'])}) | {seed} | "
                     f"{a['machine'].split(',')[0]} | {b['machine'].split(',')[0]} | {a['test_error']:.2f} | {b['test_error']:.2f} | "
                     f"{b['test_error'] - a['test_error']:+.2f} | {b['test_loss'] - a['test_loss']:+.4f} |")
    if summary["pairs"]:
        lines += ["", f"{summary['pairs']} pairs: B - A mean {summary['mean']:+.2f}, sd {summary['sd']:.2f}, rms "
                  f"{summary['rms']:.2f} points; one run's noise (rms / sqrt 2) {summary['run_sd']:.2f} points; "
                  f"test loss rms {summary['loss_rms']:.4f}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", type=Path, default=REPO / "benchmarks" / "results", help="folder searched for records")
    p.add_argument("--model", help="only this network's runs (e.g. wrn-16-1)")
    p.add_argument("--out", type=Path, help="also write the markdown table here")
    args = p.parse_args(argv)
    pairs = rerun_pairs(load_runs(args.root, args.model))
    command = "python benchmarks/rerun_noise.py" + (f" --model {args.model}" if args.model else "")
    text = _markdown(pairs, summarise(pairs), command)
    print(text, end="")
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
