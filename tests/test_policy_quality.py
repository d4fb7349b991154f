"""benchmarks/policy_quality.py --lanes: seeds of a policy share a process, and each run's record is the one it
would have alone (the runs' equality with runs alone: tests/test_lanes.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _run(data_dir: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(REPO / "benchmarks" / "policy_quality.py"), "--dataset", "cifar10", "--data-dir",
           str(data_dir), "--policies", "none,cutout", "--seeds", "0,1", "--epochs", "1", "--train-size", "64",
           "--test-size", "64", "--extra", "--batch-size 32 --num-workers 0", "--out", str(out), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=600)


def test_lanes_group_the_seeds_of_a_policy_and_keep_one_record_per_run(cifar_dir: Path, tmp_path: Path):
    lanes = _run(cifar_dir, tmp_path, "--lanes", "2", "--jobs", "2")
    assert lanes.returncode == 0, lanes.stdout + lanes.stderr
    logs = {p.parent.name: p.read_text() for p in (tmp_path / "runs").glob("*/log.txt")}
    assert sorted(logs) == ["cutout-seed0", "none-seed0"]  # one process per policy, its log in the first run
    assert "--seed 0,1" in logs["none-seed0"] and "none-seed{seed}" in logs["none-seed0"]
    records = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "results").glob("*.json")}
    assert sorted(records) == ["cutout-seed0", "cutout-seed1", "none-seed0", "none-seed1"]
    for name, record in records.items():
        seed = int(name[-1])
        assert record["result"]["config"]["seed"] == seed
        assert record["key"][record["key"].index("--seed") + 1] == str(seed)  # the run's own command
    # Keyed by each run's own command: the same runs without lanes are all found done.
    again = _run(cifar_dir, tmp_path, "--report-only")
    assert again.returncode == 0 and "4 of 4 runs done" in again.stdout


def test_fuse_trains_a_process_s_seeds_fused_where_it_can(cifar_dir: Path, tmp_path: Path):
    """``--fuse``: none and cutout train fused (one network of the two seeds); trivialaugment, a per-image
    policy, trains as lanes. Every record keeps its run's own key."""
    cmd = [sys.executable, str(REPO / "benchmarks" / "policy_quality.py"), "--dataset", "cifar10", "--data-dir",
           str(cifar_dir), "--policies", "cutout,trivialaugment", "--seeds", "0,1", "--epochs", "1", "--train-size",
           "64", "--test-size", "64", "--extra", "--batch-size 32 --num-workers 0", "--out", str(tmp_path),
           "--lanes", "2", "--fuse"]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    logs = {p.parent.name: p.read_text() for p in (tmp_path / "runs").glob("*/log.txt")}
    assert "--fuse" in logs["cutout-seed0"].splitlines()[0]
    assert "--fuse" not in logs["trivialaugment-seed0"].splitlines()[0]
    records = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "results").glob("*.json")}
    assert records["cutout-seed1"]["result"]["config"]["fused_seeds"] == [0, 1]
    assert records["trivialaugment-seed1"]["result"]["config"]["fused_seeds"] is None
    assert all("--fuse" not in record["key"] for record in records.values())


def test_a_timeout_starts_no_new_run_and_still_reports_the_finished_ones(cifar_dir: Path, tmp_path: Path):
    """With too little of --timeout left for a run, a finished run's record is still reused (it costs no time)
    and the table is written; only the run still to train is not started (the CPU campaign's TIMEOUT)."""
    first = _run(cifar_dir, tmp_path, "--policies", "none", "--seeds", "0")
    assert first.returncode == 0, first.stdout + first.stderr
    again = _run(cifar_dir, tmp_path, "--policies", "none", "--seeds", "0,1", "--timeout", "60",
                 "--min-run-seconds", "120")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "none seed 0: test error" in again.stdout and "(reused)" in again.stdout
    assert "none seed 1 not started: 60 s of --timeout left" in again.stdout
    assert not (tmp_path / "results" / "none-seed1.json").exists()
    assert (tmp_path / "policy_quality.md").is_file()
