"""benchmarks/gpu_campaign.py: a search and the trainings that judge it, in one budgeted call (on the CPU here)."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from hba_augment.schedule import Schedule
from hba_augment.search.priors import start_schedule

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import gpu_campaign  # noqa: E402
from control_schedules import PBA_LOG  # noqa: E402

# Campaign.write_controls writes PBA's schedule from its reference log (../shared/reference), which a clone
# without ../shared lacks: the tests that call it skip there, as the data tests do.
_NEEDS_PBA_LOG = pytest.mark.skipif(not PBA_LOG.exists(), reason=f"PBA reference log not found at {PBA_LOG}")

_TINY = {
    "name": "tiny", "data": "", "dataset": "cifar10",
    "search_args": ["--model", "wrn-10-1", "--epochs", "1", "--train-size", "64", "--val-size", "64", "--batch-size",
                    "32", "--threads", "1"],
    "train": {"model": "wrn-10-1", "epochs": 1, "train_size": 64, "extra": "--batch-size 32"},
    "searches": {"s": "--init uniform:0.3 --prior-decay 1"},
    "evals": {"val": {"seeds": [0], "test_size": 64, "policies": ["start:s", "hba:s"]}},
}


@pytest.mark.slow
def test_a_campaign_searches_judges_and_packs(data_dir: Path, tmp_path: Path):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(_TINY))
    out, pack = tmp_path / "campaign", tmp_path / "campaign.tgz"
    cmd = [sys.executable, str(REPO / "benchmarks" / "gpu_campaign.py"), str(plan), "--data-root", str(data_dir),
           "--device", "cpu", "--budget", "240", "--margin", "5", "--min-eval-seconds", "5", "--threads", "1",
           "--out", str(out), "--pack", str(pack)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    learned = Schedule.load(out / "searches" / "s" / "schedule.json")
    assert learned.provenance["init"] == "uniform:0.3" and learned.provenance["prior_decay"] == 1.0
    # The control is the search's own start, held.
    start = Schedule.load(out / "schedules" / "start-s.json")
    expected = start_schedule("uniform:0.3")
    assert np.allclose(start.prob, expected.prob) and np.allclose(start.mag, expected.mag, equal_nan=True)
    records = sorted(p.name for p in (out / "val" / "results").glob("*.json"))
    assert records == ["s-seed0.json", "start-s-seed0.json"]
    table = (out / "val" / "policy_quality.md").read_text()
    assert "| start-s |" in table and "| s |" in table and "Validation error" in table
    with tarfile.open(pack) as tar:
        names = tar.getnames()
    assert "searches/s/schedule.json" in names and "val/results/s-seed0.json" in names
    assert not any(n.endswith(".pt") or "/runs/" in n for n in names)  # no checkpoints, no run folders
    # A second call finds everything done and trains nothing.
    again = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=600)
    assert again.returncode == 0 and "started" not in again.stdout.replace("started val", "")


@pytest.mark.parametrize(("change", "match"), [
    ({"bogus": 1}, "unknown keys \\['bogus'\\]"),
    ({"evals": {"val": {"seeds": [0], "policies": ["start:nope"]}}}, "'start:nope' names no search"),
    ({"evals": {"val": {"seeds": [0], "policies": ["autoaugmentt"]}}}, "unknown policy 'autoaugmentt'"),
    ({"evals": {"train": {"seeds": [0], "policies": ["none"]}}}, "must be 'val' or 'test'"),
    ({"evals": {"more": {"seeds": [3], "policies": ["none"], "eval_split": "train"}}}, "must be 'val' or 'test'"),
    ({"evals": {"val": {"seeds": [0], "policies": ["null:s"]}}}, "'null:s' needs a search with --objective population"),
    ({"evals": {"val": {"seeds": [0], "policies": ["matched-twin:s"]}}},
     "'matched-twin:s' needs a search with --objective population"),
    ({"evals": {"val": {"seeds": [0], "policies": ["twin:nope"]}}}, "'twin:nope' names no search"),
])
def test_bad_plans_are_refused(tmp_path: Path, change, match):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({**_TINY, **change}))
    with pytest.raises(ValueError, match=match):
        gpu_campaign.load_plan(plan)


def test_the_shipped_plans_load():
    for path in (REPO / "benchmarks" / "campaigns").glob("*.json"):
        plan = gpu_campaign.load_plan(path)
        assert (REPO / "benchmarks" / "results" / plan["name"] / "schedules" / "pba.json").exists(), (
            f"run 'python benchmarks/gpu_campaign.py {path.relative_to(REPO)} --prepare' and commit its schedules")


def test_policy_quality_starts_no_run_that_cannot_finish(data_dir: Path, tmp_path: Path):
    cmd = [sys.executable, str(REPO / "benchmarks" / "policy_quality.py"), "--dataset", "cifar10", "--data-dir",
           str(data_dir), "--policies", "none", "--seeds", "0", "--epochs", "1", "--train-size", "64",
           "--timeout", "60", "--min-run-seconds", "120", "--keep-going", "--out", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 1 and "not started: 60 s of --timeout left" in proc.stdout
    assert "no run finished" in proc.stdout and not (tmp_path / "runs").exists()


def test_a_split_asks_only_for_the_runs_it_has_left(tmp_path: Path):
    """Slots go to unfinished runs: the second call of the H100 campaign gave the test split one slot per
    run it still needed, not one per planned run (which had left the other split one slot)."""
    import argparse

    plan = {**_TINY, "evals": {"val": {"seeds": [0, 1], "test_size": 64, "policies": ["start:s", "hba:s", "pba"]}}}
    campaign = gpu_campaign.Campaign(plan, argparse.Namespace(out=str(tmp_path), data_root=str(tmp_path), budget=1.0))
    policies = plan["evals"]["val"]["policies"]
    assert campaign.runs_left("val", policies) == 6
    records = tmp_path / "val" / "results"
    records.mkdir(parents=True)
    for name in ("start-s-seed0.json", "start-s-seed1.json", "pba-seed1.json"):
        (records / name).write_text("{}")
    assert campaign.runs_left("val", policies) == 3
    assert campaign.runs_left("val", ["start:s"]) == 0


def test_search_starts_only_the_named_searches(tmp_path: Path, monkeypatch):
    """A paper-scale population search needs the GPU to itself: ``--search`` starts it alone."""
    plan = {**_TINY, "searches": {"a": "--init paper", "s": "--init uniform:0.3"}}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    args = gpu_campaign.build_parser().parse_args([str(path), "--out", str(tmp_path / "c"), "--search", "s"])
    campaign = gpu_campaign.Campaign(gpu_campaign.load_plan(path), args)
    launched = []
    monkeypatch.setattr(campaign, "launch", lambda label, cmd, log, slots=1: launched.append(label))
    assert campaign.start_searches() == ["s"] and launched == ["search s"]
    with pytest.raises(SystemExit, match="--search 'c' is not a search of"):
        gpu_campaign.main([str(path), "--search", "c"])


def test_no_search_starts_none(tmp_path: Path, monkeypatch):
    """A short call that should only train: unfinished searches stay unstarted (on 2026-11-26 a call without
    this flag started three 300-second searches with 230 s left)."""
    plan = {**_TINY, "searches": {"a": "--init paper", "s": "--init uniform:0.3"}}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    args = gpu_campaign.build_parser().parse_args([str(path), "--out", str(tmp_path / "c"), "--no-search"])
    campaign = gpu_campaign.Campaign(gpu_campaign.load_plan(path), args)
    launched = []
    monkeypatch.setattr(campaign, "launch", lambda label, cmd, log, slots=1: launched.append(label))
    assert campaign.start_searches() == [] and launched == []
    with pytest.raises(SystemExit):
        gpu_campaign.build_parser().parse_args([str(path), "--no-search", "--search", "s"])


@_NEEDS_PBA_LOG
def test_prepare_writes_a_population_search_s_null_control(tmp_path: Path):
    """``null:<search>``: the schedule that search writes with scores of pure noise, at its own settings."""
    import argparse

    plan = {**_TINY, "searches": {"p": "--init trivialaugment --objective population --population 4 --epochs 30 "
                                        "--exploit-every 3"},
            "evals": {"test": {"seeds": [0], "policies": ["start:p", "null:p"]}}}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    campaign = gpu_campaign.Campaign(gpu_campaign.load_plan(path),
                                     argparse.Namespace(out=str(tmp_path / "c"), data_root=str(tmp_path), budget=1.0,
                                                        population_procs=None))
    campaign.write_controls()
    label, file = campaign.schedule_of("null:p")
    assert label == "null-p" and campaign.ready("null:p")
    null = Schedule.load(file)
    assert null.epochs == 30 and null.provenance["population"] == 4 and null.provenance["exploit_every"] == 3
    assert null.count_probs == pytest.approx(start_schedule("trivialaugment").count_probs)
    # The search's own settings (its seed, explore and rounds) drew it.
    sys.path.insert(0, str(REPO / "benchmarks"))
    from pbt_null import null_schedule

    expected = null_schedule("trivialaugment", 0, population=4, epochs=30, every=3)
    np.testing.assert_allclose(null.prob, expected.prob, atol=1e-6)  # the file keeps 6 significant digits
    np.testing.assert_allclose(null.mag, expected.mag, rtol=1e-5)


def test_a_population_search_s_twins_are_written_when_it_ends(tmp_path: Path, monkeypatch):
    """``twin:<search>`` and ``matched-twin:<search>`` wait for the search's schedule, then are pbt_null.py's
    twin (noise seed 0) and amount-matched twin of it, under the names pbt_null.py gives them."""
    import argparse
    import shutil

    from pbt_null import matched_twin_schedule, twin_null_schedule

    monkeypatch.setitem(gpu_campaign.TWIN_KINDS, "matched-twin", 20)  # of 2,000 in the plan: seconds, not tens
    plan = {**_TINY, "searches": {"p": "--init zero --member-start same --objective population --population 4"},
            "evals": {"test": {"seeds": [0], "policies": ["hba:p", "twin:p", "matched-twin:p"]}}}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    campaign = gpu_campaign.Campaign(gpu_campaign.load_plan(path),
                                     argparse.Namespace(out=str(tmp_path / "c"), data_root=str(tmp_path), budget=1.0,
                                                        population_procs=None))
    policies = plan["evals"]["test"]["policies"]
    campaign.write_twins(policies)
    assert not any(campaign.ready(p) for p in policies)  # the search has not ended
    searched = REPO / "benchmarks/results/proxy_population/searches/population-zero-same"
    shutil.copytree(searched, campaign.search_dir("p"))
    campaign.write_twins(policies)
    assert all(campaign.ready(p) for p in policies)
    assert [campaign.schedule_of(p)[0] for p in policies[1:]] == ["twin-p-0", "matched-twin-p-0"]
    twin, matched = (Schedule.load(campaign.schedule_of(p)[1]) for p in policies[1:])
    np.testing.assert_allclose(twin.prob, twin_null_schedule(campaign.search_dir("p"), 0).prob, atol=1e-6)
    expected = matched_twin_schedule(campaign.search_dir("p"), 0, 20)
    assert matched.provenance["candidates"] == 20
    assert matched.provenance["noise_seed"] == expected.provenance["noise_seed"]
    stamp = campaign.schedule_of("twin:p")[1].stat().st_mtime_ns
    campaign.write_twins(policies)  # written once
    assert campaign.schedule_of("twin:p")[1].stat().st_mtime_ns == stamp


@pytest.mark.parametrize(("left", "written"), [(gpu_campaign.TWIN_SECONDS - 1, False), (gpu_campaign.TWIN_SECONDS, True)])
def test_a_call_writes_twins_only_with_the_time_to(tmp_path: Path, monkeypatch, left: float, written: bool):
    """A call with less than ``TWIN_SECONDS`` left leaves the twins to the next call instead of running past
    its end (where the search's own call would lose the search)."""
    import shutil

    plan = {**_TINY, "searches": {"p": "--init zero --member-start same --objective population --population 4"},
            "evals": {"test": {"seeds": [0], "policies": ["twin:p"]}}}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    args = gpu_campaign.build_parser().parse_args([str(path), "--out", str(tmp_path / "c"), "--no-search"])
    campaign = gpu_campaign.Campaign(gpu_campaign.load_plan(path), args)
    shutil.copytree(REPO / "benchmarks/results/proxy_population/searches/population-zero-same", campaign.search_dir("p"))
    times = iter([left, 0.0])  # one pass of the loop, then the budget is spent
    monkeypatch.setattr(campaign, "left", lambda: next(times, 0.0))
    for name in ("write_controls", "report"):
        monkeypatch.setattr(campaign, name, lambda: None)
    monkeypatch.setattr(campaign, "launch_ready", lambda pending: None)
    assert campaign.run() == 0
    assert campaign.ready("twin:p") is written


def test_a_population_search_holds_a_slot_per_worker(tmp_path: Path, monkeypatch):
    """``--max-procs`` counts device processes: a population search holds one slot per worker process (its
    config's ``procs``), any other search one."""
    plan = {**_TINY, "searches": {"p": "--init trivialaugment --objective population --population 4",
                                  "q": "--init trivialaugment --objective population --population 4 "
                                       "--population-procs 2",
                                  "z": "--init trivialaugment --objective population --population-procs 0",
                                  "s": "--init uniform:0.3"}}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    args = gpu_campaign.build_parser().parse_args([str(path), "--out", str(tmp_path / "c"), "--search", "p"])
    campaign = gpu_campaign.Campaign(gpu_campaign.load_plan(path), args)
    assert [campaign.search_slots(n, o) for n, o in plan["searches"].items()] == [4, 2, 1, 1]
    launched = []
    monkeypatch.setattr(campaign, "launch", lambda label, cmd, log, slots=1: launched.append((label, slots)))
    assert campaign.start_searches() == ["p"] and launched == [("search p", 4)]


def test_population_procs_overrides_the_plan_s_workers(tmp_path: Path, monkeypatch):
    """``--population-procs`` (e.g. 0 on a 2-core CPU) replaces the plan's worker count in the search's command
    line, after the plan's options so that the search parses it, and in the slots it holds; nothing else of
    the command changes (the search keeps its name and folder: procs are resume-free)."""
    plan = {**_TINY, "searches": {"p": "--init trivialaugment --objective population --population 4 "
                                       "--population-procs 2"},
            "evals": {"test": {"seeds": [0], "policies": ["hba:p"]}}}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    common = [str(path), "--out", str(tmp_path / "c"), "--device", "cpu"]
    plain = gpu_campaign.Campaign(gpu_campaign.load_plan(path), gpu_campaign.build_parser().parse_args(common))
    args = gpu_campaign.build_parser().parse_args([*common, "--population-procs", "0"])
    campaign = gpu_campaign.Campaign(gpu_campaign.load_plan(path), args)
    options = plan["searches"]["p"]
    assert campaign.search_argv("p", options) == [*plain.search_argv("p", options), "--population-procs", "0"]
    assert plain.search_args("p", options).population_procs == 2
    assert campaign.search_args("p", options).population_procs == 0
    assert (plain.search_slots("p", options), campaign.search_slots("p", options)) == (2, 1)
    launched = []
    monkeypatch.setattr(campaign, "launch", lambda label, cmd, log, slots=1: launched.append((cmd, slots)))
    assert campaign.start_searches() == ["p"]
    (cmd, slots), = launched
    assert slots == 1 and cmd[cmd.index("--population-procs", cmd.index("--out")) + 1] == "0"
    with pytest.raises(SystemExit):
        gpu_campaign.build_parser().parse_args([*common, "--population-procs", "-1"])


def test_no_evals_only_searches_and_leaves_the_twins_ready(tmp_path: Path, monkeypatch):
    """``--no-evals`` (a search run alone, e.g. on a CPU): no training starts, the tables are not rebuilt,
    and the twins of every ``evals`` entry are written once their search has ended, for the calls that train
    them."""
    import shutil

    plan = {**_TINY, "searches": {"p": "--init zero --member-start same --objective population --population 4"},
            "evals": {"test": {"seeds": [0], "policies": ["hba:p", "none"]},
                      "more": {"eval_split": "test", "seeds": [1], "policies": ["twin:p"]}}}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    args = gpu_campaign.build_parser().parse_args([str(path), "--out", str(tmp_path / "c"), "--no-evals",
                                                   "--search", "p"])
    campaign = gpu_campaign.Campaign(gpu_campaign.load_plan(path), args)
    assert campaign.pending() == {}
    assert campaign.twin_candidates({}) == ["hba:p", "none", "twin:p"]
    shutil.copytree(REPO / "benchmarks/results/proxy_population/searches/population-zero-same", campaign.search_dir("p"))
    times = iter([gpu_campaign.TWIN_SECONDS, 0.0])  # one pass of the loop, then the budget is spent
    monkeypatch.setattr(campaign, "left", lambda: next(times, 0.0))
    monkeypatch.setattr(campaign, "write_controls", lambda: None)
    calls = []
    monkeypatch.setattr(campaign, "report", lambda: calls.append("report"))
    monkeypatch.setattr(campaign, "launch", lambda label, cmd, log, slots=1: calls.append(label))
    assert campaign.run() == 0
    assert calls == [] and campaign.ready("twin:p")  # the search had ended: nothing started, nothing reported
    with pytest.raises(SystemExit):
        gpu_campaign.build_parser().parse_args([str(path), "--no-evals", "--evals", "test"])


@_NEEDS_PBA_LOG
def test_a_population_search_s_slots_go_to_its_own_runs_when_it_ends(tmp_path: Path, monkeypatch):
    """While the search's workers fill ``--max-procs``, ready controls wait; when it ends, its slots go to the
    test split's runs in plan order, the search's own first."""
    import types

    plan = {**_TINY, "searches": {"p": "--init trivialaugment --objective population --population 4"},
            "evals": {"test": {"seeds": [0, 1, 2], "policies": ["hba:p", "null:p", "none"]}}}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    args = gpu_campaign.build_parser().parse_args([str(path), "--out", str(tmp_path / "c"), "--max-procs", "4",
                                                   "--budget", "600"])
    campaign = gpu_campaign.Campaign(gpu_campaign.load_plan(path), args)
    campaign.write_controls()
    search = types.SimpleNamespace(returncode=None)
    search.poll = lambda: search.returncode
    campaign.procs.append(("search p", search, None, campaign.search_slots("p", plan["searches"]["p"])))
    started = []
    monkeypatch.setattr(campaign, "start_evals",
                        lambda split, policies, jobs, min_seconds: started.append((split, policies, jobs)))
    pending = {"test": list(plan["evals"]["test"]["policies"])}
    campaign.launch_ready(pending)
    assert started == [] and pending["test"] == ["hba:p", "null:p", "none"]  # null:p and none are ready, yet wait
    search.returncode = 0
    campaign.search_dir("p").mkdir(parents=True)
    start_schedule("trivialaugment").save(campaign.search_dir("p") / "schedule.json")
    campaign.launch_ready(pending)
    assert started == [("test", ["hba:p", "null:p", "none"], 4)] and pending["test"] == []


def _timed_campaign(tmp_path: Path, walls: dict[str, float], left: float, *options: str) -> gpu_campaign.Campaign:
    plan = {**_TINY, "train": {**_TINY["train"], "wall_seconds": walls},
            "evals": {"test": {"seeds": [0, 1, 2], "policies": ["none", "cutout", "baseline"]}}}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    args = gpu_campaign.build_parser().parse_args([str(path), "--out", str(tmp_path / "c"), "--max-procs", "8",
                                                   *options])
    campaign = gpu_campaign.Campaign(gpu_campaign.load_plan(path), args)
    campaign.left = lambda: left
    return campaign


def test_a_run_s_time_grows_with_the_processes_sharing_the_gpu(tmp_path: Path):
    """``train.wall_seconds``: linear between measured counts, proportional beyond the largest, never below
    ``--min-eval-seconds`` (240 by default)."""
    campaign = _timed_campaign(tmp_path, {"1": 250, "8": 425}, left=600)
    assert [campaign.run_seconds(n) for n in (1, 4, 8, 16)] == pytest.approx([250, 325, 425, 850])
    assert _timed_campaign(tmp_path, {"2": 100}, left=600).run_seconds(1) == 240
    assert _timed_campaign(tmp_path, {}, left=600).run_seconds(8) == 240


@pytest.mark.parametrize(("left", "jobs"), [(600, 8), (350, 2), (325, 1), (290, 0)])
def test_only_runs_that_can_finish_start(tmp_path: Path, monkeypatch, left: float, jobs: int):
    """On 2026-11-27 a call with 345 s of budget started eight 200-epoch trainings on the H100 and none
    finished (four beside a search had taken 283 s). The slots given are those whose runs fit."""
    campaign = _timed_campaign(tmp_path, {"1": 250, "8": 425}, left=left)
    started = []
    monkeypatch.setattr(campaign, "start_evals",
                        lambda split, policies, jobs, min_seconds: started.append((jobs, min_seconds)))
    pending = {"test": ["none", "cutout", "baseline"]}
    campaign.launch_ready(pending)
    margin = campaign.args.margin
    if jobs:
        assert started == [(jobs, campaign.run_seconds(jobs))] and pending["test"] == []
        assert campaign.run_seconds(jobs) < left - margin and (jobs == 8 or campaign.run_seconds(jobs + 1) >= left - margin)
    else:
        assert started == [] and pending["test"] == ["none", "cutout", "baseline"]  # waits: nothing would finish


@pytest.mark.parametrize("walls", [{"0": 100}, {"one": 100}, {"4": -1}, [240]])
def test_bad_wall_seconds_are_refused(tmp_path: Path, walls):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({**_TINY, "train": {**_TINY["train"], "wall_seconds": walls}}))
    with pytest.raises(ValueError, match=r"train\.wall_seconds maps processes at once"):
        gpu_campaign.load_plan(plan)


def test_lanes_ask_for_a_process_per_group_of_seeds(tmp_path: Path, monkeypatch):
    """``--lanes 3``: nine runs need three processes of three seeds each, trained with ``--cuda-graphs``."""
    campaign = _timed_campaign(tmp_path, {"1": 250, "8": 425}, 600, "--lanes", "3", "--cuda-graphs")
    started = []
    monkeypatch.setattr(campaign, "start_evals",
                        lambda split, policies, jobs, min_seconds: started.append(jobs))
    campaign.launch_ready({"test": ["none", "cutout", "baseline"]})
    assert started == [3]
    cmd = campaign.policy_quality("test", ["none"])
    assert cmd[cmd.index("--lanes") + 1] == "3" and "--cuda-graphs" in cmd[cmd.index("--extra") + 1]
    assert "--fuse" not in cmd
    (tmp_path / "fused").mkdir()
    fused = _timed_campaign(tmp_path / "fused", {"1": 250, "8": 425}, 600, "--lanes", "3", "--fuse")
    assert "--fuse" in fused.policy_quality("test", ["none"])


def test_lanes_without_a_measured_time_table_are_refused(tmp_path: Path):
    """The plan's table was measured with one training per process: read for three, it promised 24 trainings
    at once 374 s each on 2026-11-28, and none finished in 538 s."""
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(_TINY))
    with pytest.raises(SystemExit, match="--lanes 3 needs --wall-seconds"):
        gpu_campaign.main([str(path), "--out", str(tmp_path / "c"), "--lanes", "3"])


def test_the_archive_holds_the_run_records_and_tables_first(tmp_path: Path):
    """On 2026-11-28 the call ended while the archive was being written: what came back was only what had
    been written by then, so the records go first."""
    args = gpu_campaign.build_parser().parse_args([str(tmp_path / "plan.json"), "--out", str(tmp_path / "c")])
    (tmp_path / "plan.json").write_text(json.dumps(_TINY))
    campaign = gpu_campaign.Campaign(gpu_campaign.load_plan(tmp_path / "plan.json"), args)
    files = ["a-log.txt", "schedules/pba.json", "searches/s/log.txt", "searches/s/schedule.json", "test/log.txt",
             "test/policy_quality.md", "test/results/pba-seed0.json", "test/runs/x/checkpoint.pt", "test/runs/x/log.txt",
             "val/results/none-seed1.json"]
    for name in files:
        (campaign.root / name).parent.mkdir(parents=True, exist_ok=True)
        (campaign.root / name).write_text("x")
    campaign.pack(tmp_path / "p.tgz")
    with tarfile.open(tmp_path / "p.tgz") as tar:
        names = [Path(n).relative_to(campaign.root).as_posix() if Path(n).is_absolute() else n for n in tar.getnames()]
    assert [Path(n).name for n in names] == ["pba-seed0.json", "none-seed1.json", "policy_quality.md", "schedule.json",
                                             "a-log.txt", "pba.json", "log.txt", "log.txt"]


def test_a_folder_of_more_seeds_tests_on_its_eval_split(tmp_path: Path):
    """An ``evals`` entry named freely: its records in its own folder, its runs on its ``eval_split``."""
    import argparse

    plan = {**_TINY, "evals": {"more": {"seeds": [3, 4], "policies": ["none"], "eval_split": "val"},
                               "test": {"seeds": [0], "policies": ["none"]}}}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    campaign = gpu_campaign.Campaign(gpu_campaign.load_plan(path), argparse.Namespace(
        out=str(tmp_path / "c"), data_root=str(tmp_path), budget=1.0, device="cpu", threads=1, lanes=1,
        cuda_graphs=False, fuse=False))
    more, test = campaign.policy_quality("more", ["none"]), campaign.policy_quality("test", ["none"])
    assert more[more.index("--out") + 1] == str(tmp_path / "c" / "more")
    assert more[more.index("--seeds") + 1] == "3,4" and "--eval-split val" in more[more.index("--extra") + 1]
    assert "--eval-split" not in test[test.index("--extra") + 1]


def test_a_dry_run_prints_what_would_start_and_starts_nothing(tmp_path: Path, capsys, monkeypatch):
    """``--dry-run``: a call's options checked here before device time is spent on them."""
    plan = {**_TINY, "train": {**_TINY["train"], "wall_seconds": {"8": 300}},
            "evals": {"test": {"seeds": [0, 1, 2], "policies": ["none", "cutout", "hba:s"]}}}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: pytest.fail("a dry run started a process"))
    out = tmp_path / "c"
    common = [str(path), "--out", str(out), "--budget", "500", "--lanes", "2", "--wall-seconds", '{"8": 350}',
              "--dry-run"]
    assert gpu_campaign.main(common) == 0
    printed = capsys.readouterr().out
    assert "would start search s (1 process(es))" in printed
    assert "would start test: none, cutout (3 process(es) x 2 lane(s))" in printed  # 6 runs in pairs
    assert "4 process(es) at once: a training 350 s" in printed
    assert "test: 1 policies wait" in printed  # hba:s: its search has not run
    assert not out.exists() or not any(out.rglob("*.json"))
    # With every run of "none" recorded, the process still gets it (its records are reused there), but
    # what would start is only cutout's three runs.
    (out / "test" / "results").mkdir(parents=True)
    for seed in (0, 1, 2):
        (out / "test" / "results" / f"none-seed{seed}.json").write_text("{}")
    assert gpu_campaign.main(common) == 0
    assert "would start test: cutout (2 process(es) x 2 lane(s))" in capsys.readouterr().out


def test_evals_runs_only_the_named_entries_in_the_order_given(tmp_path: Path, capsys, monkeypatch):
    """``--evals``: a new search's runs before the plan's older queues, without reordering the plan."""
    plan = {**_TINY, "train": {**_TINY["train"], "wall_seconds": {"8": 300}},
            "evals": {"more": {"seeds": [3], "policies": ["none"], "eval_split": "test"},
                      "test": {"seeds": [0], "policies": ["cutout"]}}}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: pytest.fail("a dry run started a process"))
    common = [str(path), "--out", str(tmp_path / "c"), "--budget", "500", "--no-search", "--max-procs", "1", "--dry-run"]
    assert gpu_campaign.main(common) == 0
    assert "would start more: none" in capsys.readouterr().out  # the plan's order: the one process goes to "more"
    assert gpu_campaign.main([*common, "--evals", "test", "--evals", "more"]) == 0
    printed = capsys.readouterr().out
    assert "would start test: cutout" in printed and "more: 1 policies wait" in printed
    assert gpu_campaign.main([*common, "--evals", "test"]) == 0
    assert "more" not in capsys.readouterr().out
    with pytest.raises(SystemExit, match="--evals 'val' is not an entry"):
        gpu_campaign.main([*common, "--evals", "val"])
