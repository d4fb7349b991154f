"""benchmarks/train_speed.py: trainings side by side per mode, read back from their histories (timings are not
checked: on the CPU both modes run the same eager step)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import train_speed


def test_each_mode_runs_its_trainings_at_once_and_is_summarised(cifar_dir: Path, tmp_path: Path):
    out = tmp_path / "speed"
    code = train_speed.main([
        "--dataset", "cifar10", "--data-dir", str(cifar_dir), "--model", "wrn-10-1", "--train-size", "64",
        "--epochs", "graphs=2,eager=1", "--procs", "2", "--device", "cpu", "--threads", "1",
        "--extra", "--test-size 32 --batch-size 32 --num-workers 0", "--out", str(out),
    ])
    assert code == 0
    rows = json.loads(out.with_suffix(".json").read_text())["rows"]
    assert [(r["mode"], r["epochs"]) for r in rows] == [("graphs", 2), ("graphs", 2), ("eager", 1), ("eager", 1)]
    for r in rows:
        assert r["exit_code"] == 0 and r["median_epoch_seconds"] > 0 and 0 <= r["test_error"] <= 100
    md = out.with_suffix(".md").read_text()
    assert "graphs: median over runs" in md
    # The table names the machine as the runs describe it (a CPU's model, not just "cpu") and the commit.
    assert md.startswith("# 2 trainings side by side, per mode (CPU: ")
    assert rows[0]["device_description"].startswith("CPU: ")
    assert "- Commit: " in md and "- Commit: unknown" not in md


def test_a_failing_run_is_reported_with_its_log(tmp_path: Path):
    code = train_speed.main(["--dataset", "cifar10", "--data-dir", str(tmp_path / "missing"), "--epochs", "eager=1",
                             "--procs", "1", "--device", "cpu", "--out", str(tmp_path / "speed")])
    assert code == 1
    (row,) = json.loads((tmp_path / "speed.json").read_text())["rows"]
    assert row["exit_code"] != 0 and "missing" in row["log_tail"]
    # The table names what the process ended with: its exception line, else its last line.
    md = (tmp_path / "speed.md").read_text()
    assert "Process eager-0 failed: `" in md
    failure = md.split("Process eager-0 failed: `")[1].split("`")[0]
    assert "error:" in failure and "missing" in failure  # (argparse's error line, the log's last)


@pytest.mark.parametrize("text", ["graphs", "eager=0", "fast=3", "eager=x"])
def test_bad_epochs_are_refused(text):
    with pytest.raises(SystemExit):
        train_speed.build_parser().parse_args(["--data-dir", "x", "--epochs", text])


def test_lanes_train_several_seeds_per_process(cifar_dir: Path, tmp_path: Path):
    out = tmp_path / "lanes"
    code = train_speed.main([
        "--dataset", "cifar10", "--data-dir", str(cifar_dir), "--model", "wrn-10-1", "--train-size", "64",
        "--epochs", "graphs=1", "--procs", "1", "--lanes", "2", "--device", "cpu", "--threads", "1",
        "--extra", "--test-size 32 --batch-size 32 --num-workers 0", "--out", str(out),
    ])
    assert code == 0
    rows = json.loads(out.with_suffix(".json").read_text())["rows"]
    assert [r["run"] for r in rows] == ["graphs-0-lane0", "graphs-0-lane1"]
    assert rows[0]["test_error"] is not None and rows[1]["test_error"] is not None
    assert "1 x 2 lanes trainings" in out.with_suffix(".md").read_text()


def test_a_failed_process_s_exception_line_is_named_once():
    tail = ("Traceback (most recent call last):\n  File \"x.py\", line 1, in run\n    graph.capture_end()\n"
            "torch.AcceleratorError: CUDA error: operation failed due to a previous error during capture\n"
            "Search for `cudaErrorStreamCaptureInvalidated' in https://docs.nvidia.com for more information.\n")
    rows = [{"mode": "graphs", "run": f"graphs-5-lane{i}", "exit_code": 1, "wall_seconds": 29.0, "log_tail": tail}
            for i in range(2)]
    md = train_speed.markdown({"procs": 1, "lanes": 2, "device": "cpu", "command": "c", "date": "d"}, rows)
    assert md.count("Process graphs-5 failed: `torch.AcceleratorError: CUDA error: operation failed due to a "
                    "previous error during capture`") == 1


def test_fuse_trains_each_process_s_seeds_as_one_network(cifar_dir: Path, tmp_path: Path):
    out = tmp_path / "fused"
    code = train_speed.main([
        "--dataset", "cifar10", "--data-dir", str(cifar_dir), "--model", "wrn-10-1", "--train-size", "64",
        "--epochs", "eager=1,graphs=1", "--procs", "1", "--lanes", "2", "--fuse", "--device", "cpu", "--threads", "1",
        "--extra", "--test-size 32 --batch-size 32", "--out", str(out),
    ])
    assert code == 0
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["fuse"] is True
    # The processes were told to fuse (the report's flag is only what was asked).
    args = train_speed.build_parser().parse_args(["--data-dir", "x", "--lanes", "2", "--fuse"])
    assert "--fuse" in train_speed.train_command(args, "eager", tmp_path / "o")
    args.lanes = 1
    assert "--fuse" not in train_speed.train_command(args, "eager", tmp_path / "o")
    assert [r["run"] for r in report["rows"]] == ["eager-0-lane0", "eager-0-lane1", "graphs-0-lane0", "graphs-0-lane1"]
    assert all(r["test_error"] is not None for r in report["rows"])
    assert "1 x 2 fused trainings" in out.with_suffix(".md").read_text()
    with pytest.raises(SystemExit, match="compile"):
        train_speed.main(["--data-dir", "x", "--lanes", "2", "--fuse", "--epochs", "compile=1"])
