"""Searches and the trainings that judge them, side by side on one GPU, within one device call.

A *campaign* is a plan file (``benchmarks/campaigns/<name>.json``) naming searches (``hba-augment search``
options on top of common ones) and evaluations (policies x seeds, per split), all at one protocol. One
invocation runs whatever of it is not done yet, as much as fits in ``--budget`` seconds:

1. every search without a ``schedule.json`` starts at once (``hba-augment search``, each its own process), or
   only those named by ``--search``, or none with ``--no-search`` (a short call that should only train);
2. the evaluations whose schedules exist start beside them, through ``benchmarks/policy_quality.py`` (one
   invocation per split, so its records, reuse and tables are the benchmark's own), as many at a time as
   ``--max-procs`` leaves slots for and as can still finish: a training slows as more processes share the
   GPU, and the plan's ``train.wall_seconds`` (``{"<processes at once>": <seconds one training took>}``,
   measured) says by how much;
3. when a search finishes with enough time left for its runs, its own evaluations start;
4. at the deadline everything still running is stopped (unfinished runs simply count as not done), each
   split's table is rebuilt from all finished records (``policy_quality.py --report-only``), and the
   campaign's new files are packed into one ``.tar.gz`` (``--pack``) for the device to send back.

Everything lands in ``benchmarks/results/<campaign>/`` (tracked): ``searches/<name>/`` (schedule, metrics,
log), ``schedules/`` (the controls: ``start-<search>.json``, each search's starting policy held; ``pba.json``),
``<split>/results/*.json`` (one record per finished run, reused by later invocations) and
``<split>/policy_quality.md``. Commit them after each call; the next call (the repository travels) skips what is done.

Each entry of ``evals`` is a folder of records, named ``val`` or ``test`` after the split its runs are
tested on, or named freely with that split as its ``eval_split`` (e.g. more seeds of a few policies on the
test split, kept apart from the main table; ``benchmarks/paired.py`` reads several tables at once). Entries
start in the plan's order, or only those named by ``--evals``, in its order.

Policies in a plan: torchvision's (``trivialaugment``, ``autoaugment``, ``randaugment``), the training
baselines (``none``, ``baseline``, ``cutout``), ``pba`` (PBA's published schedule), ``pba-last`` (its last
policy held for every epoch: PBA without its curriculum), ``start:<search>`` (that
search's starting policy held for every epoch: the control it must beat), ``null:<search>`` (for a
population search: the schedule the same search writes when its scores are noise, ``benchmarks/pbt_null.py``:
did its selection learn, or did its explore step alone move the schedule?), ``twin:<search>`` (for a
population search: its twin null, the same search's own explore draws with noise for its scores, written when
the search ends: what did its selection add to its own walk?), ``matched-twin:<search>`` (of the twin
nulls ``TWIN_KINDS`` says, 2,000, the one that augments most like the search at every epoch: did selection choose which ops, or only how
much?), ``hba:<search>`` (its learned schedule) and ``hba:<shipped name or path>``.

On the lent GPU (``../shared/reference/GPU.md``; the data travels in an ignored folder named in ``carry``)::

    python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . && \\
    PYTHONUNBUFFERED=1 python3 benchmarks/gpu_campaign.py benchmarks/campaigns/paper_scale_cifar10.json \\
        --data-root .device/data --device cuda --budget 540 --pack $OUT/campaign.tgz

and here, after the call: ``tar xzf <files_at>/campaign.tgz`` in the repository root, then commit. Before it,
here, ``--dry-run`` prints what those options would start at once (processes, lanes, a training's time
against the budget), starting nothing.

A plan's search can also run on a CPU, into the plan's folder, so that a device call finds it done:
``--device cpu --search NAME --no-evals --population-procs 0 --budget SECONDS`` (how
``benchmarks/campaigns/cpu_paper_scale.sh`` runs one across sessions). A population search checkpoints every
round, so one stopped at the budget resumes at its last round in the next call from the same checkout; commit
its folder only once it holds ``schedule.json`` (its checkpoint and member files are ignored, so a partial folder
would travel without them).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shlex
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from policy_quality import _slug  # the record names are the benchmark's own

from hba_augment._cli_common import nonneg_int  # the search's own check of --population-procs

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
TORCHVISION_POLICIES = ("none", "baseline", "cutout", "autoaugment", "randaugment", "trivialaugment")
#: PBA's published schedule and its last policy held (written into ``schedules/`` by ``--prepare``).
PBA_CONTROLS = ("pba", "pba-last")
#: Controls of a population search written when it ends (``benchmarks/pbt_null.py``): the kind, and how many
#: twin nulls the amount-matched twin is chosen from (``None``: the plain twin of noise seed 0).
TWIN_KINDS = {"twin": None, "matched-twin": 2000}
#: Seconds a call must have left to write them: 2,000 twins of a 200-epoch search took 24 s on a quiet
#: 2-core CPU (2026-11-28). A call with less leaves them to the next one, so that a search's own call
#: never runs past its end (and loses the search) choosing its controls.
TWIN_SECONDS = 40.0
#: Controls of a search, by kind: a population search also has a null and twins.
_POPULATION_CONTROLS = ("null", *TWIN_KINDS)
_SEARCH_CONTROLS = ("start", *_POPULATION_CONTROLS)
_PLAN_KEYS = {"name", "description", "data", "dataset", "search_args", "train", "searches", "evals"}
_TRAIN_KEYS = {"model", "epochs", "train_size", "preset", "extra", "wall_seconds"}
_SPLIT_KEYS = {"seeds", "policies", "test_size", "eval_split"}


def _is_population(options: str) -> bool:
    """Whether a search's options (a plan's ``searches`` value) select ``--objective population``."""
    tokens = shlex.split(options)
    return "--objective=population" in tokens or any(
        a == "--objective" and b == "population" for a, b in itertools.pairwise(tokens))


def check_wall_seconds(walls: Any) -> dict[str, float]:
    """A ``wall_seconds`` table (``{"<processes at once>": <seconds one training then takes>}``), checked."""
    if not isinstance(walls, dict) or not all(
            str(k).isdigit() and int(k) > 0 and isinstance(v, int | float) and v > 0 for k, v in walls.items()):
        raise ValueError(f"wall_seconds maps processes at once (a positive integer) to the seconds one training "
                         f"then takes, got {walls!r}")
    return walls


def _wall_seconds(text: str) -> dict[str, float]:
    try:
        return check_wall_seconds(json.loads(text))
    except (json.JSONDecodeError, ValueError) as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def load_plan(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and check a plan file; ``ValueError`` naming the first problem."""
    plan = json.loads(Path(path).read_text(encoding="utf-8"))
    unknown = set(plan) - _PLAN_KEYS
    missing = {"name", "data", "searches", "evals", "train"} - set(plan)
    if unknown or missing:
        raise ValueError(f"plan {path}: unknown keys {sorted(unknown)}, missing keys {sorted(missing)}")
    if not set(plan["train"]) <= _TRAIN_KEYS:
        raise ValueError(f"plan {path}: train takes {sorted(_TRAIN_KEYS)}, got {sorted(plan['train'])}")
    try:
        check_wall_seconds(plan["train"].get("wall_seconds", {}))
    except ValueError as e:
        raise ValueError(f"plan {path}: train.{e}") from None
    for split, spec in plan["evals"].items():
        if (spec.get("eval_split", split) not in ("val", "test") or not set(spec) <= _SPLIT_KEYS
                or not spec.get("policies")):
            raise ValueError(f"plan {path}: evals.{split} must be 'val' or 'test', or name one as its eval_split, "
                             f"with keys {sorted(_SPLIT_KEYS)} and a non-empty policies list")
        for policy in spec["policies"]:
            kind, _, name = policy.partition(":")
            if kind in _SEARCH_CONTROLS and name not in plan["searches"]:
                raise ValueError(f"plan {path}: {policy!r} names no search of the plan ({sorted(plan['searches'])})")
            if kind in _POPULATION_CONTROLS and not _is_population(plan["searches"][name]):
                raise ValueError(f"plan {path}: {policy!r} needs a search with --objective population")
            if not (policy in (*TORCHVISION_POLICIES, *PBA_CONTROLS) or kind in (*_SEARCH_CONTROLS, "hba")):
                raise ValueError(f"plan {path}: unknown policy {policy!r}")
    return plan


class Campaign:
    """The files and processes of one campaign (see the module docstring)."""

    def __init__(self, plan: dict[str, Any], args: argparse.Namespace) -> None:
        self.plan, self.args = plan, args
        self.root = Path(args.out).resolve() if args.out else RESULTS / plan["name"]
        self.data = Path(args.data_root) / plan["data"]
        self.start = time.monotonic()
        # (label, process, its log file, the runs it may have going at once)
        self.procs: list[tuple[str, subprocess.Popen[bytes], Any, int]] = []
        self.planned: list[tuple[str, int]] = []  # what --dry-run would have started

    # -- paths and policies -------------------------------------------------------------------------
    def search_dir(self, name: str) -> Path:
        return self.root / "searches" / name

    def schedule_of(self, policy: str) -> tuple[str, Path | None]:
        """``(label, schedule file or None)`` of a plan policy; ``None`` for torchvision's policies."""
        kind, _, name = policy.partition(":")
        if policy in PBA_CONTROLS:
            return policy, self.root / "schedules" / f"{policy}.json"
        if kind in ("start", "null"):
            return f"{kind}-{name}", self.root / "schedules" / f"{kind}-{name}.json"
        if kind in TWIN_KINDS:  # named as pbt_null.py names them (noise seed 0), as the plan's older twins are
            return f"{kind}-{name}-0", self.root / "schedules" / f"{kind}-{name}-0.json"
        if kind == "hba" and name in self.plan["searches"]:
            return name, self.search_dir(name) / "schedule.json"
        return policy, None

    def policy_item(self, policy: str) -> str:
        """The ``policy_quality.py --policies`` item of a plan policy."""
        label, path = self.schedule_of(policy)
        if path is None:
            return policy
        return f"{label}=hba:{os.path.relpath(path, REPO)}"

    def ready(self, policy: str) -> bool:
        _, path = self.schedule_of(policy)
        return path is None or path.exists()

    def runs_left(self, split: str, policies: list[str]) -> int:
        """Runs of ``policies`` on ``split`` without a record yet: the slots worth giving them (a record made
        under other settings still counts as done here; ``policy_quality.py`` decides reuse exactly)."""
        records = self.root / split / "results"
        return sum(not (records / f"{_slug(self.schedule_of(p)[0])}-seed{seed}.json").exists()
                   for p in policies for seed in self.plan["evals"][split]["seeds"])

    def left(self) -> float:
        return self.args.budget - (time.monotonic() - self.start)

    def run_seconds(self, at_once: int) -> float:
        """Seconds one training needs while ``at_once`` device processes run (searches' workers included), from
        ``--wall-seconds``, else the plan's measured ``train.wall_seconds`` (linear between its counts; beyond
        the largest, in proportion to the count; below the smallest, the smallest's), at least
        ``--min-eval-seconds``. Runs on one GPU are bound by kernel launches on the host, so each one slows as
        more share it: on 2026-11-27 eight trainings started with 315 s left on an H100 and none finished,
        where four beside a 4-process search had taken 281-284 s."""
        walls = self.args.wall_seconds or self.plan["train"].get("wall_seconds", {})
        table = sorted((int(k), float(v)) for k, v in walls.items())
        if not table:
            return self.args.min_eval_seconds
        counts, seconds = zip(*table, strict=True)
        if at_once > counts[-1]:
            estimate = seconds[-1] * at_once / counts[-1]
        else:
            estimate = float(np.interp(at_once, counts, seconds))
        return max(self.args.min_eval_seconds, estimate)

    # -- controls -----------------------------------------------------------------------------------
    def write_controls(self) -> None:
        """``schedules/start-<search>.json`` for every search, ``null-<search>.json`` for every population
        search but one with ``--amount profile`` (whose null is its twin), ``pba.json`` and ``pba-last.json``
        (each if missing)."""
        from control_schedules import PBA_LOG, last_entry_schedule, pba_schedule
        from pbt_null import null_schedule

        from hba_augment.search.cli import config_from_args, population_config_from_args
        from hba_augment.search.priors import start_schedule

        folder = self.root / "schedules"
        folder.mkdir(parents=True, exist_ok=True)
        for name, options in self.plan["searches"].items():
            # The search's own settings decide its controls: parse its command line as it will run.
            args = self.search_args(name, options)
            cfg = config_from_args(args, "cpu")
            path = folder / f"start-{name}.json"
            if not path.exists():
                start_schedule(cfg.init, cfg.count_probs).save(path)
            path = folder / f"null-{name}.json"
            # An --amount profile search's hold moves from round to round: its null is its twin (twin:).
            if args.objective == "population" and args.amount != "profile" and not path.exists():
                pop = population_config_from_args(args, "cpu", cfg)
                null_schedule(cfg.init, cfg.seed, population=pop.population, epochs=cfg.epochs, every=pop.every,
                              resample_prob=pop.resample_prob, max_shift=pop.max_shift,
                              count_probs=cfg.count_probs, member_start=pop.member_start,
                              amount=pop.amount, resample=pop.resample, vary=pop.vary).save(path)
        if not all((folder / f"{name}.json").exists() for name in PBA_CONTROLS):

            pba = pba_schedule(PBA_LOG, 200)
            for name, schedule in (("pba", pba), ("pba-last", last_entry_schedule(pba))):
                if not (folder / f"{name}.json").exists():
                    schedule.save(folder / f"{name}.json")

    def write_twins(self, policies: list[str]) -> None:
        """The ``twin:`` and ``matched-twin:`` schedules among ``policies`` whose search has ended (its
        ``schedule.json`` exists) and that are not written yet: numpy only, seconds."""
        from pbt_null import matched_twin_schedule, twin_null_schedule

        for policy in policies:
            kind, _, name = policy.partition(":")
            if kind not in TWIN_KINDS:
                continue
            _, path = self.schedule_of(policy)
            if path.exists() or not (self.search_dir(name) / "schedule.json").exists():
                continue
            candidates = TWIN_KINDS[kind]
            twin = (twin_null_schedule(self.search_dir(name), 0) if candidates is None
                    else matched_twin_schedule(self.search_dir(name), 0, candidates))
            path.parent.mkdir(parents=True, exist_ok=True)
            twin.save(path)
            print(f"[{time.monotonic() - self.start:5.0f} s] wrote {os.path.relpath(path, REPO)}", flush=True)

    # -- processes ----------------------------------------------------------------------------------
    def search_argv(self, name: str, options: str) -> list[str]:
        # --population-procs last, so that it overrides the plan's: it changes where members train, not what
        # the search computes (resume-free in population.py), so the search keeps its name and folder.
        procs = [] if self.args.population_procs is None else ["--population-procs", str(self.args.population_procs)]
        return ["--dataset", self.plan.get("dataset", "imagefolder"), "--data-dir", str(self.data),
                *self.plan.get("search_args", []), *shlex.split(options), "--out", str(self.search_dir(name)),
                "--name", name, *procs]

    def search_args(self, name: str, options: str) -> argparse.Namespace:
        """A search's command line as ``hba-augment search`` parses it."""
        from hba_augment.search.cli import build_parser

        return build_parser().parse_args(self.search_argv(name, options))

    def search_slots(self, name: str, options: str) -> int:
        """The processes a search keeps busy on the device: a population search's workers (its config's
        ``procs``; 0, every member in one process, counts 1), else 1. Counted against ``--max-procs``, so
        that ``--max-procs`` at a population's size runs the search alone, then gives its slots to its own
        evaluations as it ends."""
        from hba_augment.search.cli import population_config_from_args

        args = self.search_args(name, options)
        if args.objective != "population":
            return 1
        return max(1, population_config_from_args(args, "cpu").procs)

    def launch(self, label: str, cmd: list[str], log: Path, slots: int = 1) -> None:
        if self.args.dry_run:  # counted as running, started never
            self.planned.append((label, slots))
            return
        log.parent.mkdir(parents=True, exist_ok=True)
        handle = open(log, "a", encoding="utf-8")  # closed in stop_all, once the process has ended
        handle.write(f"$ {shlex.join(cmd)}\n")
        handle.flush()
        proc = subprocess.Popen(cmd, stdout=handle, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)
        self.procs.append((label, proc, handle, slots))
        print(f"[{time.monotonic() - self.start:5.0f} s] started {label}", flush=True)

    def start_searches(self) -> list[str]:
        started = []
        if self.args.no_search:
            return started
        for name, options in self.plan["searches"].items():
            if (self.search_dir(name) / "schedule.json").exists() or (self.args.search and name not in self.args.search):
                continue
            cmd = [sys.executable, "-m", "hba_augment", "search", *self.search_argv(name, options),
                   "--device", self.args.device, "--resume", "--no-progress", "--no-plot"]
            self.launch(f"search {name}", cmd, self.search_dir(name) / "log.txt", self.search_slots(name, options))
            started.append(name)
        return started

    def policy_quality(self, split: str, policies: list[str], *options: str) -> list[str]:
        """The ``policy_quality.py`` command of ``policies`` on ``split``: the plan's protocol, then ``options``."""
        spec, train = self.plan["evals"][split], self.plan["train"]
        # No checkpoint but the last: a call's run folders never come back to resume from (speed only: the
        # records keep their keys, policy_quality._run_key).
        extra = (train.get("extra", "") + (" --eval-split val" if spec.get("eval_split", split) == "val" else "")
                 + (" --cuda-graphs" if self.args.cuda_graphs else "") + " --checkpoint-every 0")
        cmd = [sys.executable, str(REPO / "benchmarks" / "policy_quality.py"), *options, "--dataset",
               self.plan.get("dataset", "imagefolder"), "--data-dir", str(self.data), "--preset",
               train.get("preset", "cifar10"), "--model", train["model"], "--epochs", str(train["epochs"]),
               "--train-size", str(train["train_size"]), "--seeds", ",".join(map(str, spec["seeds"])),
               "--policies", ",".join(self.policy_item(p) for p in policies), "--device", self.args.device,
               "--threads", str(self.args.threads), "--lanes", str(self.args.lanes), "--extra", extra.strip(),
               "--out", str(self.root / split), *(["--fuse"] if self.args.fuse else [])]
        return cmd + (["--test-size", str(spec["test_size"])] if spec.get("test_size") else [])

    def start_evals(self, split: str, policies: list[str], jobs: int, min_seconds: float) -> None:
        """One ``policy_quality.py`` process for ``policies`` on ``split``, ``jobs`` runs at a time, none started
        with less than ``min_seconds`` of the budget left."""
        cmd = self.policy_quality(split, policies, "--jobs", str(max(1, jobs)), "--timeout",
                                  str(max(1.0, self.left() - self.args.margin)), "--keep-going",
                                  "--min-run-seconds", str(min_seconds))
        # The process gets every ready policy (policy_quality.py reuses the finished runs' records); the
        # label names only those with runs left, which is what the log and --dry-run should say.
        todo = [p for p in policies if self.runs_left(split, [p])]
        self.launch(f"{split}: {', '.join(todo)}", cmd, self.root / split / "log.txt", max(1, jobs))

    def running(self) -> int:
        """Runs (searches and trainings) that may be going now."""
        return (sum(slots for _, proc, _, slots in self.procs if proc.poll() is None)
                + sum(slots for _, slots in self.planned))

    def stop_all(self) -> None:
        for label, proc, _, _ in self.procs:
            if proc.poll() is None:
                print(f"stopping {label} (budget reached)", flush=True)
                os.killpg(proc.pid, 15)
        for _, proc, handle, _ in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()
            handle.close()

    # -- the whole call -----------------------------------------------------------------------------
    def pending(self) -> dict[str, list[str]]:
        """The policies of each ``evals`` entry this call may run, entry by entry in the order they are
        started: the plan's, or ``--evals``' (only those entries)."""
        if self.args.no_evals:
            return {}
        names = self.args.evals or list(self.plan["evals"])
        return {split: list(self.plan["evals"][split]["policies"]) for split in names}

    def twin_candidates(self, pending: dict[str, list[str]]) -> list[str]:
        """The policies whose twins this call writes once their search ends: those it may still run, or with
        ``--no-evals`` every policy of the plan (a search run alone, e.g. on a CPU, leaves its controls ready
        for the calls that train them)."""
        if self.args.no_evals:
            return [p for spec in self.plan["evals"].values() for p in spec["policies"]]
        return [p for policies in pending.values() for p in policies]

    def launch_ready(self, pending: dict[str, list[str]]) -> None:
        """Start, per split, the ``pending`` policies whose schedules exist, in plan order, and drop them from
        ``pending``: as many runs at a time as ``--max-procs`` leaves slots for *and* as can still finish in the
        budget at that many processes (``run_seconds``); a policy waits while none can."""
        for split, policies in pending.items():
            ready = [p for p in policies if self.ready(p)]
            busy = self.running()
            if not ready or busy >= self.args.max_procs:
                continue
            wanted = -(-self.runs_left(split, ready) // self.args.lanes)  # processes, each up to --lanes runs
            time_left = self.left() - self.args.margin
            jobs = max((j for j in range(1, min(self.args.max_procs - busy, wanted) + 1)
                        if self.run_seconds(busy + j) < time_left), default=0)
            if wanted and not jobs:
                continue
            if jobs:  # none left: no process (its table is rebuilt by report() anyway)
                self.start_evals(split, ready, jobs, self.run_seconds(busy + jobs))
            pending[split] = [p for p in policies if p not in ready]

    def dry_run(self) -> int:
        """Print what this call would start at once, starting nothing and writing nothing (``--dry-run``): check
        a call's options here before spending device time on them."""
        self.start_searches()
        pending = self.pending()
        self.launch_ready(pending)
        for label, slots in self.planned:
            lanes = "" if label.startswith("search ") else f" x {self.args.lanes} lane(s)"
            print(f"would start {label[:100]}{'...' if len(label) > 100 else ''} ({slots} process(es){lanes})")
        print(f"{self.running()} process(es) at once: a training {self.run_seconds(self.running()):.0f} s of the "
              f"{self.left() - self.args.margin:.0f} s left before the margin")
        for split, policies in pending.items():
            if policies:
                print(f"{split}: {len(policies)} policies wait (no schedule yet, no free process, or too little time)")
        return 0

    def run(self) -> int:
        self.write_controls()
        searches = self.start_searches()
        pending = self.pending()
        # A search that finishes starts its evaluations here; the loop ends when nothing runs or time is up.
        while (left := self.left()) > 0:
            if left >= TWIN_SECONDS:
                self.write_twins(self.twin_candidates(pending))
            self.launch_ready(pending)
            if not self.running():
                break
            time.sleep(2)
        if self.left() >= TWIN_SECONDS:  # a search that ended after the last pass's twins (with --no-evals: any)
            self.write_twins(self.twin_candidates(pending))
        self.stop_all()
        unfinished = [s for s in searches if not (self.search_dir(s) / "schedule.json").exists()]
        if unfinished:
            print(f"searches not finished: {', '.join(unfinished)} (see their log.txt)", flush=True)
        if not self.args.no_evals:  # nothing trained: the tables stand
            self.report()
        if self.args.pack:
            self.pack(Path(self.args.pack))
        return 0

    def report(self) -> None:
        """Each split's table from every finished record (``--report-only``), all splits at once: each is a
        process of its own that imports torch, and the end of a call has seconds to spare, not minutes."""
        procs = []
        for split, spec in self.plan["evals"].items():
            policies = [p for p in spec["policies"] if self.ready(p)]
            if policies:
                cmd = self.policy_quality(split, policies, "--report-only")
                procs.append(subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL))
        for proc in procs:
            proc.wait()

    def pack(self, dest: Path) -> None:
        """The campaign's files, checkpoints and run folders left out, as one archive of repository paths, the
        run records and tables first (``_pack_order``): an archive cut off by the call's end still holds
        them (gzip's stream reads back up to the cut, as on 2026-11-28)."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        files = [path for path in self.root.rglob("*") if path.is_file() and path.suffix != ".pt"
                 and "runs" not in path.relative_to(self.root).parts]
        with tarfile.open(dest, "w:gz") as tar:
            for path in sorted(files, key=lambda path: _pack_order(path.relative_to(self.root))):
                tar.add(path, arcname=str(path.relative_to(REPO)) if path.is_relative_to(REPO) else
                        str(path.relative_to(self.root)))
        print(f"packed {dest} ({dest.stat().st_size / 1e6:.1f} MB)", flush=True)


def _pack_order(rel: Path) -> tuple[int, str]:
    """Where a campaign file goes in the archive: run records, then the tables, then searches' results, then
    the rest (logs, the control schedules, which the repository already holds)."""
    if rel.parent.name == "results" and rel.suffix == ".json":
        rank = 0
    elif rel.name.startswith("policy_quality."):
        rank = 1
    elif rel.parts[0] == "searches" and rel.name != "log.txt":
        rank = 2
    else:
        rank = 3
    return rank, str(rel)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("plan", help="plan file, e.g. benchmarks/campaigns/paper_scale_cifar10.json")
    p.add_argument("--data-root", default=str(REPO.parent / "shared" / "data"), help="folder holding the plan's data")
    p.add_argument("--device", default="cuda", help="torch device of every process (default: cuda)")
    p.add_argument("--budget", type=float, default=540.0, help="seconds until everything stops (default: 540)")
    p.add_argument("--margin", type=float, default=60.0,
                   help="seconds kept free at the end for the tables and the archive (default: 60; on 2026-11-28 "
                   "20 were too few: the archive was cut off)")
    p.add_argument("--min-eval-seconds", type=float, default=240.0,
                   help="start an evaluation only with at least this much budget left, and more where the "
                   "plan's train.wall_seconds says a run at that many processes at once takes longer (default: 240)")
    p.add_argument("--max-procs", type=int, default=8,
                   help="processes at a time, searches included, a population search counting one per worker "
                   "(default: 8)")
    p.add_argument("--threads", type=int, default=2, help="torch threads per training (default: 2)")
    p.add_argument("--lanes", type=int, default=1,
                   help="trainings per process: up to this many seeds of a policy side by side in one process "
                   "(policy_quality.py --lanes; a process counts one against --max-procs; default: 1)")
    p.add_argument("--fuse", action="store_true",
                   help="with --lanes: a process's seeds train as one fused network where they can "
                   "(policy_quality.py --fuse; records keep their keys; default: off)")
    p.add_argument("--wall-seconds", type=_wall_seconds, metavar="JSON",
                   help="this call's table of how long one training takes at N processes at once, instead of the "
                   "plan's (e.g. measured just before for --lanes: benchmarks/pick_layout.py)")
    p.add_argument("--cuda-graphs", action="store_true",
                   help="train with --cuda-graphs (speed only: records keep their keys; default: off)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--search", action="append", metavar="NAME",
                       help="start only this search of the plan (repeatable; default: every search without a "
                       "schedule): a paper-scale population search needs the GPU to itself")
    which.add_argument("--no-search", action="store_true",
                       help="start no search, only the runs of schedules that exist: without it, a call too short "
                       "for a search still starts every unfinished one and they only burn its budget")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--evals", action="append", metavar="NAME",
                       help="run only this entry of the plan's evals (repeatable; the entries start in the order "
                       "given; default: every entry, in the plan's order): e.g. a new search's runs before older queues")
    which.add_argument("--no-evals", action="store_true",
                       help="train nothing, only search (e.g. a search on a CPU, whose trainings run elsewhere: "
                       "benchmarks/campaigns/cpu_paper_scale.sh); the twins of a search that ends are still written")
    p.add_argument("--population-procs", type=nonneg_int, metavar="P",
                   help="worker processes of each population search this call starts, in place of the plan's "
                   "(hba-augment search --population-procs; where members train, not what the search computes): "
                   "e.g. 0 on a 2-core CPU, every member in the search's process, one after another (default: the "
                   "plan's)")
    p.add_argument("--dry-run", action="store_true",
                   help="print what the call would start at once, start nothing, write nothing")
    p.add_argument("--out", help="campaign folder (default: benchmarks/results/<plan name>)")
    p.add_argument("--pack", help="write the campaign's files (no checkpoints) into this .tar.gz")
    p.add_argument("--prepare", action="store_true",
                   help="only write the control schedules (start-*.json, null-*.json, pba.json, pba-last.json) and stop: run it here before a "
                   "device call, since PBA's published schedule (../shared/reference) does not travel")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        plan = load_plan(args.plan)
    except (OSError, ValueError) as e:
        raise SystemExit(f"gpu_campaign: error: {e}") from None
    unknown = sorted(set(args.search or ()) - set(plan["searches"]))
    if unknown:
        raise SystemExit(f"gpu_campaign: error: --search {unknown[0]!r} is not a search of {args.plan} "
                         f"({', '.join(plan['searches'])})")
    unknown = sorted(set(args.evals or ()) - set(plan["evals"]))
    if unknown:
        raise SystemExit(f"gpu_campaign: error: --evals {unknown[0]!r} is not an entry of {args.plan}'s evals "
                         f"({', '.join(plan['evals'])})")
    if args.lanes > 1 and not args.wall_seconds and not args.prepare:
        # The plan's table was measured with one training per process; read for several, it promised 24
        # trainings at once 374 s each on 2026-11-28, and none of them finished in 538 s.
        raise SystemExit(f"gpu_campaign: error: --lanes {args.lanes} needs --wall-seconds (how long one training "
                         "takes in that layout, measured: benchmarks/pick_layout.py)")
    campaign = Campaign(plan, args)
    if args.prepare:
        campaign.write_controls()
        campaign.write_twins([p for spec in plan["evals"].values() for p in spec["policies"]])
        print(f"wrote {campaign.root / 'schedules'}")
        return 0
    if args.dry_run:
        return campaign.dry_run()
    return campaign.run()


if __name__ == "__main__":
    sys.exit(main())
