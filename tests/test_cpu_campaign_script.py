"""``benchmarks/campaigns/cpu_paper_scale.sh``, the CPU's paper-scale campaign (issue 20), dry-run: the table it
reports holds the runs it trains under the same labels and settings (so the records are reused, not
retrained), the labels it compares with the GPU's runs are the GPU table's (so ``paired.py --block`` finds them
on both machines), the 2x2's contrasts are its main effects, and the schedules it names exist."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "campaigns" / "cpu_paper_scale.sh"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def _dry(*args: str, **layout: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("JOBS", "THREADS", "TIMEOUT", "MIN_RUN_SECONDS")}
    env.update(DRY_RUN="1", PYTHON="py", **layout)
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60)


def _commands(*args: str, **layout: str) -> list[list[str]]:
    done = _dry(*args, **layout)
    assert done.returncode == 0, done.stderr
    return [shlex.split(line.removeprefix("would run: ")) for line in done.stdout.splitlines()]


def _option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def _policies(argv: list[str]) -> dict[str, str]:
    return dict(item.split("=", 1) if "=" in item else (item, item) for item in _option(argv, "--policies").split(","))


def _without(argv: list[str], *options: str) -> list[str]:
    """``argv`` less the named options and their values (``--report-only`` has none)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in options:
            skip = a != "--report-only"
        else:
            out.append(a)
    return out


def _stages(**layout: str) -> tuple[list[str], list[list[str]], list[list[str]]]:
    """`run`'s commands: the bfloat16 check, the stages (trainings and the search, in order) and the report."""
    check, *rest = _commands("run", **layout)
    stages = [argv for argv in rest if argv[:1] == ["nice"]]
    assert rest[:len(stages)] == stages  # every stage before the report
    return check, stages, rest[len(stages):]


def _trainings(**layout: str) -> tuple[list[str], list[list[str]], list[list[str]]]:
    """`run`'s commands: the bfloat16 check, the trainings (one per stage, in order) and the report."""
    check, stages, report = _stages(**layout)
    return check, [argv for argv in stages if argv[4] == "benchmarks/policy_quality.py"], report


def test_report_rebuilds_what_run_trains():
    check, trains, after = _trainings()
    assert check[:2] == ["py", "-c"] and "cpu_bf16_slowdown" in check[2]  # first: is --amp fast on this CPU?
    report = _commands("report")
    quality, with_gpu, cpu_only, pba_amount, profile = report
    assert after == report  # a finished `run` writes the tables
    assert "--report-only" in quality
    trained: dict[str, str] = {}
    for train in trains:
        assert train[:3] == ["nice", "-n", "5"] and train[3] == "py"
        assert "--report-only" not in train
        # Everything but the seeds, the policies and --report-only is the same, so the records of `run` are
        # the table's.
        assert (_without(quality[1:], "--report-only", "--seeds", "--policies")
                == _without(train[4:], "--seeds", "--policies"))
        assert set(_option(train, "--seeds").split(",")) <= set(_option(quality, "--seeds").split(","))
        assert "--extra=--amp" in train
        # One run at a time on both cores (RESULTS.md, "Seeds 4 and 5").
        assert _option(train, "--jobs") == "1" and _option(train, "--threads") == "2"
        assert _option(train, "--model") == "wrn-40-2" and _option(train, "--epochs") == "200"
        trained |= _policies(train)
    reported = _policies(quality)
    assert trained.items() <= reported.items()
    assert set(reported) - set(trained) == {"trivialaugment", "population-paper4", "null-population-paper4"}
    # paired.py compares the reported policies, the CPU's table a block beside the GPU's, and the 2x2 and the
    # PBA-amount cell on the CPU's table alone.
    assert with_gpu[1] == cpu_only[1] == pba_amount[1] == profile[1] == "benchmarks/paired.py"
    assert _option(with_gpu, "--block") == "benchmarks/results/cpu_paper_scale/policy_quality.json"
    assert cpu_only[2] == pba_amount[2] == profile[2] == "benchmarks/results/cpu_paper_scale/policy_quality.json"
    for argv in (with_gpu, cpu_only, pba_amount, profile):
        names = argv[3:next(i for i, a in enumerate(argv) if a.startswith("--"))]
        assert set(names) <= set(reported)


def test_the_cells_train_before_the_pba_amount_stage():
    """The 2x2's cells keep the CPU until their three seeds are done (their rule reads three a cell); then
    the search's ops under PBA's amount train beside PBA's schedule, which the report compares them with."""
    _, (cells, pba_stage, _), _ = _trainings()
    assert set(_policies(cells)) == {"null-population-paper4-amount-of-population-paper4",
                                     "population-paper4-amount-of-null-population-paper4"}
    assert set(_policies(pba_stage)) == {"pba", "population-paper4-amount-of-pba"}
    assert _option(cells, "--seeds") == _option(pba_stage, "--seeds") == "0,1,2"
    *_, pba_amount, _ = _commands("report")
    assert pba_amount[3:5] == ["population-paper4-amount-of-pba", "pba"]
    assert _option(pba_amount, "--out") == "benchmarks/results/cpu_paper_scale/pba_amount.md"


def test_the_profile_search_runs_on_the_cpu_after_the_pba_stage_then_its_runs():
    """test-profile on the CPU: the GPU plan's search (its settings are the plan's, one home) in the time the
    runs leave, every member in one process, trainings left to this script; then its schedule and its twin
    under the GPU plan's labels and files, so that either machine's work counts for the other."""
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_campaign

    _, stages, _ = _stages()
    _, pba_stage, search, profile = stages
    assert _policies(pba_stage).keys() == {"pba", "population-paper4-amount-of-pba"}
    assert search[4:6] == ["benchmarks/gpu_campaign.py", "benchmarks/campaigns/paper_scale_cifar10.json"]
    assert _option(search, "--device") == "cpu" and "--no-evals" in search
    assert _option(search, "--population-procs") == "0" and _option(search, "--budget") == "inf"
    name = _option(search, "--search")
    plan = gpu_campaign.load_plan(ROOT / search[5])
    options = shlex.split(plan["searches"][name])
    assert _option(options, "--amount") == "profile" and _option(options, "--objective") == "population"
    assert _option(options, "--amount-profile").endswith("/null-population-paper4.json")
    campaign = gpu_campaign.Campaign(plan, gpu_campaign.build_parser().parse_args([search[5]]))
    expected = {}
    for policy in (f"hba:{name}", f"twin:{name}"):
        label, path = campaign.schedule_of(policy)
        expected[label] = "hba:" + str(path.relative_to(ROOT))
    assert _policies(profile) == expected
    assert _option(profile, "--seeds") == "0,1,2"
    *_, report = _commands("report")
    assert report[3:5] == [name, f"twin-{name}-0"]
    assert _option(report, "--out") == "benchmarks/results/cpu_paper_scale/profile.md"


@pytest.mark.parametrize(("timeout", "resumed"), [("9000", True), ("599", False)])
def test_the_search_gets_what_timeout_leaves(timeout, resumed):
    """The search stops at TIMEOUT (it keeps its last finished round) and does not start with less left
    than a round needs."""
    done = _dry("run", TIMEOUT=timeout)
    searches = [shlex.split(line.removeprefix("would run: ")) for line in done.stdout.splitlines()
                if "gpu_campaign.py" in line]
    if resumed:
        (search,) = searches
        assert int(timeout) - 1 <= int(_option(search, "--budget")) <= int(timeout)
    else:
        assert searches == [] and "not resumed: 599 s of TIMEOUT left" in done.stderr


def test_the_contrasts_are_the_2x2s_main_effects():
    _, _, cpu_only, _, _ = _commands("report")
    # (ops, amount) of each cell: the pair's two schedules and the two with the other's amount.
    cells = {"population-paper4": ("search", "search"), "null-population-paper4": ("null", "null"),
             "null-population-paper4-amount-of-population-paper4": ("null", "search"),
             "population-paper4-amount-of-null-population-paper4": ("search", "null")}
    contrasts = [cpu_only[i + 1] for i, a in enumerate(cpu_only) if a == "--contrast"]
    factors = []
    for contrast in contrasts:
        a, b = (side.split("+") for side in contrast.split("="))
        assert len(a) == len(b) == 2 and set(a) | set(b) == set(cells)
        # Each side holds one level of one factor and both levels of the other.
        for factor in (0, 1):
            levels_a, levels_b = {cells[n][factor] for n in a}, {cells[n][factor] for n in b}
            if levels_a == {"search"} and levels_b == {"null"}:
                factors.append(factor)
            else:
                assert levels_a == levels_b == {"search", "null"}
    assert sorted(factors) == [0, 1]  # the mix's main effect and the amount's


def test_jobs_and_threads_set_the_layout_of_every_command():
    _, trains, (quality, *_) = _trainings(JOBS="2", THREADS="1")
    for argv in (*trains, quality):
        assert _option(argv, "--jobs") == "2" and _option(argv, "--threads") == "1"


@pytest.mark.parametrize(("limits", "expected"), [
    ({}, None),
    ({"TIMEOUT": "9000"}, ("9000", "4500")),
    ({"TIMEOUT": "9000", "MIN_RUN_SECONDS": "3000"}, ("9000", "3000")),
])
def test_a_timeout_bounds_the_training_and_not_the_report(limits, expected):
    """TIMEOUT lets a session start `run` with the time it has left: the training gets policy_quality.py's
    --timeout and --min-run-seconds (so no run starts that could not finish); the report, which trains
    nothing, gets neither, and everything else is as without it."""
    _, trains, report = _trainings(**limits)
    _, plain, _ = _trainings()
    for train, alone in zip(trains, plain, strict=True):
        if expected is None:
            assert "--timeout" not in train and "--min-run-seconds" not in train
        else:
            # Each stage gets what is left of it; a dry run takes well under the second it could lose.
            timeout, least = expected
            assert int(timeout) - 1 <= int(_option(train, "--timeout")) <= int(timeout)
            assert _option(train, "--min-run-seconds") == least
        assert _without(train, "--timeout", "--min-run-seconds") == alone
    assert report == _commands("report")


def test_labels_and_schedules_are_the_gpu_tables():
    quality, with_gpu, *_ = _commands("report")
    gpu_policies = {row["policy"] for row in json.loads((ROOT / with_gpu[2]).read_text())["rows"]}
    compared = set(with_gpu[3:with_gpu.index("--block")])
    for label, spec in _policies(quality).items():
        assert label in gpu_policies or label not in compared, label
        # The profile search's schedule and its twin exist once the search has ended (a dry run names them).
        if spec.startswith("hba:") and "population-paper4-profile" not in spec:
            assert (ROOT / spec.removeprefix("hba:")).is_file(), spec


def test_an_unknown_command_is_refused():
    done = _dry("train")
    assert done.returncode == 2
    assert "usage: cpu_paper_scale.sh run|report (got: 'train')" in done.stderr
