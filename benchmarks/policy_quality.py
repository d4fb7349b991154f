"""Policy quality on real data: train the same network with every augmentation policy, for several seeds.

Every run is one ``hba-augment train`` command (the exact command is recorded per run; with ``--lanes``,
several seeds of a policy share one process, and each records its own single-seed command), so a run can be
repeated alone, and an interrupted benchmark continues where it stopped (finished runs are reused,
unfinished ones resume from their checkpoint). Each finished run writes its result to
``OUT/results/<policy>-seed<N>.json`` at once: commit those files as they appear, and a later invocation,
on this machine or a fresh clone elsewhere, reuses them instead of training again; ``--report-only`` builds
the table from those files alone, training nothing, so that a comparison spread over several sessions has a
committed table at every stage (runs not done yet are marked). Writes ``OUT/policy_quality.md`` (a table of test error
mean +- sample std over the seeds, and wall time per policy, under a header with the command, git commit,
machine, torch version and date) and ``OUT/policy_quality.json`` (everything, per run); the runs' own
folders go to ``OUT/runs/`` (git-ignored).

Defaults (chosen from a measured epoch cost on the 2-core development machine, see
``DEFAULTS_NOTE``): WRN-10-1, 8 epochs, the paper's WRN settings otherwise (SGD lr 0.1 cosine, wd 5e-4,
batch 128), a 10,000-image class-balanced training subset (subset seed 0, the same for every run) of the
CIFAR-10 JPEG copy and its full 10,000-image test set, seeds 0, 1, 2, one torch thread per run, runs in
sequence. The HBA schedule is ``--hba`` (a shipped name or a schedule JSON path; default ``cifar10``).

    python benchmarks/policy_quality.py                      # the full benchmark (about 40 min, one free core)
    python benchmarks/policy_quality.py --jobs 2             # two runs at a time
    python benchmarks/policy_quality.py --epochs 1 --train-size 200 --test-size 200 --seeds 0 \\
        --policies none,cutout,hba --hba my_schedule.json --out /tmp/pq   # a smoke test
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import hashlib
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from hba_augment._cli_common import positive_int

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _provenance import git

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "cifar-10-jpeg.tar.gz"
#: How a run's key names its schedule's content (``_run_key``), followed by the file's sha256.
SCHEDULE_DIGEST = "schedule-sha256:"
DEFAULT_OUT = REPO / "benchmarks" / "results" / "policy_quality"
ALL_POLICIES = ("none", "baseline", "cutout", "autoaugment", "randaugment", "trivialaugment", "hba")
DEFAULTS_NOTE = (
    "Measured on the 2-core AMD EPYC development machine (one torch thread, while other jobs kept its load "
    "average at 5-7): one WRN-10-1 epoch on 10,000 32x32 images costs about 11.4 CPU-seconds (144 ms per "
    "batch of 128), 3.5 more with a per-image torchvision policy (HBA's batched policy: about 1.5); testing "
    "10,000 images about 3.5 and starting a run (imports, cached data) about 6. So 7 policies x 3 seeds x "
    "8 epochs is about 2,400 CPU-seconds, about 40 minutes in sequence when a core is free. On the busy "
    "machine wall time was about twice the CPU time; --jobs 2 runs two at a time."
)


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _seeds(text: str) -> list[int]:
    try:
        seeds = [int(t) for t in _csv(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"expected distinct seeds >= 0, got {text!r}")
    return seeds


def _policies(text: str) -> list[str]:
    names = _csv(text)
    bad = [n for n in names if _base_policy(n) not in ALL_POLICIES]
    if not names or bad:
        raise argparse.ArgumentTypeError(f"unknown policies {bad}; choose from {', '.join(ALL_POLICIES)}, "
                                         "hba:<shipped name or schedule path>, or LABEL=<one of those>")
    return list(dict.fromkeys(names))


def _base_policy(item: str) -> str:
    policy = item.split("=", 1)[1] if "=" in item else item
    return "hba" if policy.startswith("hba:") else policy


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--dataset", default="imagefolder", help="dataset format (hba-augment train --dataset)")
    p.add_argument("--data-dir", default=str(DEFAULT_DATA), help="dataset location")
    p.add_argument("--data-name", default="CIFAR-10 (JPEG q75 copy)", help="how the data is named in the report")
    p.add_argument("--preset", default="cifar10", help="hba-augment train --preset")
    p.add_argument("--model", default="wrn-10-1", help="network")
    p.add_argument("--epochs", type=positive_int, default=8, help="training epochs per run")
    p.add_argument("--train-size", type=positive_int, default=10000, help="class-balanced training subset")
    p.add_argument("--test-size", type=positive_int, help="class-balanced test subset (default: the whole test split)")
    p.add_argument("--subset-seed", type=int, default=0, help="seed of the subsets (the same for every run)")
    p.add_argument("--seeds", type=_seeds, default=[0, 1, 2], help="training seeds, comma-separated")
    p.add_argument("--policies", type=_policies, default=list(ALL_POLICIES), help="comma-separated, in table order")
    p.add_argument("--order", choices=("policies", "seeds"), default="policies",
                   help="which runs start first: every seed of the first policy, then the next policy's "
                   "(policies), or every policy's first seed, then their second (seeds: so that a campaign cut "
                   "short by a session's end has finished pairs of seeds; default: policies)")
    p.add_argument("--hba", default="cifar10", help="HBA schedule for the hba policy: shipped name or JSON path")
    p.add_argument("--device", default="cpu", help="torch device of the runs")
    p.add_argument("--threads", type=positive_int, default=1,
                   help="torch threads per run (one is robust on a shared 2-core machine)")
    p.add_argument("--jobs", type=positive_int, default=1, help="processes at a time")
    p.add_argument("--lanes", type=positive_int, default=1,
                   help="runs per process: up to this many seeds of one policy train side by side in one "
                   "hba-augment train process (--seed a,b,...; on a GPU they share it at once, where processes "
                   "take turns); each run's record is its own, as if it had run alone")
    p.add_argument("--fuse", action="store_true",
                   help="with --lanes: train a process's seeds as one fused network (hba-augment train --fuse) where "
                   "the model and policy allow it (WRNs, policies applied on the device; the others run as lanes). "
                   "A record keeps its run's key: fused, a run's augmentation draws differ from alone, their "
                   "distribution does not")
    p.add_argument("--num-workers", type=int, help="hba-augment train --num-workers (default: its own)")
    p.add_argument("--extra", default="", help="more hba-augment train options for every run, e.g. '--lr 0.05'")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="output folder (policy_quality.md/.json, runs/)")
    p.add_argument("--timeout", type=float, metavar="SECONDS",
                   help="stop a run that has not finished after this long (it stays unfinished: its checkpoint "
                   "resumes it next time) and go on with the others (default: no limit)")
    p.add_argument("--min-run-seconds", type=float, default=0.0, metavar="SECONDS",
                   help="with --timeout: start no run with less time than this left (it could not finish); "
                   "finished runs are reused whatever is left")
    p.add_argument("--keep-going", action="store_true",
                   help="a run that fails does not stop the others; the exit status is 1 if any failed")
    p.add_argument("--report-only", action="store_true",
                   help="train nothing: build the table from the finished runs' records in OUT/results/ and mark "
                   "the runs not done yet")
    return p


def _policy_arg(item: str, hba: str) -> str:
    """The ``hba-augment train --policy`` of a ``--policies`` item (``hba`` means ``hba:<--hba>``)."""
    policy = item.split("=", 1)[1] if "=" in item else item
    return f"hba:{hba}" if policy == "hba" else policy


def _label(item: str, hba: str) -> str:
    """The table row of a ``--policies`` item: its ``LABEL=`` if given, else its policy."""
    return item.split("=", 1)[0] if "=" in item else _policy_arg(item, hba)


def _schedule_digest(policy: str) -> str | None:
    """sha256 of the schedule file behind an ``hba:`` policy, so that a changed schedule is never reused."""
    if not policy.startswith("hba:"):
        return None
    from hba_augment import pretrained

    name = policy[4:]
    if name in pretrained.available_policies():
        data = pretrained.pretrained_path(name).read_bytes()
    else:
        path = Path(name) if Path(name).is_absolute() else REPO / name
        data = path.read_bytes()
    return hashlib.sha256(data).hexdigest()


def _slug(policy: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in policy)[:80]


def _machine(device: str = "cpu") -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    import torch

    info: dict[str, Any] = {"cpu": cpu, "cores": os.cpu_count(), "platform": platform.platform(),
                            "python": platform.python_version(), "torch": torch.__version__}
    if device.startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(torch.device(device))
    if hasattr(os, "getloadavg"):
        info["load_average_at_start"] = [round(v, 2) for v in os.getloadavg()]
    return info


def _check_hba(schedule: str) -> None:
    from hba_augment import pretrained
    from hba_augment.policy import HBAPolicy

    try:
        HBAPolicy(schedule)
    except (ValueError, OSError) as e:
        raise SystemExit(f"policy_quality: error: cannot use HBA schedule {schedule!r}: {e} (shipped: "
                         f"{pretrained.available_policies() or 'none'}). Pass --hba NAME_OR_PATH, or leave hba "
                         "out of --policies.") from None


#: ``hba-augment train`` flags that change a run's speed (and rounding), not what it trains.
_SPEED_ONLY = ("--compile", "--cuda-graphs")
#: ``hba-augment train`` options whose value does not change what a run trains: machine-specific (data
#: location, output folder) or speed only (how often a checkpoint is written; how many torch threads share
#: the work, which like ``--compile`` changes only the order of floating-point sums).
_VALUE_FREE = ("--data-dir", "--out", "--checkpoint-every", "--threads")


def canonical_key(args: list[str]) -> list[str]:
    """``args`` (a run's ``hba-augment train`` arguments, or a saved key) without the options that do not
    define its result (``_VALUE_FREE`` with their values, ``_SPEED_ONLY``). Saved keys go through it too, so a
    record written before an option joined those lists still matches the same run."""
    key, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in _VALUE_FREE:
            skip = True
        elif arg not in _SPEED_ONLY:
            key.append(arg)
    return key


def _run_key(cmd: list[str]) -> list[str]:
    """What defines a run's result: its ``hba-augment train`` arguments (after the interpreter) as
    ``canonical_key`` keeps them, then its schedule file's content, so that a result committed on one machine
    is reused on another and a changed schedule is trained again."""
    key = canonical_key(cmd[3:])
    digest = _schedule_digest(cmd[cmd.index("--policy") + 1])
    return key if digest is None else [*key, f"{SCHEDULE_DIGEST}{digest}"]


def _reused(key: list[str], record: Path) -> dict[str, Any] | None:
    """The finished run of ``key`` saved in ``record`` as ``{"result", "wall_seconds", "reused"}``, or ``None``
    when there is no record or it holds another run (other settings or schedule content)."""
    if not record.exists():
        return None
    saved = json.loads(record.read_text(encoding="utf-8"))
    if not isinstance(saved.get("key"), list) or canonical_key(saved["key"]) != key:
        return None
    return {"result": saved["result"], "wall_seconds": saved["wall_seconds"], "reused": True}


class RunUnfinished(RuntimeError):
    """A run stopped at ``--timeout``; its checkpoint is kept."""


def _run_one(cmd: list[str], out: Path, record: Path, env: dict[str, str], label: str,
             timeout: float | None = None) -> dict[str, Any]:
    """Run one training (or reuse its result) and return ``{"result", "wall_seconds", "reused"}``.

    Raises ``RunUnfinished`` when the run is still going after ``timeout`` seconds (it is killed), and
    ``RuntimeError`` when it fails.

    ``record`` is the run's small result file, meant to be committed as soon as it exists: a later
    invocation, on this machine or a fresh one, reuses it instead of training again. ``out`` holds the
    run's checkpoint and log (not committed), so an interrupted run resumes on the same machine.
    """
    (run,) = _run_group([cmd], [out], [record], env, [label], timeout)
    if isinstance(run, Exception):
        raise run
    return run


def _run_group(cmds: list[list[str]], outs: list[Path], records: list[Path], env: dict[str, str],
               labels: list[str], timeout: float | None = None, fuse: bool = False) -> list[dict[str, Any] | Exception]:
    """Run seeds of one policy side by side in one ``hba-augment train`` process (or reuse their results);
    per run, what :func:`_run_one` returns or the exception it raises.

    ``cmds`` differ only in ``--seed`` and ``--out``; the process gets the runs still to train joined
    (``--seed a,b``, ``--out`` with ``{seed}``). Each run's key and record are those of its own command, so a
    record does not depend on how its run was grouped. One log, in the first such run's folder. ``fuse``: the
    runs train as one fused network where :func:`hba_augment.train.fused.fusable` allows it.
    """
    results: list[dict[str, Any] | Exception | None] = [_reused(_run_key(cmd), record) for cmd, record
                                                        in zip(cmds, records, strict=True)]
    todo = [i for i, r in enumerate(results) if r is None]
    if not todo:
        return results
    cmd = list(cmds[todo[0]])
    if len(todo) > 1:
        seeds = [cmds[i][cmds[i].index("--seed") + 1] for i in todo]
        first = outs[todo[0]]  # <runs>/<policy>-seed<N> (_jobs)
        cmd[cmd.index("--seed") + 1] = ",".join(seeds)
        cmd[cmd.index("--out") + 1] = str(first.parent / (first.name.removesuffix(seeds[0]) + "{seed}"))
        if fuse:
            from hba_augment.train.fused import fusable

            if fusable(cmd[cmd.index("--model") + 1], cmd[cmd.index("--policy") + 1]) is None:
                cmd.append("--fuse")
    for i in todo:
        outs[i].mkdir(parents=True, exist_ok=True)
    # The code the runs start from, read now: later commits in the same invocation do not change it. Only the
    # package counts as modified; result files and notes being edited alongside do not change a run.
    code = {"commit": git("rev-parse", "HEAD"),
            "package_modified": bool(git("status", "--porcelain", "--untracked-files=no", "--", "hba_augment"))}
    log_path = outs[todo[0]] / "log.txt"
    start, started = time.perf_counter(), time.time()
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"$ {shlex.join(cmd)}\n")
        log.flush()
        try:
            returncode: int | None = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO,
                                                    timeout=timeout).returncode
        except subprocess.TimeoutExpired:  # subprocess.run has killed it
            returncode = None
    wall = time.perf_counter() - start
    for i in todo:
        result_file = outs[i] / "result.json"
        # A run that failed leaves no result of this process (an older file may be another run's). A run
        # that finished counts even when a run beside it failed.
        if result_file.exists() and result_file.stat().st_mtime >= started:
            result = json.loads(result_file.read_text(encoding="utf-8"))
            _write_record(records[i], _run_key(cmds[i]), wall, code, result)
            results[i] = {"result": result, "wall_seconds": wall, "reused": False}
        elif returncode is None:
            results[i] = RunUnfinished(f"{labels[i]} stopped after {timeout:.0f} s, unfinished; its checkpoint "
                                       f"is in {outs[i]}")
        else:
            tail = log_path.read_text(encoding="utf-8").splitlines()[-5:]
            results[i] = RuntimeError(f"{labels[i]} failed (exit {returncode}); see {log_path}:\n" + "\n".join(tail))
    return results


def _write_record(record: Path, key: list[str], wall: float, code: dict[str, Any], result: dict[str, Any]) -> None:
    """Save a finished run's record atomically (see :func:`_run_one`)."""
    record.parent.mkdir(parents=True, exist_ok=True)
    # Resumed runs count only this invocation's wall time; the trainer's own wall_seconds covers all.
    text = json.dumps({"key": key, "wall_seconds": wall, "code": code, "result": result}, indent=1) + "\n"
    tmp = record.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, record)


def _fmt(values: list[float], digits: int = 2) -> str:
    if not values:
        return "-"
    mean = statistics.fmean(values)
    if len(values) == 1:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def _jobs(args: argparse.Namespace, runs_dir: Path) -> list[tuple[str, str, int, Path, list[str]]]:
    """``(policy item, policy argument, seed, run folder, hba-augment train command)`` of every run, in
    table order."""
    jobs = []
    for policy in args.policies:
        for seed in args.seeds:
            pol = _policy_arg(policy, args.hba)
            run_out = runs_dir / f"{_slug(_label(policy, args.hba))}-seed{seed}"
            cmd = [sys.executable, "-m", "hba_augment", "train", "--dataset", args.dataset, "--data-dir",
                   str(args.data_dir), "--preset", args.preset, "--model", args.model, "--policy", pol,
                   "--epochs", str(args.epochs), "--train-size", str(args.train_size), "--subset-seed",
                   str(args.subset_seed), "--seed", str(seed), "--device", args.device, "--threads",
                   str(args.threads), "--eval-every", "0", "--no-progress", "--resume", "--out", str(run_out)]
            if args.test_size:
                cmd += ["--test-size", str(args.test_size)]
            if args.num_workers is not None:
                cmd += ["--num-workers", str(args.num_workers)]
            cmd += shlex.split(args.extra)
            jobs.append((policy, pol, seed, run_out, cmd))
    return jobs


def _start_rank(job: tuple[str, str, int, Path, list[str]], jobs: list[tuple[str, str, int, Path, list[str]]],
                args: argparse.Namespace) -> tuple[int, int]:
    """Where the process that trains ``job`` (its group's first run) starts among the others, by ``--order``
    (the pool starts processes in that order as workers come free)."""
    index = jobs.index(job)
    if args.order == "seeds":
        return args.seeds.index(job[2]), index
    return index, 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    argv = sys.argv[1:] if argv is None else argv
    out = Path(args.out).resolve()
    runs_dir = out / "runs"
    records_dir = out / "results"
    for item in args.policies:
        if _base_policy(item) == "hba":
            _check_hba(_policy_arg(item, args.hba)[4:])
    started = datetime.datetime.now(datetime.timezone.utc)
    commit = git("rev-parse", "HEAD")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    machine = _machine(args.device)

    jobs = _jobs(args, runs_dir)

    results: dict[tuple[str, int], dict[str, Any]] = {}
    if args.report_only:
        for policy, _, seed, run_out, cmd in jobs:
            run = _reused(_run_key(cmd), records_dir / f"{run_out.name}.json")
            if run is not None:
                results[(policy, seed)] = {**run, "command": shlex.join(cmd)}
        print(f"policy_quality --report-only: {len(results)} of {len(jobs)} runs done", flush=True)
        if not results:
            raise SystemExit(f"no finished run of these settings in {records_dir}")
        return _report(args, argv, results, runs_dir, out, commit, dirty, started, machine, None)

    env = dict(os.environ)
    # As .ci/run: glibc returns freed blocks to the OS eagerly, which slows the augmentation kernels.
    env.setdefault("MALLOC_MMAP_THRESHOLD_", "1000000000")
    env.setdefault("MALLOC_TRIM_THRESHOLD_", "1000000000")
    print(f"policy_quality: {len(jobs)} runs ({len(args.policies)} policies x {len(args.seeds)} seeds), "
          f"{args.jobs} at a time; runs in {runs_dir}", flush=True)
    bench_start = time.perf_counter()
    deadline = None if args.timeout is None else bench_start + args.timeout
    done, failed = 0, 0
    # Up to --lanes seeds of one policy per process, the runs still to train grouped (finished ones are reused).
    groups, finished = [], []
    for policy in args.policies:
        own = [job for job in jobs if job[0] == policy]
        pending = [job for job in own if _reused(_run_key(job[4]), records_dir / f"{job[3].name}.json") is None]
        reused = [job for job in own if job not in pending]
        finished += reused
        groups += [[job] for job in reused]
        groups += [pending[i:i + args.lanes] for i in range(0, len(pending), args.lanes)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        # Each process gets what is left of --timeout when it starts, so that the whole invocation ends by then.
        def group_of(group: list[tuple[str, str, int, Path, list[str]]]) -> list[dict[str, Any] | Exception]:
            labels = [f"{pol} seed {seed}" for _, pol, seed, _, _ in group]
            left = None if deadline is None else deadline - time.perf_counter()
            # A finished run's record costs no time, so --timeout never keeps it out of the table.
            if left is not None and left <= max(args.min_run_seconds, 0.0) and group[0] not in finished:
                return [RunUnfinished(f"{label} not started: {max(left, 0):.0f} s of --timeout left") for label in labels]
            return _run_group([job[4] for job in group], [job[3] for job in group],
                              [records_dir / f"{job[3].name}.json" for job in group], env, labels, left, args.fuse)

        ordered = sorted(groups, key=lambda g: _start_rank(g[0], jobs, args))
        futures = {pool.submit(group_of, group): group for group in ordered}
        for future in concurrent.futures.as_completed(futures):
            for (policy, pol, seed, _, cmd), run in zip(futures[future], future.result(), strict=True):
                if isinstance(run, RunUnfinished):
                    print(f"[-/{len(jobs)}] {run}", flush=True)
                    continue
                if isinstance(run, Exception):
                    if not args.keep_going:
                        raise run
                    failed += 1
                    print(f"[-/{len(jobs)}] {run}", flush=True)
                    continue
                run["command"] = shlex.join(cmd)
                results[(policy, seed)] = run
                done += 1
                r = run["result"]
                how = f"{run['wall_seconds']:.0f} s" if run["wall_seconds"] is not None else "?"
                how += " (reused)" if run["reused"] else ""
                print(f"[{done}/{len(jobs)}] {pol} seed {seed}: test error {r['test_error']:.2f}% "
                      f"(loss {r['test_loss']:.4f}), {how}", flush=True)
    if not results:
        print("policy_quality: no run finished", flush=True)
        return 1
    status = _report(args, argv, results, runs_dir, out, commit, dirty, started, machine,
                     time.perf_counter() - bench_start)
    return 1 if failed else status


def _report(args: argparse.Namespace, argv: list[str], results: dict[tuple[str, int], dict[str, Any]],
            runs_dir: Path, out: Path, commit: str | None, dirty: bool, started: datetime.datetime,
            machine: dict[str, Any], total_wall: float | None) -> int:
    """Write ``policy_quality.md`` / ``.json`` from ``results`` (``(policy, seed) -> run``); a run missing
    from it (``--report-only``: not done yet) is left out of its row's mean and marked in the table."""
    rows = []
    for policy in args.policies:
        seeds = [s for s in args.seeds if (policy, s) in results]
        runs = [results[(policy, s)] for s in seeds]
        errors = [r["result"]["test_error"] for r in runs]
        losses = [r["result"]["test_loss"] for r in runs]
        walls = [r["wall_seconds"] for r in runs if r["wall_seconds"] is not None]
        train_walls = [r["result"]["wall_seconds"] for r in runs]
        rows.append({
            "policy": _label(policy, args.hba),
            "policy_arg": _policy_arg(policy, args.hba),
            "seeds": seeds,
            "test_error_mean": statistics.fmean(errors) if errors else None,
            "test_error_std": statistics.stdev(errors) if len(errors) > 1 else None,
            "test_errors": errors,
            "test_loss_mean": statistics.fmean(losses) if losses else None,
            "run_wall_seconds": walls,
            "train_wall_seconds": train_walls,
            "runs": [{"seed": s, "command": r["command"], "test_error": r["result"]["test_error"],
                      "test_loss": r["result"]["test_loss"], "wall_seconds": r["wall_seconds"],
                      "reused": r["reused"], "out": str(runs_dir / f"{_slug(_label(policy, args.hba))}-seed{s}")}
                     for s, r in zip(seeds, runs, strict=True)],
        })
    first = (results.get((args.policies[0], args.seeds[0])) or next(iter(results.values())))["result"]
    cfg = first["config"]
    command = shlex.join(["python", "benchmarks/policy_quality.py", *argv])
    report = {
        "command": command,
        "git_commit": commit,
        "git_dirty": dirty,
        "date": started.isoformat(timespec="seconds"),
        "machine": machine,
        "package_version": cfg.get("package_version"),
        "torchvision": cfg.get("torchvision_version"),
        "data": {"name": args.data_name, "dataset": args.dataset, "data_dir": str(args.data_dir),
                 "train_images": first["train_images"], "test_images": first["test_images"],
                 "eval_split": first.get("eval_split", "test"),
                 "subset_seed": args.subset_seed},
        "settings": {"model": args.model, "epochs": args.epochs, "batch_size": cfg["batch_size"], "lr": cfg["lr"],
                     "lr_schedule": cfg["lr_schedule"], "wd": cfg["wd"], "preset": args.preset, "seeds": args.seeds,
                     "threads": args.threads, "jobs": args.jobs, "device": args.device, "extra": args.extra,
                     "hba_schedule": args.hba if "hba" in args.policies else None},
        "total_wall_seconds": total_wall,
        "runs_done": len(results),
        "runs_planned": len(args.policies) * len(args.seeds),
        "rows": rows,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "policy_quality.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (out / "policy_quality.md").write_text(_markdown(report), encoding="utf-8")
    print(_markdown(report))
    print(f"wrote {out / 'policy_quality.md'} and {out / 'policy_quality.json'}")
    return 0


def _markdown(report: dict[str, Any]) -> str:
    s, d, m = report["settings"], report["data"], report["machine"]
    commit = (report["git_commit"] or "unknown") + (" (with uncommitted changes)" if report["git_dirty"] else "")
    reused = any(run["reused"] for row in report["rows"] for run in row["runs"])
    # hba-augment train --eval-split val: the "test" images are held-out images of the train split.
    val = d.get("eval_split") == "val"
    what, where = ("validation", "held-out validation images of the train split") if val else ("test", "test images")
    lines = [
        f"# Policy quality: {what} error of one network trained with each augmentation policy",
        "",
        f"- Command: `{report['command']}`",
        f"- Git commit: {commit}; hba-augment {report['package_version']}",
        f"- Machine: {m['cpu']}, {m['cores']} cores ({m['platform']}); load average at start "
        f"{m.get('load_average_at_start')}" + (f"; GPU: {m['gpu']}" if m.get("gpu") else ""),
        f"- torch {m['torch']}, torchvision {report['torchvision']}, Python {m['python']}",
        f"- Date: {report['date']}",
        f"- Data: {d['name']} ({d['data_dir']}): {d['train_images']:,}-image class-balanced training subset "
        f"(subset seed {d['subset_seed']}), {d['test_images']:,} {where}",
        f"- Training: {s['model']}, {s['epochs']} epochs, batch {s['batch_size']}, SGD (Nesterov 0.9) lr {s['lr']:g} "
        f"{s['lr_schedule']}, wd {s['wd']:g} ({s['preset']} preset); device {s['device']}, {s['threads']} torch "
        f"thread(s) per run, {s['jobs']} run(s) at a time" + (f"; extra options `{s['extra']}`" if s["extra"] else ""),
        f"- Seeds: {', '.join(map(str, s['seeds']))}; {what} error is the last epoch's, mean ± sample std over seeds",
        (f"- Total wall time: {report['total_wall_seconds'] / 60:.1f} min"
         + (" (some runs were reused from an earlier invocation; their wall times are from it)" if reused else "")
         if report["total_wall_seconds"] is not None else
         f"- Report only (`--report-only`): built from the finished runs' records, {report['runs_done']} of "
         f"{report['runs_planned']} runs done; a run not done yet is marked `-` and left out of its row's mean"),
        "",
        f"| Policy | {what.capitalize()} error (%) | Per seed (%) | {what.capitalize()} loss | Training wall time "
        "per run (s), mean |",
        "|---|---|---|---|---|",
    ]
    for row in report["rows"]:
        by_seed = dict(zip(row["seeds"], row["test_errors"], strict=True))
        per_seed = ", ".join(f"{by_seed[seed]:.2f}" if seed in by_seed else "-" for seed in s["seeds"])
        # The trainer's own wall time sums every session of a resumed run; run_wall_seconds counts only
        # the last invocation, which understates a run that was interrupted.
        walls = row["train_wall_seconds"]
        wall = f"{statistics.fmean(walls):.0f}" if walls else "-"
        loss = f"{row['test_loss_mean']:.4f}" if row["test_loss_mean"] is not None else "-"
        lines.append(f"| {row['policy']} | {_fmt(row['test_errors'])} | {per_seed} | {loss} | {wall} |")
    labelled = [f"{row['policy']} = `{row['policy_arg']}`" for row in report["rows"]
                if row.get("policy_arg", row["policy"]) != row["policy"]]
    if labelled:
        lines += ["", "Rows named by label: " + "; ".join(labelled) + "."]
    lines += ["", "Policies (see `hba-augment train --help`): none = standardisation only; baseline = the preset's "
              "flip + pad-4 crop; cutout = baseline + Cutout (16x16 in the CIFAR presets); autoaugment / "
              "randaugment / trivialaugment = torchvision's v2 transforms per image (the preset's AutoAugment "
              "policy; 2 ops at magnitude 9; Wide), then baseline + Cutout; hba:<schedule> = HBAPolicy stretched "
              "to the run's epochs, then baseline + Cutout.", "", f"Default scale: {DEFAULTS_NOTE}", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
