"""benchmarks/pick_layout.py: lanes only where the probe measured them faster, with their own time table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import gpu_campaign  # noqa: E402
import pick_layout  # noqa: E402


def _report(path: Path, procs: int, lanes: int, seconds_per_epoch: float, exit_code: int = 0) -> Path:
    rows = [{"mode": "graphs", "run": f"r{i}", "exit_code": exit_code, "wall_seconds": 30 + 5 * seconds_per_epoch,
             "epochs": 6, "median_epoch_seconds": seconds_per_epoch} for i in range(procs * lanes)]
    path.write_text(json.dumps({"procs": procs, "lanes": lanes, "rows": rows}))
    return path


@pytest.mark.parametrize(("lanes_seconds", "chosen"), [(2.0, True), (3.8, False)])
def test_lanes_are_chosen_only_when_faster(tmp_path: Path, capsys, lanes_seconds: float, chosen: bool):
    base = _report(tmp_path / "base.json", 8, 1, 1.34)  # 5.97 epochs/s
    lanes = _report(tmp_path / "lanes.json", 8, 3, lanes_seconds)  # 12.0 or 6.3 epochs/s
    assert pick_layout.main([str(base), str(lanes), "--epochs", "200"]) == 0
    out = capsys.readouterr().out.strip()
    if not chosen:
        assert out == ""
        return
    assert out == '--lanes 3 --cuda-graphs --wall-seconds {"8":430}'  # 30 s besides the epochs + 200 x 2.0
    args = gpu_campaign.build_parser().parse_args(["plan.json", *out.split()])  # as the shell splits $flags
    assert args.lanes == 3 and args.cuda_graphs and args.wall_seconds == {"8": 430}


def test_a_failed_probe_chooses_nothing(tmp_path: Path):
    base = _report(tmp_path / "base.json", 8, 1, 1.34)
    lanes = _report(tmp_path / "lanes.json", 8, 3, 1.0, exit_code=1)
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "pick_layout.py"), str(base), str(lanes)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "" and "not every run finished" in done.stderr
    missing = subprocess.run([sys.executable, str(REPO / "benchmarks" / "pick_layout.py"), str(base),
                              str(tmp_path / "none.json")], capture_output=True, text=True, timeout=60)
    assert missing.returncode == 0 and missing.stdout == ""


def test_bad_wall_seconds_are_refused_on_the_command_line():
    with pytest.raises(SystemExit):
        gpu_campaign.build_parser().parse_args(["plan.json", "--wall-seconds", '{"0": 100}'])
