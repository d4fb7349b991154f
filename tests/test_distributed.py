"""Runs on several processes (torchrun, gloo on the CPU): the splitting rules, and ``train`` under DDP."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from hba_augment import _distributed
from hba_augment._distributed import DistContext, eval_batches, shard
from hba_augment.schedule import Schedule
from hba_augment.train.trainer import TrainConfig, _Trainer, load_data

# Per test: the in-process evaluation below sets torch's thread count.
pytestmark = pytest.mark.usefixtures("torch_single_thread_per_test")


# ------------------------------------------------------------------------------------------- splitting
@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize(("n", "batch"), [(1, 1), (7, 3), (101, 20), (100, 20), (5, 500)])
def test_eval_batches_cover_every_image_once_in_its_single_process_batch(world, n, batch):
    single = eval_batches(n, batch, _distributed.SINGLE)
    assert single == [(s, min(s + batch, n)) for s in range(0, n, batch)]
    shares = [eval_batches(n, batch, DistContext(rank=r, world_size=world)) for r in range(world)]
    assert sorted(b for share in shares for b in share) == single


@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("size", [6, 7, 64, 65])
def test_shards_partition_a_batch(world, size):
    batch = torch.randperm(100)[:size]
    parts = [shard(batch, DistContext(rank=r, world_size=world)) for r in range(world)]
    assert torch.equal(torch.cat(parts), batch)
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_rank_zero_keeps_the_seed_and_other_ranks_differ():
    assert _distributed.rank_seed(7, 0) == 7
    assert len({_distributed.rank_seed(7, r) for r in range(8)}) == 8


def test_session_without_torchrun_sets_nothing_up(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with _distributed.session("cpu") as (ctx, device):
        assert ctx == _distributed.SINGLE and device == "cpu"
        assert not torch.distributed.is_initialized()


@pytest.mark.parametrize("timeout", [0, -1.0, float("nan"), float("inf"), True, "60"])
def test_session_rejects_a_bad_timeout(timeout):
    with pytest.raises(ValueError, match="timeout must be a number of seconds > 0"), _distributed.session(
            "cpu", timeout=timeout):
        pass


def test_a_fixed_gpu_index_is_refused_under_torchrun():
    with pytest.raises(ValueError, match="'cuda:1' names one GPU"):
        _distributed._device_for("cuda:1", local_rank=0)
    assert _distributed._device_for("cuda", local_rank=1) == torch.device("cuda", 1)
    assert _distributed._device_for("cpu", local_rank=1) == torch.device("cpu")


# ---------------------------------------------------------------------------------------------- torchrun
def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(nproc: int, args: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
                "--master-addr", "127.0.0.1", "--master-port", str(_free_port())]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([*torchrun, "-m", "hba_augment", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


# HBAPolicy (its epoch set on every rank), 2 epochs; 130 training images in batches of 64: the trailing 2
# would leave each rank 1 image and are dropped.
TRAIN = {"model": "wrn-10-1", "policy": "hba:cifar10", "epochs": 2, "train_size": 130, "test_size": 101,
         "batch_size": 64, "eval_batch_size": 20, "num_workers": 0}


@pytest.mark.slow
def test_train_on_two_processes_tests_like_one_process(cifar_dir: Path, tmp_path: Path):
    # 101 test images in batches of 20: rank 0 tests 3 batches (60 images), rank 1 3 (41, the last of 1).
    out = tmp_path / "ddp"
    args = ["train", "--data-dir", str(cifar_dir), "--threads", "1", "--out", str(out)]
    for key, value in TRAIN.items():
        args += [f"--{key.replace('_', '-')}", str(value)]
    run = _torchrun(2, args)
    assert run.returncode == 0, run.stderr[-3000:]
    # Rank 0 alone writes and reports.
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint.pt", "history.jsonl", "result.json"]
    assert run.stdout.count("test error") == 1 and run.stderr.count("wrote ") == 1
    assert len((out / "history.jsonl").read_text().splitlines()) == 2
    result = json.loads((out / "result.json").read_text())
    assert result["config"]["processes"] == 2 and result["test_images"] == 101 and result["train_images"] == 130
    assert [e["epoch"] for e in result["history"]] == [1, 2]
    state = torch.load(out / "checkpoint.pt", map_location="cpu", weights_only=True)
    assert state["world_size"] == 2 and len(state["rank_rng"]) == 2 and state["step"] == 2 * 2
    # Each rank drew its own augmentations; both walked the same data order.
    first, second = state["rank_rng"]
    assert torch.equal(first["data"], second["data"]) and not torch.equal(first["augment"], second["augment"])

    # The checkpoint tested by one process: the same error (same batches, same model), the same loss up to
    # the order of the float64 sums.
    config = TrainConfig.from_preset(data_dir=str(cifar_dir), **TRAIN)
    train, test, _ = load_data(config)
    trainer = _Trainer(config, train, test, log=lambda m: None, dist_context=_distributed.SINGLE)
    trainer.model.load_state_dict(state["model"])
    loss, error = trainer.evaluate()
    assert error == result["test_error"]
    assert loss == pytest.approx(result["test_loss"], rel=1e-9)

    # Rank 0 alone looks at the folder; every rank stops with its verdict (none waits for the others: the
    # timeout below is far shorter than the ranks' 1800 s). torchrun stops the other ranks as soon as the first
    # one exits, so how many ranks print the verdict, and with which exit status each is reported (2, or a
    # signal while a rank is torn down), is a race; that the run stops, with the verdict said, is not.
    again = _torchrun(2, args, timeout=120)
    assert again.returncode != 0
    assert "hba-augment train: error: " in again.stderr
    assert "already holds result.json, checkpoint.pt; pass --resume to continue" in again.stderr
    assert "lost the other processes" not in again.stderr


SEARCH = ["--model", "wrn-10-1", "--epochs", "2", "--train-size", "130", "--val-size", "64", "--batch-size", "32",
          "--threads", "1", "--no-plot", "--no-progress"]

# Runs the search like the command does, but rank 0 stops dead once epoch 1's checkpoint is written: a
# lost process (torchrun then stops the other one, which waits in epoch 2's first collective).
_STOPPING_SEARCH = """
import os, sys
import torch
from hba_augment import _distributed
from hba_augment.search.loop import SearchConfig, run_search

torch.set_num_threads(1)
data_dir, out = sys.argv[1:3]

def stop(record):
    if _distributed.current().is_main and record["epoch"] == 0:
        os._exit(17)

with _distributed.session("cpu") as (ctx, device):
    config = SearchConfig.from_preset(None, dataset="cifar10", data_dir=data_dir, model="wrn-10-1", epochs=2,
                                      train_size=130, val_size=64, batch_size=32, device=device, name="stopped")
    run_search(config, out, progress=False, plot=False, on_epoch_end=stop)
"""


@pytest.mark.slow
def test_search_on_two_processes_agrees_across_ranks_and_resumes_exactly(cifar_dir: Path, tmp_path: Path):
    # 130 training images in batches of 32: the trailing 2 would leave each rank 1 image and are dropped.
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    run = _torchrun(2, ["search", "--data-dir", str(cifar_dir), *SEARCH, "--out", str(whole)])
    assert run.returncode == 0, run.stderr[-3000:]
    assert sorted(p.name for p in whole.iterdir()) == ["checkpoint.pt", "metrics.jsonl", "schedule.json"]
    assert run.stdout.strip() == str(whole / "schedule.json") and run.stderr.count("wrote ") == 1
    metrics = [json.loads(line) for line in (whole / "metrics.jsonl").read_text().splitlines()]
    assert [m["epoch"] for m in metrics] == [0, 1] and [m["train_steps"] for m in metrics] == [4, 8]
    # Every rank hashed its lambda, weights and batch-norm statistics after every epoch: all equal.
    for m in metrics:
        assert m["processes"] == 2 and len(m["rank_hashes"]) == 2 and len(set(m["rank_hashes"])) == 1

    script = tmp_path / "stopping_search.py"
    script.write_text(_STOPPING_SEARCH)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr",
                "127.0.0.1", "--master-port", str(_free_port())]
    stopped = subprocess.run([*torchrun, str(script), str(cifar_dir), str(cut)], capture_output=True, text=True,
                             env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)
    assert stopped.returncode != 0
    # Nothing half-written: the checkpoint of epoch 1, its metrics, no schedule.
    assert sorted(p.name for p in cut.iterdir()) == ["checkpoint.pt", "metrics.jsonl"]
    assert len((cut / "metrics.jsonl").read_text().splitlines()) == 1

    resumed = _torchrun(2, ["search", "--data-dir", str(cifar_dir), *SEARCH, "--out", str(cut), "--resume"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming" in resumed.stderr
    a = torch.load(whole / "checkpoint.pt", map_location="cpu", weights_only=True)
    b = torch.load(cut / "checkpoint.pt", map_location="cpu", weights_only=True)
    assert torch.equal(a["hparams"], b["hparams"])
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert b["sessions"] == 2
    again = [json.loads(line) for line in (cut / "metrics.jsonl").read_text().splitlines()]
    assert [m["rank_hashes"] for m in again] == [m["rank_hashes"] for m in metrics]
    first, second = (Schedule.load(d / "schedule.json") for d in (whole, cut))
    assert np.array_equal(first.prob, second.prob) and np.array_equal(first.mag, second.mag, equal_nan=True)


# Rank 1 leaves without taking part in rank 0's all-reduce (as a crashed or killed process would).
_LOSING_A_RANK = """
import sys
import torch
from hba_augment import _distributed
from hba_augment._cli_common import run_command

def body():
    with _distributed.session("cpu", timeout=float(sys.argv[1])) as (ctx, device):
        if ctx.rank == 0:
            torch.distributed.all_reduce(torch.ones(1))
    return ""

sys.exit(run_command("lost", body, ZeroDivisionError))
"""


@pytest.mark.slow
def test_a_lost_rank_fails_loudly_instead_of_hanging(tmp_path: Path):
    script = tmp_path / "losing_a_rank.py"
    script.write_text(_LOSING_A_RANK)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr",
                "127.0.0.1", "--master-port", str(_free_port())]
    run = subprocess.run([*torchrun, str(script), "30"], capture_output=True, text=True,
                         env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=120)
    assert run.returncode != 0
    assert "lost: error: the distributed run failed: rank 0 of 2: lost the other processes" in run.stderr
    assert "exitcode  : 3" in run.stderr  # torchrun's report of rank 0's exit status


def test_resuming_with_another_number_of_processes_is_refused(cifar_dir: Path, tmp_path: Path):
    config = TrainConfig.from_preset(data_dir=str(cifar_dir), **TRAIN)
    train, test, _ = load_data(config)
    trainer = _Trainer(config, train, test, log=lambda m: None, dist_context=_distributed.SINGLE)
    state = trainer.state_dict()
    state["world_size"] = 2
    with pytest.raises(ValueError, match="written by a run of 2 process"):
        trainer.load_state_dict(state, tmp_path / "checkpoint.pt")


def test_batches_too_small_for_the_processes_are_refused(cifar_dir: Path):
    from hba_augment.search.loop import SearchConfig, _Search

    two = DistContext(rank=0, world_size=2)
    config = TrainConfig.from_preset(data_dir=str(cifar_dir), **{**TRAIN, "batch_size": 3})
    train, test, _ = load_data(config)
    with pytest.raises(ValueError, match="batch_size 3 is too small for 2 processes"):
        _Trainer(config, train, test, log=lambda m: None, dist_context=two)
    search = SearchConfig.from_preset(None, data_dir=str(cifar_dir), model="wrn-10-1", epochs=1, train_size=64,
                                      val_size=3, batch_size=32)
    with pytest.raises(ValueError, match="batches of 3 images are too small for 2 processes"):
        _Search(search, train, test.subset(torch.arange(3)), log=lambda m: None, dist_context=two)
