"""The ``hba-augment`` command: dispatch, ``show``, ``search`` (parse errors, bad input, a tiny real run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from hba_augment.cli import COMMANDS, main
from hba_augment.schedule import Schedule

pytestmark = pytest.mark.usefixtures("torch_single_thread")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def schedule_file(tmp_path: Path) -> Path:
    prob = np.linspace(0.0, 1.0, 3 * 30).reshape(3, 2, 15)
    mag = np.full((3, 2, 15), np.nan)
    for k in (0, 1, 14):
        mag[:, :, k] = 0.1
    mag[:, :, 2:5] = 0.2
    mag[:, :, 8] = 128.0
    mag[:, :, 9] = 4.0
    mag[:, :, 10:14] = 1.5
    path = tmp_path / "s.json"
    Schedule(prob, mag, name="demo", provenance={"model": "wrn-10-1"}).save(path)
    return path


def _exit_code(argv) -> int:
    with pytest.raises(SystemExit) as e:
        main(argv)
    return e.value.code


# ------------------------------------------------------------------------------------------ top level
def test_top_level_help_version_and_unknown(capsys):
    assert _exit_code(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in COMMANDS)
    assert _exit_code(["--version"]) == 0
    assert "hba-augment" in capsys.readouterr().out
    assert _exit_code(["search", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--hparam-lr" in out and "--resume" in out and "hparam_lr=0.03" in out  # the preset table
    assert _exit_code([]) == 2
    assert _exit_code(["frobnicate"]) == 2
    assert "invalid choice" in capsys.readouterr().err


def test_python_dash_m_and_lazy_import():
    # One interpreter (importing torch is slow): the search must not be imported by the package or the
    # command module, then ``python -m hba_augment`` (run as runpy does for -m) dispatches a command.
    code = ("import sys, runpy, hba_augment, hba_augment.cli; "
            "print('search imported:', any(m.startswith('hba_augment.search') for m in sys.modules)); "
            "sys.argv = ['hba_augment', 'show', '--help']; "
            "runpy.run_module('hba_augment', run_name='__main__', alter_sys=True)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "search imported: False" in run.stdout
    assert "usage: hba-augment show" in run.stdout


# ------------------------------------------------------------------------------------------ show
def test_show_prints_table_and_plots(schedule_file: Path, tmp_path: Path, capsys):
    assert main(["show", str(schedule_file), "--epoch", "2"]) == 0
    out = capsys.readouterr().out
    assert "Schedule 'demo': 3 epoch(s)" in out and "entry 2 of 3" in out and "model: wrn-10-1" in out
    assert "Rotate" in out and "Cutout" in out
    png = tmp_path / "plot.png"
    assert main(["show", str(schedule_file), "--epoch", "10", "--total-epochs", "30", "--plot", str(png)]) == 0
    assert "entry 1 of 3" in capsys.readouterr().out
    assert png.read_bytes()[:8] == PNG_MAGIC


def test_show_bad_input(tmp_path: Path, schedule_file: Path, capsys):
    assert main(["show", str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    data = json.loads(schedule_file.read_text())
    data["entries"][0]["prob"][0][0] = 1.5
    bad.write_text(json.dumps(data))
    assert main(["show", str(bad)]) == 2
    assert "outside [0, 1]" in capsys.readouterr().err
    assert main(["show", "no-such-shipped-policy"]) == 2
    assert main(["show", str(schedule_file), "--epoch", "-1"]) == 2
    assert _exit_code(["show"]) == 2


# ------------------------------------------------------------------------------------------ search
@pytest.mark.parametrize("args", [
    [],  # --data-dir and --out are required
    ["--data-dir", "x"],
    ["--data-dir", "x", "--out", "o", "--dataset", "mnist"],
    ["--data-dir", "x", "--out", "o", "--strategy", "everything"],
    ["--data-dir", "x", "--out", "o", "--epochs", "0"],
    ["--data-dir", "x", "--out", "o", "--lr", "fast"],
    ["--data-dir", "x", "--out", "o", "--lr", "-0.1"],
    ["--data-dir", "x", "--out", "o", "--sigma", "nan"],
    ["--data-dir", "x", "--out", "o", "--classes", ","],
    ["--data-dir", "x", "--out", "o", "--lr-milestones", "a,b"],
])
def test_search_parse_errors(args, capsys):
    assert _exit_code(["search", *args]) == 2
    assert "error" in capsys.readouterr().err


def test_search_bad_values(tmp_path: Path, data_dir: Path, capsys):
    base = ["search", "--data-dir", str(data_dir), "--out", str(tmp_path / "o")]
    assert main([*base, "--model", "vgg-16"]) == 2
    assert "Unknown model 'vgg-16'" in capsys.readouterr().err
    assert main(["search", "--data-dir", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o2")]) == 2
    assert "error" in capsys.readouterr().err
    assert main([*base, "--train-size", "8000", "--val-size", "8000"]) == 2
    assert "8068" in capsys.readouterr().err  # the images the shared partial copy holds
    if not torch.cuda.is_available():
        assert main([*base, "--device", "cuda:0"]) == 2
        assert "CUDA is not available" in capsys.readouterr().err
    assert not (tmp_path / "o" / "schedule.json").exists()


def test_search_end_to_end(tmp_path: Path, cifar_dir: Path, capsys):
    data_dir = cifar_dir
    out = tmp_path / "run"
    args = ["search", "--dataset", "cifar10", "--data-dir", str(data_dir), "--model", "wrn-10-1",
            "--epochs", "1", "--train-size", "64", "--val-size", "32", "--batch-size", "32",
            "--seed", "3", "--device", "cpu", "--out", str(out), "--name", "tiny", "--no-progress"]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert str(out / "schedule.json") in captured.out
    assert "epoch 1/1" in captured.err
    schedule = Schedule.load(out / "schedule.json")
    prov = schedule.provenance
    assert schedule.name == "tiny" and schedule.epochs == 1
    assert prov["command"].startswith("hba-augment search --dataset cifar10")
    assert (prov["seed"], prov["train_images"], prov["val_images"], prov["lr"], prov["hparam_lr"]) == (3, 64, 32, 0.05, 0.03)
    assert {p.name for p in out.iterdir()} >= {"schedule.json", "metrics.jsonl", "schedule.png", "checkpoint.pt"}
    # The same folder again without --resume is refused; with --resume the finished search is rewritten as is.
    assert main(args) == 2
    assert "--resume" in capsys.readouterr().err
    assert main([*args, "--resume"]) == 0
    again = Schedule.load(out / "schedule.json")
    assert np.array_equal(again.prob, schedule.prob)
    assert main(["show", str(out / "schedule.json")]) == 0
