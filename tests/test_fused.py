"""Fused networks (``hba_augment.models.fused``) and fused training (``hba-augment train --fuse``): each network
of the stack computes, trains and is saved as it would be alone."""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import mid_magnitudes

from hba_augment.functional._table import NUM_OPS
from hba_augment.models import create_model
from hba_augment.models.fused import FusedWRN
from hba_augment.schedule import Schedule
from hba_augment.train.cli import main
from hba_augment.train.fused import train_fused
from hba_augment.train.trainer import TrainConfig, train_and_evaluate

pytestmark = pytest.mark.usefixtures("torch_single_thread_per_test")


def _wrns(seeds, name="wrn-10-1"):
    out = []
    for seed in seeds:
        torch.manual_seed(seed)
        out.append(create_model(name, 10))
    return out


@pytest.mark.parametrize("channels_last", [False, True])
def test_each_network_of_the_stack_computes_and_learns_as_alone(cifar_images, channels_last):
    """Logits, gradients after a backward pass of the summed mean losses, and the batch-norm statistics."""
    alone, fused = _wrns([0, 1, 2]), FusedWRN(_wrns([0, 1, 2]))
    images = cifar_images[:24].float().div(255).view(3, 8, 3, 32, 32)
    labels = torch.arange(24).remainder(10).view(3, 8)
    if channels_last:
        fused = fused.to(memory_format=torch.channels_last)
        images = images.flatten(0, 1).contiguous(memory_format=torch.channels_last).view(3, 8, 3, 32, 32)
    logits = fused(images)
    F.cross_entropy(logits.transpose(1, 2), labels, reduction="none").mean(1).sum().backward()
    for k, net in enumerate(alone):
        out = net(images[k])
        F.cross_entropy(out, labels[k]).backward()
        torch.testing.assert_close(logits[k], out, atol=1e-5, rtol=1e-4)
        state = fused.member_state_dict(k)
        for name, value in net.state_dict().items():
            torch.testing.assert_close(state[name], value, atol=1e-6, rtol=1e-5)
        grads = dict(zip(fused.parameter_names(), (p.grad for p in fused.parameters()), strict=True))
        for name, p in net.named_parameters():
            torch.testing.assert_close(fused.member_view(name, grads[name], k), p.grad, atol=1e-5, rtol=1e-4)


def test_a_network_loaded_into_the_stack_is_that_network():
    fused = FusedWRN(_wrns([0, 1]))
    other = _wrns([7])[0]
    fused.load_member_state_dict(1, other.state_dict())
    assert all(torch.equal(fused.member_state_dict(1)[k], v) for k, v in other.state_dict().items())
    assert not torch.equal(fused.member_state_dict(0)["conv1.weight"], other.state_dict()["conv1.weight"])
    with pytest.raises(ValueError, match="missing"):
        fused.load_member_state_dict(0, {"conv1.weight": other.conv1.weight})
    with pytest.raises(IndexError):
        fused.member_state_dict(2)


def test_fusing_refuses_what_it_would_mix():
    with pytest.raises(TypeError, match="WideResNets only"):
        FusedWRN([create_model("resnet-18", 10)])
    with pytest.raises(ValueError, match="one architecture"):
        FusedWRN([create_model("wrn-10-1", 10), create_model("wrn-16-1", 10)])
    with pytest.raises(ValueError, match="at least one"):
        FusedWRN([])
    with pytest.raises(ValueError, match=r"takes \(K=2, B, C, H, W\)"):
        FusedWRN(_wrns([0, 1]))(torch.zeros(3, 2, 3, 32, 32))


def _argv(cifar_dir, out, policy, seeds, *extra):
    return ["--data-dir", str(cifar_dir), "--model", "wrn-10-1", "--policy", policy, "--epochs", "2",
            "--train-size", "96", "--test-size", "50", "--subset-seed", "0", "--batch-size", "32",
            "--eval-every", "1", "--seed", seeds, "--out", str(out), *extra]


def _history(path):
    keys = ("train_loss", "train_acc", "test_loss", "test_error")
    return np.array([[h[k] for k in keys] for h in json.loads((path / "result.json").read_text())["history"]])


def test_fused_runs_without_random_augmentation_train_as_each_alone(cifar_dir, tmp_path, capsys):
    """Policy none: no random draws, so each fused run must end as its seed alone (same initial weights, same
    data order), up to the order of sums; and its checkpoint is a plain run's."""
    assert main(_argv(cifar_dir, tmp_path / "fused-{seed}", "none", "3,4", "--fuse")) == 0
    assert "seed 3: test error" in capsys.readouterr().out
    for seed in (3, 4):
        assert main(_argv(cifar_dir, tmp_path / f"alone-{seed}", "none", str(seed))) == 0
        fused, alone = _history(tmp_path / f"fused-{seed}"), _history(tmp_path / f"alone-{seed}")
        np.testing.assert_allclose(fused[:, [0, 2]], alone[:, [0, 2]], rtol=2e-4)  # training and test losses
        # Accuracy and test error: a rounding difference may move one image across a decision (96 and 50 here).
        assert np.abs(fused[:, 1] - alone[:, 1]).max() <= 1 / 96 + 1e-9
        assert np.abs(fused[:, 3] - alone[:, 3]).max() <= 100 / 50 + 1e-9
        result = json.loads((tmp_path / f"fused-{seed}" / "result.json").read_text())
        assert result["config"]["seed"] == seed and result["config"]["fused_seeds"] == [3, 4]
        assert json.loads((tmp_path / f"alone-{seed}" / "result.json").read_text())["config"]["fused_seeds"] is None
        a = torch.load(tmp_path / f"fused-{seed}" / "checkpoint.pt", weights_only=True)
        b = torch.load(tmp_path / f"alone-{seed}" / "checkpoint.pt", weights_only=True)
        assert a["model"].keys() == b["model"].keys()
        assert a["optimizer"]["state"].keys() == b["optimizer"]["state"].keys()
        weights = [(a["model"][k], v) for k, v in b["model"].items() if v.is_floating_point()]
        momenta = [(a["optimizer"]["state"][j]["momentum_buffer"], s["momentum_buffer"])
                   for j, s in b["optimizer"]["state"].items()]
        # Rounding differences grow fast at this learning rate and batch: the same run alone in NCHW and in
        # channels-last differs by 1.4e-3 of the weights' norm after these 6 steps (fused: 2.5e-5 after 1
        # epoch, 5e-4 after 2), and its momenta, gradients of those weights, by about 0.1 after 1 epoch
        # (fused: 0.02); another network's slice, data order or update differs by O(1).
        for pairs, tolerance in ((weights, 5e-3), (momenta, 0.3)):
            diff = sum(float((x - y).square().sum()) for x, y in pairs) ** 0.5
            assert diff <= tolerance * sum(float(y.square().sum()) for _, y in pairs) ** 0.5
    assert not np.allclose(_history(tmp_path / "fused-3"), _history(tmp_path / "fused-4"))


def test_fused_runs_resume_together_as_if_uninterrupted(cifar_dir, schedule_path, tmp_path):
    """An hba: policy (the shared augmentation stream): two epochs straight equal two interrupted after the
    first and resumed, bit for bit on the CPU; only the same group resumes its checkpoints."""
    configs = [_config(cifar_dir, s, policy=f"hba:{schedule_path}", epochs=2) for s in (0, 1)]
    once = train_fused(configs, [tmp_path / "once-0", tmp_path / "once-1"])

    class Stop(Exception):
        pass

    def stop(records):
        raise Stop

    split = [tmp_path / "split-0", tmp_path / "split-1"]
    with pytest.raises(Stop):
        train_fused(configs, split, on_epoch_end=stop)
    resumed = train_fused(configs, split, resume=True)
    keys = ("epoch", "train_loss", "train_acc", "test_loss", "test_error")
    for a, b in zip(once, resumed, strict=True):
        assert [[h.get(k) for k in keys] for h in a.history] == [[h.get(k) for k in keys] for h in b.history]
        assert b.summary["sessions"] == 2
    assert once[0].history[-1]["train_loss"] != once[1].history[-1]["train_loss"]
    # The runs share their augmentation stream: a run of the group resumes neither alone nor in another group,
    # and a run alone's checkpoint does not resume fused.
    with pytest.raises(Stop):
        train_fused(configs, [tmp_path / "cut-0", tmp_path / "cut-1"], on_epoch_end=stop)
    with pytest.raises(ValueError, match=r"alone: fused runs of the seeds \[0, 1\] wrote it"):
        train_and_evaluate(configs[0], tmp_path / "cut-0", resume=True)
    other = [configs[0], _config(cifar_dir, 2, policy=f"hba:{schedule_path}", epochs=2)]
    shutil.copytree(tmp_path / "cut-1", tmp_path / "cut-2")
    with pytest.raises(ValueError, match=r"with the fused seeds \[0, 2\]: fused runs of the seeds \[0, 1\]"):
        train_fused(other, [tmp_path / "cut-0", tmp_path / "cut-2"], resume=True)
    with pytest.raises(Stop):
        train_and_evaluate(configs[0], tmp_path / "alone-0", on_epoch_end=stop)
    with pytest.raises(Stop):
        train_and_evaluate(configs[1], tmp_path / "alone-1", on_epoch_end=stop)
    with pytest.raises(ValueError, match="a run alone wrote it"):
        train_fused(configs, [tmp_path / "alone-0", tmp_path / "alone-1"], resume=True)


def _config(cifar_dir, seed, **overrides):
    values = {"dataset": "cifar10", "data_dir": str(cifar_dir), "model": "wrn-10-1", "policy": "none", "epochs": 1,
              "train_size": 32, "test_size": 10, "subset_seed": 0, "batch_size": 16, "seed": seed, **overrides}
    return TrainConfig.from_preset("cifar10", **values)


def test_fused_runs_with_cuda_graphs_train_as_without(cifar_dir, tmp_path):
    """On the CPU ``cuda_graphs`` runs the same static-policy step uncaptured, with the fused SGD kernel: the
    runs end as without it, up to that kernel's rounding; the static policy follows the schedule (every op at
    0.5 in epoch 0, none in epoch 1)."""
    path = tmp_path / "two.json"
    prob = np.stack([np.full((2, NUM_OPS), 0.5), np.zeros((2, NUM_OPS))])
    Schedule(prob, np.stack([mid_magnitudes()] * 2), name="two").save(path)
    configs = [_config(cifar_dir, s, policy=f"hba:{path}", epochs=2) for s in (0, 1)]
    plain = train_fused(configs, [tmp_path / "a0", tmp_path / "a1"], log=lambda m: None)
    graphs = train_fused([dataclasses.replace(c, cuda_graphs=True) for c in configs],
                         [tmp_path / "g0", tmp_path / "g1"], log=lambda m: None)
    for a, b in zip(plain, graphs, strict=True):
        for x, y in zip(a.history, b.history, strict=True):
            assert y["train_loss"] == pytest.approx(x["train_loss"], rel=1e-4)
            assert y["train_acc"] == x["train_acc"]
        assert b.summary["config"]["cuda_graphs"] is True
    a0 = torch.load(tmp_path / "a0" / "checkpoint.pt", weights_only=True)["model"]
    g0 = torch.load(tmp_path / "g0" / "checkpoint.pt", weights_only=True)["model"]
    assert all(torch.allclose(a0[k].float(), g0[k].float(), atol=1e-4) for k in a0)


@pytest.mark.parametrize(("overrides", "message"), [
    ({"model": "resnet-18"}, "train WRNs"),
    ({"policy": "trivialaugment"}, "per-image 'trivialaugment'"),
    ({"compile": True}, "do not take compile=True"),
])
def test_fused_training_refuses_what_it_cannot_fuse(cifar_dir, tmp_path, overrides, message):
    configs = [_config(cifar_dir, s, **overrides) for s in (0, 1)]
    with pytest.raises(ValueError, match=message):
        train_fused(configs, [tmp_path / "a", tmp_path / "b"])
    assert not (tmp_path / "a").exists()


def test_fused_runs_differ_only_in_their_seed(cifar_dir, tmp_path):
    with pytest.raises(ValueError, match=r"settings differ too: \['lr'\]"):
        train_fused([_config(cifar_dir, 0), _config(cifar_dir, 1, lr=0.01)], [tmp_path / "a", tmp_path / "b"])
    with pytest.raises(ValueError, match="different seeds"):
        train_fused([_config(cifar_dir, 0), _config(cifar_dir, 0)], [tmp_path / "a", tmp_path / "b"])
    with pytest.raises(ValueError, match="its own output folder"):
        train_fused([_config(cifar_dir, 0), _config(cifar_dir, 1)], [tmp_path / "a", tmp_path / "a"])


def test_fused_runs_resume_only_together(cifar_dir, tmp_path):
    configs = [_config(cifar_dir, s) for s in (0, 1)]
    train_fused(configs, [tmp_path / "a", tmp_path / "b"])
    (tmp_path / "b" / "checkpoint.pt").unlink()
    (tmp_path / "b" / "result.json").unlink()
    with pytest.raises(ValueError, match="resume together"):
        train_fused(configs, [tmp_path / "a", tmp_path / "b"], resume=True)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("cuda_graphs", [False, True])
def test_on_cuda_fused_runs_train_as_each_alone(cifar_dir, tmp_path, cuda_graphs):
    """bfloat16, channels-last, cuDNN's grouped convolutions, eager and captured: fused runs of policy none end
    near each seed alone (CUDA is not bit-exact; a wrong slice or order differs by far more)."""
    configs = [_config(cifar_dir, s, device="cuda", epochs=2, train_size=256, batch_size=32, amp=True,
                       cuda_graphs=cuda_graphs) for s in (0, 1)]
    fused = train_fused(configs, [tmp_path / "f0", tmp_path / "f1"], log=lambda m: None)
    for config, result in zip(configs, fused, strict=True):
        alone = train_and_evaluate(dataclasses.replace(config, cuda_graphs=False), tmp_path / f"alone{config.seed}",
                                   progress=False, log=lambda m: None)
        for a, b in zip(result.history, alone.history, strict=True):
            assert a["train_loss"] == pytest.approx(b["train_loss"], rel=0.05)
