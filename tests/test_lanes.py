"""Runs side by side in one process (``hba_augment._lanes``, ``hba-augment train --seed 0,1``): each run ends
exactly as it would alone, failures stay in their lane, and what cannot share a process is refused."""

from __future__ import annotations

import contextvars
import json
import threading

import pytest
import torch

from hba_augment import _lanes
from hba_augment.train.cli import main
from hba_augment.train.trainer import TrainConfig, train_side_by_side

pytestmark = pytest.mark.usefixtures("torch_single_thread_per_test")

_VAR: contextvars.ContextVar[str] = contextvars.ContextVar("lanes_test", default="unset")


def test_each_lane_reports_its_own_outcome_in_order():
    barrier = threading.Barrier(3, timeout=30)  # every lane must be running at once to pass it

    def ok(i: int) -> tuple[int, str, str]:
        barrier.wait()
        return i, _VAR.get(), threading.current_thread().name

    def fail() -> None:
        barrier.wait()
        raise ValueError("lane 1 failed")

    _VAR.set("caller's")
    outcomes = _lanes.side_by_side([lambda: ok(0), fail, lambda: ok(2)], "cpu")
    assert [o.error for o in outcomes][::2] == [None, None]
    assert isinstance(outcomes[1].error, ValueError) and outcomes[1].value is None
    assert [o.value[:2] for o in outcomes[::2]] == [(0, "caller's"), (2, "caller's")]  # the caller's context
    assert {o.value[2] for o in outcomes[::2]} == {"hba-lane-0", "hba-lane-2"}


def test_one_call_runs_in_the_calling_thread():
    (outcome,) = _lanes.side_by_side([lambda: threading.current_thread().name], "cpu")
    assert outcome == (threading.current_thread().name, None)
    (failed,) = _lanes.side_by_side([lambda: 1 / 0], "cpu")
    assert isinstance(failed.error, ZeroDivisionError)


def test_a_call_that_is_not_callable_is_refused():
    with pytest.raises(TypeError, match=r"calls\[1\] must be callable, got int"):
        _lanes.side_by_side([lambda: 0, 3], "cpu")


def _argv(cifar_dir, out, policy, seed):
    return ["--data-dir", str(cifar_dir), "--model", "wrn-10-1", "--policy", policy, "--epochs", "2",
            "--train-size", "96", "--test-size", "50", "--subset-seed", "0", "--batch-size", "32",
            "--num-workers", "0", "--eval-every", "1", "--seed", seed, "--out", str(out)]


# autoaugment: per-image draws seeded through torch's default generator (the lanes' shared one), no workers.
@pytest.mark.parametrize("policy", ["hba", "autoaugment"])
def test_seeds_side_by_side_end_exactly_as_each_seed_alone(policy, cifar_dir, schedule_path, tmp_path, capsys):
    policy = f"hba:{schedule_path}" if policy == "hba" else policy
    assert main(_argv(cifar_dir, tmp_path / "lanes-{seed}", policy, "3,4")) == 0
    out = capsys.readouterr().out
    assert "seed 3: test error" in out and "seed 4: test error" in out
    for seed in (3, 4):
        assert main(_argv(cifar_dir, tmp_path / f"alone-{seed}", policy, str(seed))) == 0
        lane = json.loads((tmp_path / f"lanes-{seed}" / "result.json").read_text())
        alone = json.loads((tmp_path / f"alone-{seed}" / "result.json").read_text())
        keys = ("train_loss", "train_acc", "test_loss", "test_error")
        assert [[h[k] for k in keys] for h in lane["history"]] == [[h[k] for k in keys] for h in alone["history"]]
        assert lane["config"]["seed"] == seed
    a, b = (json.loads((tmp_path / f"lanes-{s}" / "result.json").read_text())["history"] for s in (3, 4))
    assert a[0]["train_loss"] != b[0]["train_loss"]  # two different runs, not one run twice


def test_several_seeds_need_a_folder_each(cifar_dir, tmp_path, capsys):
    assert main(_argv(cifar_dir, tmp_path / "same", "none", "0,1")) == 2
    assert "must contain {seed}" in capsys.readouterr().err
    assert not (tmp_path / "same").exists()


def test_repeated_seeds_are_refused_by_the_parser(cifar_dir, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(_argv(cifar_dir, tmp_path / "r-{seed}", "none", "1,1"))
    assert "seeds must differ" in capsys.readouterr().err


def _config(cifar_dir, **kw):
    values = {"dataset": "cifar10", "data_dir": str(cifar_dir), "model": "wrn-10-1", "policy": "none", "epochs": 1,
              "train_size": 64, "test_size": 20, "batch_size": 32}
    return TrainConfig.from_preset(**{**values, **kw})


@pytest.mark.parametrize(("kw", "message"), [
    ({"model": "shake-shake-8-2x4d"}, "draw from torch's default generator"),
    ({"compile": True}, "trains one run per process"),
])
def test_what_cannot_share_a_process_is_refused(kw, message, cifar_dir, tmp_path):
    configs = [_config(cifar_dir, seed=s, **kw) for s in (0, 1)]
    with pytest.raises(ValueError, match=message):
        train_side_by_side(configs, [tmp_path / "a", tmp_path / "b"])


def test_folders_must_be_one_per_run(cifar_dir, tmp_path):
    configs = [_config(cifar_dir, seed=s) for s in (0, 1)]
    with pytest.raises(ValueError, match="its own output folder"):
        train_side_by_side(configs, [tmp_path / "a", tmp_path / "a"])
    with pytest.raises(ValueError, match="one output folder per run"):
        train_side_by_side(configs, [tmp_path / "a"])


def test_a_failing_run_leaves_the_others_finished(cifar_dir, tmp_path, capsys):
    (tmp_path / "bad-1").mkdir()
    (tmp_path / "bad-1" / "result.json").write_text("{}")  # a used folder: refused without --resume
    assert main(_argv(cifar_dir, tmp_path / "bad-{seed}", "none", "0,1")) == 2
    captured = capsys.readouterr()
    assert "seed 1: ValueError" in captured.err and "--resume" in captured.err
    assert "seed 0: test error" in captured.out
    assert json.loads((tmp_path / "bad-0" / "result.json").read_text())["config"]["seed"] == 0


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_graph_lanes_end_as_each_alone(cifar_dir, schedule_path, tmp_path, capsys):
    """Two captured runs side by side on a GPU: each equals its run alone up to cuDNN's nondeterminism."""
    base = [*_argv(cifar_dir, tmp_path / "g-{seed}", f"hba:{schedule_path}", "0,1"), "--device", "cuda",
            "--cuda-graphs", "--epochs", "6"]
    assert main(base) == 0
    for seed in (0, 1):
        alone = [*_argv(cifar_dir, tmp_path / f"alone-{seed}", f"hba:{schedule_path}", str(seed)), "--device",
                 "cuda", "--cuda-graphs", "--epochs", "6"]
        assert main(alone) == 0
        lane = json.loads((tmp_path / f"g-{seed}" / "result.json").read_text())["history"]
        ref = json.loads((tmp_path / f"alone-{seed}" / "result.json").read_text())["history"]
        assert lane[0]["train_loss"] == pytest.approx(ref[0]["train_loss"], rel=1e-2)
        assert abs(lane[-1]["test_error"] - ref[-1]["test_error"]) < 10
