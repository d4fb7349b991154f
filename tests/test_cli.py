"""The ``hba-augment`` command: dispatch, ``show``, ``search`` (parse errors, bad input, a tiny real run)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from hba_augment.cli import COMMANDS, main
from hba_augment.schedule import Schedule
from hba_augment.search.cli import default_name

ROOT = Path(__file__).resolve().parents[1]

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


def test_help_version_and_parse_errors_do_not_import_torch():
    # Importing torch takes seconds; help, --version and argument errors must not wait for it. One fresh
    # interpreter runs them all and reports whether torch got imported.
    code = ("import contextlib, io, sys\n"
            "from hba_augment.cli import main\n"
            "for argv in (['--help'], ['--version'], ['frobnicate'], [], ['show', '--help'], ['search', '--help'],\n"
            "             ['search'], ['search', '--data-dir', 'x', '--out', 'o', '--epochs', '0'], ['train', '--help'],\n"
            "             ['train', '--data-dir', 'x']):\n"
            "    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
            "        try:\n"
            "            main(argv)\n"
            "        except SystemExit:\n"
            "            pass\n"
            "    print(argv, 'torch' in sys.modules)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert len(lines) == 10 and all(line.endswith("False") for line in lines), run.stdout


# ------------------------------------------------------------------------------------------ show
def test_show_does_not_import_torch(schedule_file: Path, tmp_path: Path):
    # Printing a JSON file took 3-5 s while torch and torchvision were imported; the schedule's validation
    # reads the torch-free op table (hba_augment._space). One fresh interpreter runs show on a shipped
    # name, a file, a file with --plot (matplotlib, but not torch) and a bad file, and reports torch.
    plot = tmp_path / "p.png"
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    code = ("import contextlib, io, sys\n"
            "from hba_augment.cli import main\n"
            f"for argv in (['show', 'cifar10'], ['show', {str(schedule_file)!r}, '--epoch', '2'],\n"
            f"             ['show', {str(schedule_file)!r}, '--plot', {str(plot)!r}], ['show', {str(bad)!r}]):\n"
            "    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
            "        status = main(argv)\n"
            "    print(status, 'torch' in sys.modules)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["0 False", "0 False", "0 False", "2 False"]
    assert plot.read_bytes().startswith(PNG_MAGIC)


def test_show_prints_table_and_plots(schedule_file: Path, tmp_path: Path, capsys):
    assert main(["show", str(schedule_file), "--epoch", "2"]) == 0
    out = capsys.readouterr().out
    assert "Schedule 'demo': 3 epochs," in out and "entry 2 of 3" in out and "model: wrn-10-1" in out
    assert f"source: {schedule_file}" in out
    assert "Rotate" in out and "Cutout" in out
    png = tmp_path / "plot.png"
    assert main(["show", str(schedule_file), "--epoch", "10", "--total-epochs", "30", "--plot", str(png)]) == 0
    assert "entry 1 of 3" in capsys.readouterr().out
    assert png.read_bytes()[:8] == PNG_MAGIC


def test_show_names_its_source_and_counts_properly(schedule_file: Path, tmp_path: Path, capsys):
    assert main(["show", "cifar10", "--no-provenance"]) == 0
    out = capsys.readouterr().out
    assert "source: " in out and "cifar10.json (shipped with hba_augment)" in out
    three = Schedule.load(schedule_file)
    one = tmp_path / "one.json"
    Schedule(three.prob[:1], three.mag[:1], name="one").save(one)
    assert main(["show", str(one)]) == 0
    out = capsys.readouterr().out
    assert "Schedule 'one': 1 epoch," in out and f"source: {one}" in out


def test_show_plot_creates_its_folder(schedule_file: Path, tmp_path: Path, capsys):
    png = tmp_path / "new" / "deeper" / "plot.png"
    assert main(["show", str(schedule_file), "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == PNG_MAGIC
    assert f"wrote {png}" in capsys.readouterr().out
    # A path that cannot be written is one line on stderr, not a traceback.
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert main(["show", str(schedule_file), "--plot", str(blocker / "plot.png")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hba-augment show: error: cannot write") and err.count("\n") == 1


def test_show_plot_without_matplotlib(schedule_file: Path, tmp_path: Path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if the 'search' extra were not installed
    png = tmp_path / "plot.png"
    assert main(["show", str(schedule_file), "--plot", str(png)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # checked before anything is printed
    assert "matplotlib is not installed" in captured.err and "hba-augment[search]" in captured.err
    assert captured.err.count("\n") == 1 and not png.exists()


def test_show_into_a_closed_pipe_exits_quietly():
    # ``hba-augment show cifar10 | head``: the reader is gone before the table is printed (its end of the
    # pipe is closed before the command starts, so every write fails).
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        run = subprocess.run([sys.executable, "-m", "hba_augment", "show", "cifar10"], stdout=write_end,
                             stderr=subprocess.PIPE, text=True)
    finally:
        os.close(write_end)
    assert run.returncode == 141  # 128 + SIGPIPE, as the shell reports a command killed by the pipe
    assert run.stderr == ""


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


@pytest.mark.parametrize("command", ["search", "train"])
def test_torch_options_parse_alike(command, capsys):
    from hba_augment.search.cli import build_parser as search_parser
    from hba_augment.train.cli import build_parser as train_parser

    parser = {"search": search_parser, "train": train_parser}[command]()
    required = ["--data-dir", "x", "--out", "o", *(["--policy", "cutout"] if command == "train" else [])]
    args = parser.parse_args(required)
    assert (args.device, args.threads) == ("auto", None)
    args = parser.parse_args([*required, "--device", "cpu", "--threads", "3"])
    assert (args.device, args.threads) == ("cpu", 3)
    assert _exit_code([command, *required, "--threads", "0"]) == 2
    assert "argument --threads: must be >= 1, got 0" in capsys.readouterr().err


def test_train_help_states_each_default_once(capsys):
    assert _exit_code(["train", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())  # undo argparse's line wrapping
    assert "(default: None)" not in text and "(default: False)" not in text
    assert re.search(r"\(default: [^)]*\)\s*\(default:", text) is None
    assert "(default: all)" in text and "(default: wrn-40-2)" in text and "(default: 10)" in text


def test_preset_choices_differ_with_a_reason(capsys):
    assert _exit_code(["search", "--help"]) == 0
    search = " ".join(capsys.readouterr().out.split())
    assert _exit_code(["train", "--help"]) == 0
    train = " ".join(capsys.readouterr().out.split())
    assert "--preset {cifar10,svhn,imagenet}" in search and "--preset {cifar10,cifar100,svhn,imagenet}" in train
    assert "There is no cifar100 preset" in search and "Reduced CIFAR-10 only" in search
    assert "cifar100 is a preset here and not in the search command" in train


def test_default_name_is_the_output_folder(tmp_path: Path):
    assert default_name(str(tmp_path / "runs" / "demo"), "cifar10", "wrn-10-1") == "demo"
    assert default_name("/", "cifar10", "wrn-10-1") == "cifar10-wrn-10-1"


@pytest.mark.parametrize("command", ["search", "train"])
def test_missing_data_hints_and_no_empty_folders(command, tmp_path: Path, capsys):
    extra = ["--policy", "none"] if command == "train" else []
    out = tmp_path / "runs" / "new"
    # No data: the hint names the command-line flag, and the folders the run created are removed.
    assert main([command, "--data-dir", str(tmp_path / "nowhere"), "--out", str(out), *extra]) == 2
    err = capsys.readouterr().err
    assert "pass --download to fetch" in err and "download=True" not in err
    assert not (tmp_path / "runs").exists()
    # An image-folder archive read as CIFAR: the hint names --dataset imagefolder.
    archive = tmp_path / "images.tar.gz"
    archive.write_bytes(b"")
    assert main([command, "--data-dir", str(archive), "--out", str(out), *extra]) == 2
    err = capsys.readouterr().err
    assert "read with --dataset imagefolder" in err and "dataset=" not in err
    # The official CIFAR archive: the hint says to pass its folder with --download (nothing is fetched).
    official = tmp_path / "cifar-10-python.tar.gz"
    official.write_bytes(b"")
    assert main([command, "--data-dir", str(official), "--out", str(out), *extra]) == 2
    assert f"folder holding it ({tmp_path}) with --download:" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
    # An output folder that existed before the failed run is kept.
    out.mkdir(parents=True)
    assert main([command, "--data-dir", str(tmp_path / "nowhere"), "--out", str(out), *extra]) == 2
    assert out.is_dir()


def test_messages_name_the_flag_on_the_command_line_and_the_argument_in_python(tmp_path: Path, capsys):
    # One message, two readers: a library caller passes resume=True, a command-line user types --resume.
    from hba_augment._cli_common import option, run_command
    from hba_augment.datasets import load_dataset

    def refuse():
        raise ValueError(f"pass {option('resume', True)}, {option('plot', False)}, "
                         f"{option('dataset', 'imagefolder')}, {option('cutout', 'SIZE', placeholder=True)}, {option('t_val')}")

    assert run_command("prog", refuse, RuntimeError) == 2
    assert capsys.readouterr().err == "prog: error: pass --resume, --no-plot, --dataset imagefolder, --cutout SIZE, --t-val\n"
    with pytest.raises(ValueError, match=r"^pass resume=True, plot=False, dataset='imagefolder', cutout=SIZE, t_val$"):
        refuse()
    # The setting ends with the command: a library call after it reads the Python argument again.
    with pytest.raises(FileNotFoundError, match=r"pass download=True to fetch"):
        load_dataset("cifar10", tmp_path)


def test_settings_in_messages_are_flags_on_the_command_line(tmp_path: Path, data_dir: Path, capsys):
    out = str(tmp_path / "out")
    assert main(["train", "--data-dir", str(data_dir), "--policy", "none", "--eval-split", "val", "--out", out]) == 2
    assert "error: --eval-split val needs --train-size: the validation" in capsys.readouterr().err
    assert main(["search", "--data-dir", str(data_dir), "--lr-schedule", "step", "--lr-milestones", "5,3",
                 "--out", out]) == 2
    assert "error: --lr-milestones must be increasing epochs" in capsys.readouterr().err


def test_an_used_output_folder_names_resume_as_its_caller_spells_it(tmp_path: Path, capsys):
    from hba_augment.train import TrainConfig, train_and_evaluate

    (tmp_path / "result.json").write_text("{}")
    args = ["--data-dir", str(tmp_path / "nowhere"), "--out", str(tmp_path), "--policy", "none"]
    assert main(["train", *args]) == 2
    err = capsys.readouterr().err
    assert "already holds result.json; pass --resume to continue" in err and "resume=True" not in err
    with pytest.raises(ValueError, match=r"already holds result.json; pass resume=True to continue"):
        train_and_evaluate(TrainConfig(data_dir=str(tmp_path / "nowhere"), policy="none"), tmp_path)


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


def test_search_without_matplotlib_keeps_the_search(tmp_path: Path, cifar_dir: Path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if the 'search' extra were not installed
    out = tmp_path / "my-run"
    args = ["search", "--data-dir", str(cifar_dir), "--model", "wrn-10-1", "--epochs", "1", "--train-size", "64",
            "--val-size", "32", "--batch-size", "32", "--device", "cpu", "--out", str(out), "--no-progress"]
    assert main(args) == 0
    err = capsys.readouterr().err
    # Warned before the first epoch, and everything but the plot is written.
    assert "matplotlib is not installed" in err and "hba-augment[search]" in err
    assert err.index("matplotlib is not installed") < err.index("epoch 1/1")
    assert {p.name for p in out.iterdir()} == {"schedule.json", "metrics.jsonl", "checkpoint.pt"}
    # Named after its folder, not after the preset (which is also the shipped schedule's name).
    schedule = Schedule.load(out / "schedule.json")
    assert schedule.name == "my-run"
    # The header counts what the metrics count, with proper plurals.
    steps = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])["train_steps"]
    assert f"1 epoch x {steps} SGD steps (1 iteration of 2 SGD steps + 1 hyperparameter step)" in err
    assert "(1 entry," in err


def _readme_demo_commands() -> list[list[str]]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Learn a schedule", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [shlex.split(line) for line in block.splitlines() if line.strip()]


def test_readme_demo_commands(tmp_path: Path, cifar_dir: Path, monkeypatch, capsys):
    # The README's demo as a new user runs it, scaled down: the search, then a show that writes nothing.
    commands = _readme_demo_commands()
    assert [c[:2] for c in commands] == [[".venv/bin/hba-augment", "search"], [".venv/bin/hba-augment", "show"]]
    small = {"--epochs": "1", "--train-size": "64", "--val-size": "32"}
    monkeypatch.chdir(tmp_path)
    search = [small.get(prev, arg) for prev, arg in zip(["", *commands[0][:-1]], commands[0], strict=True)]
    search = [str(cifar_dir) if arg == "../shared/data" else arg for arg in search[1:]]
    assert main([*search, "--batch-size", "32", "--device", "cpu", "--no-progress"]) == 0
    written = sorted(p.name for p in (tmp_path / "runs" / "demo").iterdir())
    assert main(commands[1][1:]) == 0
    assert "Schedule 'demo'" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "runs" / "demo").iterdir()) == written  # no copy of the plot


def _choices(parser, option: str) -> tuple[str, ...]:
    (action,) = [a for a in parser._actions if option in a.option_strings]
    return tuple(action.choices)


def test_the_command_lines_offer_the_package_s_own_choices():
    """Both parsers spell some choices out, so that --help needs no torch; each must equal the package's own
    list (its one home), or a new choice would be refused at the door, or an old one accepted there and
    refused later."""
    from hba_augment._runner import LR_SCHEDULES
    from hba_augment.datasets import DATASETS
    from hba_augment.search._hyperize import STRATEGIES
    from hba_augment.search.cli import build_parser as search_parser
    from hba_augment.search.config import OBJECTIVES
    from hba_augment.train.cli import build_parser as train_parser
    from hba_augment.train.config import EVAL_PRESETS, EVAL_SPLITS

    search, train = search_parser(), train_parser()
    for parser in (search, train):
        assert set(_choices(parser, "--dataset")) == set(DATASETS)
        assert set(_choices(parser, "--lr-schedule")) == set(LR_SCHEDULES)
    assert set(_choices(search, "--strategy")) == set(STRATEGIES) - {"none"}
    assert _choices(search, "--objective") == (*OBJECTIVES, "population")
    assert set(_choices(train, "--preset")) == set(EVAL_PRESETS)
    assert set(_choices(train, "--eval-split")) == set(EVAL_SPLITS)
