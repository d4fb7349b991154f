"""The one run driver of both commands (``hba_augment._runner.drive``) and its contract, ``DrivenWorker``.

A renamed hook or a missing counter must stop a run at the door, before its first epoch: the workers of
both commands are checked against the contract here, and a fake worker shows what the driver does.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from hba_augment import _runner
from hba_augment.datasets import ImageData


def _images(n: int, seed: int) -> ImageData:
    g = torch.Generator().manual_seed(seed)
    return ImageData(torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=g),
                     torch.arange(n) % 10, [str(c) for c in range(10)])


@pytest.mark.parametrize("command", ["search", "train"])
def test_both_commands_workers_satisfy_the_driver_contract(command: str):
    if command == "search":
        from hba_augment.search.loop import SearchConfig, _Search

        config = SearchConfig.from_preset("cifar10", dataset="cifar10", data_dir="unused", model="wrn-10-1", epochs=1,
                                          train_size=8, val_size=4, batch_size=4)
        worker: Any = _Search(config, _images(8, 0), _images(4, 1), log=lambda m: None)
    else:
        from hba_augment.train.trainer import TrainConfig, _Trainer

        config = TrainConfig.from_preset(data_dir="unused", model="wrn-10-1", policy="none", epochs=1, batch_size=4)
        worker = _Trainer(config, _images(8, 0), _images(4, 1), log=lambda m: None)
    assert isinstance(worker, _runner.DrivenWorker)
    # The counters every checkpoint keeps come from the shared set-up.
    assert isinstance(worker, _runner.WorkerBase)
    assert (worker.epoch, worker.step, worker.wall_seconds, worker.sessions, worker.records) == (0, 0, 0.0, 1, [])
    assert worker.ticks_per_epoch == (worker.outer_per_epoch if command == "search" else worker.steps_per_epoch)


@dataclasses.dataclass
class _Config:
    epochs: int = 3
    device: str = "cpu"
    amp: bool = False
    validated: bool = False

    def validate(self) -> None:
        self.validated = True

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class _Fake(_runner.WorkerBase):
    """All of a DrivenWorker but its progress hook: two units per epoch, a checkpoint of counters and records."""

    def __init__(self, config: _Config, train: Any, held_out: Any, log: Any) -> None:
        super().__init__(config, log)
        self.data, self.fingerprint = (train, held_out), "fake"
        self.ticks_per_epoch = 2
        self.tick: _runner.Tick | None = None
        self.closed = False

    def run_epoch(self) -> dict[str, Any]:
        for _ in range(self.ticks_per_epoch):
            assert self.tick is not None
            self.tick()
        self.epoch += 1
        self.step += 5
        return {"epoch": self.epoch, "seconds": 0.5}

    def state_dict(self) -> dict[str, Any]:
        return _runner.checkpoint_state(self, "fake", 1, records=list(self.records))

    def load_state_dict(self, state: dict[str, Any], path: Path) -> None:
        _runner.restore_counters(self, state)
        self.records = list(state["records"])

    def close(self) -> None:
        self.closed = True


class FakeWorker(_Fake):
    def set_tick(self, tick: _runner.Tick | None) -> None:
        self.tick = tick


class RenamedHook(_Fake):
    """A worker whose progress hook was renamed: the driver could never install the bar's callback."""

    def set_progress(self, tick: _runner.Tick | None) -> None:
        self.tick = tick


def _drive(config: _Config, out: Path, worker: type[_Fake] = FakeWorker, **kwargs: Any) -> tuple[Any, list[str]]:
    lines: list[str] = []
    result = _runner.drive(
        config, out, lambda train, held_out, log: worker(config, train, held_out, log), what="fake run", file_names={"records": "records.jsonl", "checkpoint": "ck.pt"},
        guarded=("checkpoint",), records_file="records", load=lambda: ("train", "held out", "from the test"),
        introduce=lambda w: f"fake: {w.ticks_per_epoch} ticks an epoch",
        report=lambda record, remaining: (f"epoch {record['epoch']}, {remaining:g} s left", {}),
        seconds_key="seconds", desc="fake", unit="tick", command="fake --run", progress=False, log=lines.append,
        on_epoch_end=None, **{"resume": False, **kwargs},
    )
    return result, lines


def test_drive_runs_the_shared_skeleton_around_a_worker(tmp_path: Path):
    config = _Config()
    (worker, out, files, command, log), lines = _drive(config, tmp_path, notes=["warning: a note"])
    assert config.validated and out == tmp_path and command == "fake --run" and log == lines.append
    assert files == {"records": tmp_path / "records.jsonl", "checkpoint": tmp_path / "ck.pt"}
    assert worker.data == ("train", "held out") and worker.data_source == "from the test"
    assert lines == ["warning: a note", "fake: 2 ticks an epoch", "epoch 1, 1 s left", "epoch 2, 0.5 s left",
                     "epoch 3, 0 s left"]
    assert worker.closed and worker.tick is None and (worker.epoch, worker.step) == (3, 15)
    written = [json.loads(line) for line in files["records"].read_text().splitlines()]
    assert written == worker.records and [r["epoch"] for r in written] == [1, 2, 3]

    # The folder is refused without resume; with it, the checkpoint's counters go on.
    with pytest.raises(ValueError, match=r"already holds ck\.pt"):
        _drive(_Config(epochs=5), tmp_path)
    (resumed, *_), lines = _drive(_Config(epochs=5), tmp_path, resume=True)
    assert lines[0] == f"resuming {tmp_path / 'ck.pt'} after epoch 3 of 5"
    assert (resumed.epoch, resumed.step, resumed.sessions, len(resumed.records)) == (5, 25, 2, 5)


def test_a_renamed_hook_or_missing_counter_is_refused_before_the_first_epoch(tmp_path: Path):
    class WithoutCounter(FakeWorker):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            del self.wall_seconds

    for worker, missing in ((RenamedHook, "['set_tick']"), (WithoutCounter, "['wall_seconds']")):
        with pytest.raises(TypeError, match=re.escape(f"needs a DrivenWorker; {worker.__name__} lacks {missing}")):
            _drive(_Config(), tmp_path / missing, worker=worker)
        assert not (tmp_path / missing / "ck.pt").exists()
