"""The run driver's contract with its workers (``hba_augment._runner``): ``EpochWorker`` and ``set_tick``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from hba_augment import _runner


class CountingWorker:
    """An EpochWorker of two progress units per epoch that records what the driver does to it."""

    def __init__(self) -> None:
        self.epoch = 0
        self.wall_seconds = 0.0
        self.tick: _runner.Tick | None = None
        self.installed: list[bool] = []
        self.saved: list[int] = []

    def set_tick(self, tick: _runner.Tick | None) -> None:
        self.tick = tick
        self.installed.append(tick is not None)

    def run_epoch(self) -> dict[str, Any]:
        for _ in range(2):
            assert self.tick is not None
            self.tick()
        self.epoch += 1
        return {"epoch": self.epoch, "seconds": 0.25}

    def save_checkpoint(self, path: Path) -> None:
        self.saved.append(self.epoch)

    def load_state_dict(self, state: dict[str, Any], path: Path) -> None:
        self.epoch = state["epoch"]


def _run(worker: Any, tmp_path: Path, **kwargs: Any) -> list[str]:
    lines: list[str] = []
    _runner.run_epochs(worker, epochs=3, records=kwargs.pop("records", []), checkpoint=tmp_path / "ck.pt",
                       records_file=tmp_path / "records.jsonl", seconds_key="seconds", ticks_per_epoch=2,
                       set_tick=kwargs.pop("set_tick", getattr(worker, "set_tick", None)), desc="test", unit="u",
                       report=lambda record, remaining: (f"epoch {record['epoch']}, {remaining:g} s left", {}),
                       progress=False, log=lines.append, on_epoch_end=None)
    return lines


def test_run_epochs_drives_an_epoch_worker_through_explicit_callbacks(tmp_path: Path):
    worker = CountingWorker()
    assert isinstance(worker, _runner.EpochWorker)
    records: list[dict[str, Any]] = []
    lines = _run(worker, tmp_path, records=records)
    assert lines == ["epoch 1, 0.5 s left", "epoch 2, 0.25 s left", "epoch 3, 0 s left"]
    assert worker.saved == [1, 2, 3] and worker.wall_seconds == 0.75
    # The bar's callback is installed before the first epoch and taken back after the last one.
    assert worker.installed == [True, False] and worker.tick is None
    written = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert written == records and [r["wall_seconds"] for r in records] == [0.25, 0.5, 0.75]


def test_the_callback_is_taken_back_when_an_epoch_fails(tmp_path: Path):
    worker = CountingWorker()
    worker.run_epoch = lambda: 1 / 0  # type: ignore[method-assign]
    with pytest.raises(ZeroDivisionError):
        _run(worker, tmp_path)
    assert worker.installed == [True, False]


class NoCheckpoint:
    epoch = 0
    wall_seconds = 0.0

    def run_epoch(self) -> dict[str, Any]:
        return {}


def test_a_worker_without_the_protocol_is_refused_at_the_door(tmp_path: Path):
    with pytest.raises(TypeError, match=r"NoCheckpoint lacks \['save_checkpoint', 'load_state_dict'\]"):
        _run(NoCheckpoint(), tmp_path, set_tick=lambda tick: None)
    with pytest.raises(TypeError, match="NoCheckpoint lacks"):
        _runner.start_session(NoCheckpoint(), tmp_path / "ck.pt", resume=False, epochs=1, session_start=0.0,
                              log=print, what="run")


def test_standardisation_is_torchs_mean_and_std_in_any_chunks(cifar_images):
    from hba_augment._runner import standardisation

    images = cifar_images[:50]
    x64 = images.double() / 255
    for chunk in (7, 50, 4096):
        s = standardisation(images, torch.device("cpu"), chunk=chunk)
        assert torch.equal(s.mean, x64.mean(dim=(0, 2, 3)).float())
        assert torch.equal(s.std, x64.std(dim=(0, 2, 3)).clamp_min(1e-3).float())
    out = s(images)
    torch.testing.assert_close(out.mean(dim=(0, 2, 3)), torch.zeros(3), atol=1e-5, rtol=0)
    torch.testing.assert_close(out.std(dim=(0, 2, 3)), torch.ones(3), atol=1e-4, rtol=0)


def test_source_commit_names_the_checkout_and_whether_its_files_differ(tmp_path: Path):
    import shutil
    import subprocess

    if shutil.which("git") is None:
        pytest.skip("needs git")
    assert _runner.source_commit(tmp_path) is None  # not a checkout (an installed wheel)

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                              capture_output=True, text=True, check=True).stdout.strip()

    git("init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    assert _runner.source_commit(tmp_path) is None  # no commit yet
    git("add", "code.py")
    git("commit", "-q", "-m", "one")
    head = git("rev-parse", "--short", "HEAD")
    assert _runner.source_commit(tmp_path) == head
    (tmp_path / "code.py").write_text("x = 2\n")
    assert _runner.source_commit(tmp_path) == f"{head}+modified"
    installed = tmp_path / "venv" / "hba_augment"  # a copy inside another repository, tracked by none
    installed.mkdir(parents=True)
    (installed / "code.py").write_text("x = 1\n")
    assert _runner.source_commit(installed) is None


@pytest.mark.parametrize(("slowdown", "warned"), [(34.0, True), (0.6, False)])
def test_amp_on_a_cpu_whose_bfloat16_is_slow_is_warned_about(tmp_path: Path, monkeypatch, slowdown, warned):
    """An AVX2-only CPU runs bfloat16 matrix products 34x slower than float32 ones (measured): --amp there
    turns a two-hour training into days, so the run says so as it starts."""
    monkeypatch.setattr(_runner, "cpu_bf16_slowdown", lambda: slowdown)
    lines: list[str] = []
    _runner.open_run(tmp_path / "a", {"result": "result.json"}, ("result",), device="cpu", resume=False,
                     command="x", log=lines.append, what="run", amp=True)
    assert any("warning: amp=True on this CPU: a bfloat16 matrix product took 34x" in line for line in lines) is warned
    lines.clear()
    _runner.open_run(tmp_path / "b", {"result": "result.json"}, ("result",), device="cpu", resume=False,
                     command="x", log=lines.append, what="run", amp=False)
    assert lines == []


def test_the_bfloat16_probe_measures_a_ratio_and_gives_the_threads_back():
    """The probe times on one thread (a waking thread pool swamped a small product's time), then restores
    the caller's thread count, which the run it precedes trains with."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        slowdown = _runner.cpu_bf16_slowdown(size=64, repeats=2)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert 0.0 < slowdown < 1e4
