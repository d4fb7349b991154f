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
    assert out == '--max-procs 8 --lanes 3 --cuda-graphs --wall-seconds {"8":516}'  # (30 s + 200 x 2.0) x 1.2 headroom
    args = gpu_campaign.build_parser().parse_args(["plan.json", "--max-procs", "2", *out.split()])  # as the shell splits $flags
    assert args.max_procs == 8 and args.lanes == 3 and args.cuda_graphs and args.wall_seconds == {"8": 516}


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


def test_the_plan_s_measured_time_scales_the_estimate(tmp_path: Path, capsys):
    # The probe says 30 + 200 x 1.34 = 298 s for the usual layout where the plan measured 447 s (1.5x): the
    # lanes' 430 s become 645 (and 1.1 headroom, 709.5).
    base = _report(tmp_path / "base.json", 8, 1, 1.34)
    lanes = _report(tmp_path / "lanes.json", 8, 3, 2.0)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"train": {"wall_seconds": {"1": 200, "8": 447}}}))
    assert pick_layout.main([str(base), str(lanes), "--epochs", "200", "--plan", str(plan), "--headroom", "1.1"]) == 0
    assert capsys.readouterr().out.strip() == '--max-procs 8 --lanes 3 --cuda-graphs --wall-seconds {"8":710}'


def test_the_pace_is_the_median_run_s_not_the_sum_of_each_run_s(tmp_path: Path):
    # Two runs that ran alone at the end of a short probe do not make the layout faster.
    report = json.loads(_report(tmp_path / "lanes.json", 2, 3, 1.6).read_text())
    report["rows"][0]["median_epoch_seconds"] = report["rows"][1]["median_epoch_seconds"] = 0.8
    assert pick_layout.layout(report, "graphs")["epochs_per_second"] == pytest.approx(6 / 1.6)


def test_eager_lanes_are_chosen_where_the_captured_ones_failed(tmp_path: Path, capsys):
    # On 2026-11-28 a capture failed in one process of eight; eager lanes that all finished still count.
    base = _report(tmp_path / "base.json", 8, 1, 1.34)
    graphs = json.loads(_report(tmp_path / "g.json", 8, 2, 1.4, exit_code=1).read_text())["rows"]
    eager = json.loads(_report(tmp_path / "e.json", 8, 2, 1.6).read_text())["rows"]
    for row in eager:
        row["mode"] = "eager"
    (tmp_path / "lanes.json").write_text(json.dumps({"procs": 8, "lanes": 2, "rows": graphs + eager}))
    assert pick_layout.main([str(base), str(tmp_path / "lanes.json"), "--headroom", "1"]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() == '--max-procs 8 --lanes 2 --wall-seconds {"8":350}'  # 30 s + 200 x 1.6; no --cuda-graphs
    assert "8 x 2 (graphs): not chosen (graphs: not every run finished" in captured.err


def test_the_faster_mode_of_the_lanes_probe_is_chosen(tmp_path: Path, capsys):
    base = _report(tmp_path / "base.json", 8, 1, 1.34)
    graphs = json.loads(_report(tmp_path / "g.json", 8, 2, 1.4).read_text())["rows"]
    eager = [{**row, "mode": "eager", "median_epoch_seconds": 1.9} for row in graphs]
    (tmp_path / "lanes.json").write_text(json.dumps({"procs": 8, "lanes": 2, "rows": graphs + eager}))
    assert pick_layout.main([str(base), str(tmp_path / "lanes.json"), "--headroom", "1"]) == 0
    assert capsys.readouterr().out.strip() == '--max-procs 8 --lanes 2 --cuda-graphs --wall-seconds {"8":310}'


def test_lanes_whose_trainings_would_not_fit_the_call_are_not_chosen(tmp_path: Path, capsys):
    # 516 s a training (the first test's layout) does not fit 500 s: the campaign would start nothing.
    base = _report(tmp_path / "base.json", 8, 1, 1.34)
    lanes = _report(tmp_path / "lanes.json", 8, 3, 2.0)
    assert pick_layout.main([str(base), str(lanes), "--fit", "500"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and "not chosen, more than the 500 s of --fit" in captured.err
    assert pick_layout.main([str(base), str(lanes), "--fit", "520"]) == 0
    assert capsys.readouterr().out.strip() == '--max-procs 8 --lanes 3 --cuda-graphs --wall-seconds {"8":516}'


def test_the_fastest_layout_that_fits_is_chosen_among_several(tmp_path: Path, capsys):
    # 2 x 8 lanes is the fastest (16 / 1.5 = 10.7 epochs/s) but too long for the call; 4 x 4 (16 / 1.6 = 10.0)
    # fits and beats 8 x 2 (16 / 1.7 = 9.4).
    base = _report(tmp_path / "base.json", 8, 1, 1.34)
    reports = [_report(tmp_path / "a.json", 8, 2, 1.7), _report(tmp_path / "b.json", 4, 4, 1.6),
               _report(tmp_path / "c.json", 2, 8, 1.5)]
    slow_start = json.loads(reports[2].read_text())
    for row in slow_start["rows"]:
        row["wall_seconds"] += 200  # 230 s besides the epochs
    reports[2].write_text(json.dumps(slow_start))
    assert pick_layout.main([str(base), *map(str, reports), "--headroom", "1", "--fit", "400"]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() == '--max-procs 4 --lanes 4 --cuda-graphs --wall-seconds {"4":350}'
    assert "2 x 8 (graphs): 10.67 epochs/s" in captured.err and "not chosen, more than the 400 s" in captured.err


def test_layouts_with_more_lanes_than_a_policy_has_seeds_are_not_chosen(tmp_path: Path, capsys):
    # A campaign process holds seeds of one policy: with 3 seeds, 4 lanes would run 3.
    base = _report(tmp_path / "base.json", 8, 1, 1.34)
    reports = [_report(tmp_path / "a.json", 5, 3, 1.7), _report(tmp_path / "b.json", 4, 4, 1.5)]
    assert pick_layout.main([str(base), *map(str, reports), "--headroom", "1", "--max-lanes", "3"]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() == '--max-procs 5 --lanes 3 --cuda-graphs --wall-seconds {"5":370}'
    assert "4 x 4 (graphs): 10.67 epochs/s (1.79x), a training 330 s: not chosen, more lanes than --max-lanes 3" in captured.err


def test_a_fused_layout_is_chosen_with_its_flag(tmp_path: Path, capsys):
    """A probe of fused processes (train_speed.py --fuse, here mode eager) prints --fuse for the campaign,
    which takes it."""
    base = _report(tmp_path / "base.json", 8, 1, 1.34)
    fused = _report(tmp_path / "fused.json", 2, 8, 1.0)
    report = json.loads(fused.read_text())
    report["fuse"] = True
    for row in report["rows"]:
        row["mode"] = "eager"
    fused.write_text(json.dumps(report))
    assert pick_layout.main([str(base), str(fused), "--epochs", "200"]) == 0
    out = capsys.readouterr().out.strip()
    assert out == '--max-procs 2 --lanes 8 --fuse --wall-seconds {"2":276}'  # (30 s + 200 x 1.0) x 1.2
    args = gpu_campaign.build_parser().parse_args(["plan.json", *out.split()])
    assert args.fuse and args.lanes == 8 and not args.cuda_graphs


@pytest.mark.parametrize(("lanes_seconds", "written"), [
    (2.0, '--max-procs 8 --lanes 3 --cuda-graphs --wall-seconds {"8":516}\n'), (3.8, "")])
def test_out_holds_the_printed_options_or_nothing(tmp_path: Path, capsys, lanes_seconds: float, written: str):
    """--out, for a call whose stdout goes to a log: the same line as stdout, and an empty file (not a stale
    one) where no layout is chosen."""
    base = _report(tmp_path / "base.json", 8, 1, 1.34)
    lanes = _report(tmp_path / "lanes.json", 8, 3, lanes_seconds)
    out = tmp_path / "flags" / "flags.txt"
    out.parent.mkdir()
    out.write_text("stale\n")
    assert pick_layout.main([str(base), str(lanes), "--out", str(out)]) == 0
    assert out.read_text() == written
    assert capsys.readouterr().out == written
