"""--compile (issue 21, section 2): train and search steps go through torch.compile; testing, the hyperparameter
steps and checkpoints keep the plain network. torch.compile itself is replaced by a recorder here: compiling
on this 2-core CPU would take minutes, and its speed is a GPU question (benchmarks/)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from hba_augment.datasets import load_dataset, reduced_split
from hba_augment.search import loop
from hba_augment.search.cli import build_parser as search_parser
from hba_augment.search.cli import config_from_args
from hba_augment.train.trainer import TrainConfig, train_and_evaluate

pytestmark = pytest.mark.usefixtures("torch_single_thread")


@pytest.fixture
def compiled(monkeypatch):
    seen = []

    def record(module, *args, **kwargs):
        seen.append(module)
        return module

    monkeypatch.setattr(torch, "compile", record)
    return seen


def test_training_steps_are_compiled(cifar_dir: Path, tmp_path: Path, compiled):
    config = TrainConfig.from_preset(data_dir=str(cifar_dir), model="wrn-10-1", policy="none", epochs=1,
                                     train_size=64, test_size=32, batch_size=32, num_workers=0, compile=True)
    result = train_and_evaluate(config, tmp_path, progress=False, log=lambda m: None)
    assert len(compiled) == 1 and isinstance(compiled[0], torch.nn.Module)
    assert result.summary["config"]["compile"] is True


def test_search_steps_are_compiled(cifar_dir: Path, tmp_path: Path, compiled):
    data = reduced_split(load_dataset("cifar10", cifar_dir), 64, 32, seed=0)
    config = loop.SearchConfig.from_preset("cifar10", dataset="cifar10", data_dir="unused", model="wrn-10-1", epochs=1,
                                           train_size=64, val_size=32, batch_size=32, compile=True)
    result = loop.run_search(config, tmp_path, data=data, progress=False, plot=False, log=lambda m: None)
    assert len(compiled) == 1 and isinstance(compiled[0], loop.HyperModel)
    assert result.schedule.provenance["compile"] is True
    args = search_parser().parse_args(["--data-dir", "d", "--out", "o", "--compile"])
    assert config_from_args(args, "cpu").compile is True
    assert config_from_args(search_parser().parse_args(["--data-dir", "d", "--out", "o"]), "cpu").compile is False
