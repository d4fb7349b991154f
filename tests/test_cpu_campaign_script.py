"""``benchmarks/campaigns/cpu_paper_scale.sh``, the CPU's paper-scale campaign (issue 20), dry-run: the table it
reports holds the runs it trains under the same labels and settings (so the records are reused, not
retrained), those labels are the GPU table's (so ``paired.py --block`` finds them on both machines), and the
schedules it names exist."""

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
    env = {k: v for k, v in os.environ.items() if k not in ("JOBS", "THREADS")}
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


def test_report_rebuilds_what_run_trains():
    (train,) = _commands("run")
    quality, paired = _commands("report")
    assert train[:3] == ["nice", "-n", "5"] and train[3] == "py"
    assert "--report-only" in quality and "--report-only" not in train
    # Everything but the policies and --report-only is the same, so the records of `run` are the table's.
    same = [a for a in quality[1:] if a != "--report-only" and a != _option(quality, "--policies")]
    assert same == [a for a in train[4:] if a != _option(train, "--policies")]
    trained, reported = _policies(train), _policies(quality)
    assert trained.items() <= reported.items()
    assert set(reported) - set(trained) == {"trivialaugment", "pba"}
    assert "--extra=--amp" in train
    # Two runs side by side on one thread each (RESULTS.md, "Two runs side by side again").
    assert _option(train, "--jobs") == "2" and _option(train, "--threads") == "1"
    assert _option(train, "--model") == "wrn-40-2" and _option(train, "--epochs") == "200"
    # paired.py compares the reported policies, the CPU's table a block beside the GPU's.
    assert paired[1] == "benchmarks/paired.py"
    assert _option(paired, "--block") == "benchmarks/results/cpu_paper_scale/policy_quality.json"
    names = paired[3:paired.index("--block")]
    assert set(names) <= set(reported)


def test_jobs_and_threads_set_the_layout_of_both_commands():
    (train,) = _commands("run", JOBS="1", THREADS="2")
    quality, _ = _commands("report", JOBS="1", THREADS="2")
    for argv in (train, quality):
        assert _option(argv, "--jobs") == "1" and _option(argv, "--threads") == "2"


def test_labels_and_schedules_are_the_gpu_tables():
    quality, paired = _commands("report")
    gpu_policies = {row["policy"] for row in json.loads((ROOT / paired[2]).read_text())["rows"]}
    for label, spec in _policies(quality).items():
        assert label in gpu_policies, label
        if spec.startswith("hba:"):
            assert (ROOT / spec.removeprefix("hba:")).is_file(), spec


def test_an_unknown_command_is_refused():
    done = _dry("train")
    assert done.returncode == 2
    assert "usage: cpu_paper_scale.sh run|report (got: 'train')" in done.stderr
