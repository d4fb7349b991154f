"""The HBA search loop: end to end on real CIFAR-10, resume, divergence, baseline augmentation, config."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from hba_augment.datasets import load_dataset, reduced_split
from hba_augment.functional import MAGNITUDE_OPS
from hba_augment.schedule import Schedule
from hba_augment.search import loop
from hba_augment.search.hparams import NUM_HPARAMS, NUM_PROB_HPARAMS, hparams_to_policy
from hba_augment.search.hyper_input import expected_applied_input
from hba_augment.search.loop import (
    PRESETS,
    SearchConfig,
    SearchDivergedError,
    baseline_augment,
    lr_at,
    run_search,
)

pytestmark = pytest.mark.usefixtures("torch_single_thread")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PROVENANCE_KEYS = {"dataset", "train_images", "val_images", "model", "strategy", "search_epochs", "seed",
                   "wall_seconds", "device", "package_version", "command", "lr", "wd", "hparam_lr", "batch_size",
                   "sigma", "data_source", "git_commit"}


@pytest.fixture(scope="module")
def cifar(cifar_dir: Path):
    return load_dataset("cifar10", cifar_dir)


def _tiny(cifar, train: int = 96, val: int = 64):
    return reduced_split(cifar, train, val, seed=0)


def _config(**kw) -> SearchConfig:
    base = {"dataset": "cifar10", "data_dir": "unused", "model": "wrn-10-1", "epochs": 3, "train_size": 96,
            "val_size": 64, "batch_size": 32}
    return SearchConfig.from_preset("cifar10", **{**base, **kw})


# ------------------------------------------------------------------------------------------ end to end
def test_two_epoch_search_on_real_cifar10(data_dir: Path, cifar, tmp_path: Path):
    config = SearchConfig.from_preset(dataset="cifar10", data_dir=str(data_dir), model="wrn-10-1", epochs=2,
                                      train_size=512, val_size=256, batch_size=64, name="test")
    result = run_search(config, tmp_path, command="hba-augment search (test)", progress=False, log=lambda m: None)
    schedule = Schedule.load(tmp_path / "schedule.json")
    assert schedule.epochs == 2 and schedule.name == "test"
    assert schedule == result.schedule.__class__.from_dict(json.loads((tmp_path / "schedule.json").read_text()))
    prov = schedule.provenance
    assert PROVENANCE_KEYS <= set(prov)
    assert (prov["train_images"], prov["val_images"], prov["search_epochs"]) == (512, 256, 2)
    assert prov["model"] == "wrn-10-1" and prov["strategy"] == "first-bn" and prov["dataset"] == "cifar10"
    assert prov["command"] == "hba-augment search (test)" and prov["wall_seconds"] > 0
    # The schedule moved away from the initial policy (lambda was trained), and stays a valid policy.
    assert not torch.allclose(torch.tensor(schedule.prob[1]), torch.full((2, 15), 0.05, dtype=torch.float64))
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    metrics = [json.loads(line) for line in lines]
    assert [m["epoch"] for m in metrics] == [0, 1]
    for m in metrics:
        assert {"train_loss", "train_acc", "val_loss", "val_acc", "lr", "epoch_seconds", "mean_prob"} <= set(m)
        assert math.isfinite(m["train_loss"]) and 0 <= m["val_acc"] <= 1
        assert m["hypergrad_abs_t_mean"] >= 0 and 0 <= m["hypergrad_t_over_2_fraction"] <= 1
        assert len(m["hypergrad_mean"]) == NUM_HPARAMS and all(map(math.isfinite, m["hypergrad_mean"]))
    assert metrics[1]["lr"] < metrics[0]["lr"] < config.lr  # cosine, set per step
    assert (tmp_path / "schedule.png").read_bytes()[:8] == PNG_MAGIC
    assert (tmp_path / "checkpoint.pt").is_file()


class _Stop(Exception):
    pass


def test_resume_gives_the_same_schedule(cifar, tmp_path: Path):
    data = _tiny(cifar)
    config = _config(epochs=3)
    quiet = {"progress": False, "log": lambda m: None, "plot": False, "data": data}
    full = run_search(config, tmp_path / "full", **quiet)

    def stop_after_first(metrics):
        if metrics["epoch"] == 0:
            raise _Stop

    with pytest.raises(_Stop):
        run_search(config, tmp_path / "cut", on_epoch_end=stop_after_first, **quiet)
    assert not (tmp_path / "cut" / "schedule.json").exists()
    torch.manual_seed(1234)  # the resumed run must not depend on the global RNG
    resumed = run_search(config, tmp_path / "cut", resume=True, **quiet)
    assert resumed.schedule.epochs == 3
    assert (resumed.schedule.prob == full.schedule.prob).all()
    assert ((resumed.schedule.mag == full.schedule.mag) | torch.isnan(torch.tensor(full.schedule.mag)).numpy()).all()
    a = torch.load(tmp_path / "full" / "checkpoint.pt", weights_only=True)
    b = torch.load(tmp_path / "cut" / "checkpoint.pt", weights_only=True)
    assert torch.equal(a["hparams"], b["hparams"])
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    for ma, mb in zip(full.metrics, resumed.metrics, strict=True):
        assert (ma["train_loss"], ma["val_loss"]) == (mb["train_loss"], mb["val_loss"])
    assert resumed.schedule.provenance["sessions"] == 2
    # A finished search resumes to the same schedule without training further.
    again = run_search(config, tmp_path / "cut", resume=True, **quiet)
    assert (again.schedule.prob == full.schedule.prob).all()


def test_resume_checks(cifar, tmp_path: Path):
    data = _tiny(cifar)
    quiet = {"progress": False, "log": lambda m: None, "plot": False, "data": data}
    run_search(_config(epochs=1), tmp_path, **quiet)
    with pytest.raises(ValueError, match="already holds"):
        run_search(_config(epochs=1), tmp_path, **quiet)
    with pytest.raises(ValueError, match="hparam_lr"):
        run_search(_config(epochs=1, hparam_lr=0.5), tmp_path, resume=True, **quiet)
    with pytest.raises(ValueError, match="images differ"):
        run_search(_config(epochs=1), tmp_path, resume=True, **{**quiet, "data": _tiny(cifar, 64, 96)})


def test_divergence_stops_without_schedule(cifar, tmp_path: Path):
    with pytest.raises(SearchDivergedError, match="no schedule was written"):
        run_search(_config(lr=1e12, epochs=2), tmp_path, data=_tiny(cifar), progress=False, log=lambda m: None)
    assert not (tmp_path / "schedule.json").exists()


def test_nan_loss_is_reported(cifar, tmp_path: Path, monkeypatch):
    calls = {"n": 0}
    real = loop.F.cross_entropy

    def poisoned(logits, target):
        calls["n"] += 1
        loss = real(logits, target)
        return loss * math.nan if calls["n"] == 2 else loss

    monkeypatch.setattr(loop.F, "cross_entropy", poisoned)
    with pytest.raises(SearchDivergedError, match="non-finite"):
        run_search(_config(epochs=1), tmp_path, data=_tiny(cifar), progress=False, log=lambda m: None)
    assert not (tmp_path / "schedule.json").exists()


# ------------------------------------------------------------------------------------------ the steps
def test_steps_update_what_they_should(cifar):
    train, val = _tiny(cifar)
    search = loop._Search(_config(), train, val, log=lambda m: None)
    assert (search.steps_per_epoch, search.outer_per_epoch) == (3, 2)
    acc = {k: torch.zeros(()) for k in ("train_loss", "train_correct", "train_n", "val_loss", "val_correct", "val_n")}
    lam0 = search.hparams.detach().clone()
    w0 = {k: v.clone() for k, v in search.hm.state_dict().items()}
    search.train_step(torch.arange(32), acc)
    assert torch.equal(search.hparams, lam0)  # SGD steps never touch lambda
    w1 = {k: v.clone() for k, v in search.hm.state_dict().items()}
    assert not torch.equal(w1["model.block1.0.bn1.weight_v"], w0["model.block1.0.bn1.weight_v"])
    assert int(w1["model.block1.0.bn1.num_batches_tracked"]) == 1
    search.val_step(acc)
    w2 = search.hm.state_dict()
    # The lambda step leaves every weight and every BN running statistic alone...
    assert all(torch.equal(w1[k], w2[k]) for k in w1)
    # ... and moves lambda (phi_V is no longer zero after one training step).
    assert not torch.equal(search.hparams, lam0)
    # Its gradient is counted for the epoch's consistency metric: one step, so the sum of squares is the
    # square of the sum, and the gradient is not zero.
    assert search.hgrad_steps == 1 and search.hgrad_moments[0].abs().sum() > 0
    torch.testing.assert_close(search.hgrad_moments[1], search.hgrad_moments[0] ** 2)
    assert int(acc["train_n"]) == 32 and int(acc["val_n"]) == 32


@pytest.mark.parametrize("val_bn", ["batch", "running"])
def test_validation_step_normalises_as_configured(cifar, val_bn):
    train, val = _tiny(cifar)
    search = loop._Search(_config(val_bn=val_bn), train, val, log=lambda m: None)
    acc = {k: torch.zeros(()) for k in ("train_loss", "train_correct", "train_n", "val_loss", "val_correct", "val_n")}
    for start in (0, 32):  # running statistics that differ from any one batch's
        search.train_step(torch.arange(start, start + 32), acc)
    stream = (search.val_stream.perm.clone(), search.val_stream.pos)
    idx = search.val_stream.next()
    search.val_stream.perm, search.val_stream.pos = stream
    x = search._layout(search.normalise(search.val_x[idx]))
    lam = search.hparams.detach().clone()
    before = {k: v.clone() for k, v in search.hm.state_dict().items()}
    search.hm.train(val_bn == "batch")
    with torch.no_grad(), loop._frozen_bn_statistics(search.hm):
        expected = F.cross_entropy(search.hm(x, lam), search.val_y[idx]) * len(idx)
    search.hm.train()
    search.val_step(acc)
    assert float(acc["val_loss"]) == pytest.approx(float(expected), rel=1e-5)
    # Back in training mode, with every running statistic as it was.
    assert search.hm.training and all(m.training for m in search.hm.modules())
    assert all(torch.equal(before[k], v) for k, v in search.hm.state_dict().items())


def test_the_provenance_names_the_commit_the_search_started_with(cifar, tmp_path: Path, monkeypatch):
    """The checkout may move on while a long search runs; the schedule names the code that ran it."""
    trained = []
    monkeypatch.setattr(loop, "source_commit", lambda: "abc1234+later" if trained else "abc1234")
    result = run_search(_config(epochs=1), tmp_path, progress=False, log=lambda m: None, plot=False,
                        data=_tiny(cifar), on_epoch_end=trained.append)
    assert trained and result.schedule.provenance["git_commit"] == "abc1234"


def test_a_checkpoint_from_before_val_bn_and_init_resumes_with_their_old_values(cifar, tmp_path: Path):
    data = _tiny(cifar)
    quiet = {"progress": False, "log": lambda m: None, "plot": False, "data": data}
    run_search(_config(epochs=1), tmp_path, **quiet)
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    for name in ("val_bn", "init", "hyper_input"):  # as written before the fields existed
        del state["config"][name]
    torch.save(state, tmp_path / "checkpoint.pt")
    provenance = run_search(_config(epochs=1), tmp_path, resume=True, **quiet).schedule.provenance
    assert (provenance["val_bn"], provenance["init"], provenance["hyper_input"]) == ("batch", "paper", "hparams")
    with pytest.raises(ValueError, match="hyper_input: checkpoint 'hparams' vs now 'applied'"):
        run_search(_config(epochs=1, hyper_input="applied"), tmp_path, resume=True, **quiet)
    with pytest.raises(ValueError, match="val_bn: checkpoint 'batch' vs now 'running'"):
        run_search(_config(epochs=1, val_bn="running"), tmp_path, resume=True, **quiet)


def test_applied_hyper_input_conditions_both_steps(cifar):
    # Training: the network sees which slots each image applied and, where it applied a magnitude slot, the
    # fraction of the range its lambda_i gave; the lambda step: the expectation of that under lambda.
    train, val = _tiny(cifar)
    search = loop._Search(_config(hyper_input="applied"), train, val, log=lambda m: None)
    with torch.no_grad():
        search.hparams.add_(2.5)  # probabilities near 0.4: most images apply a slot or two
    seen = []
    search.hm.register_forward_pre_hook(lambda module, args: seen.append(args[1].detach().clone()))
    noise = torch.Generator().set_state(search.g_noise.get_state())
    acc = {k: torch.zeros(()) for k in ("train_loss", "train_correct", "train_n", "val_loss", "val_correct", "val_n")}
    lam = search.hparams.detach().clone()
    search.train_step(torch.arange(32), acc)
    lam_i = lam + search.config.sigma * torch.randn(32, NUM_HPARAMS, generator=noise)
    fired, mags = seen[0][:, :NUM_PROB_HPARAMS], seen[0][:, NUM_PROB_HPARAMS:]
    assert set(fired.unique().tolist()) == {0.0, 1.0} and int(fired.sum(1).max()) <= 2 and fired.sum() > 16
    slots = torch.tensor([c * 15 + k for c in range(2) for k in MAGNITUDE_OPS])
    torch.testing.assert_close(mags, fired[:, slots] * torch.sigmoid(lam_i[:, NUM_PROB_HPARAMS:]))
    search.val_step(acc)
    torch.testing.assert_close(seen[1], expected_applied_input(lam, search.config.count_probs))
    assert not torch.equal(search.hparams, lam)


def _moments(grads: torch.Tensor) -> torch.Tensor:
    return torch.stack([grads.sum(0), (grads * grads).sum(0)])


def test_hypergradient_consistency_tells_noise_from_signal():
    g = torch.Generator().manual_seed(0)
    noise = torch.randn(16, 4000, generator=g, dtype=torch.float64)
    abs_t, frac = loop.hypergradient_consistency(_moments(noise), 16)
    # Student's t with 15 degrees of freedom: E|t| = 0.82, P(|t| > 2) = 0.064.
    assert abs_t == pytest.approx(0.82, abs=0.03) and frac == pytest.approx(0.064, abs=0.015)
    signal = noise * 0.1 + 1.0  # every hyperparameter pushed the same way every step
    abs_t, frac = loop.hypergradient_consistency(_moments(signal), 16)
    assert abs_t > 30 and frac == 1.0
    # Half the hyperparameters pushed, half noise.
    mixed = torch.cat([signal[:, :2000], noise[:, 2000:]], dim=1)
    assert loop.hypergradient_consistency(_moments(mixed), 16)[1] == pytest.approx(0.5 + 0.032, abs=0.01)
    # A gradient that never varies is finite, and the scale of the gradients does not matter.
    const = torch.full((5, 3), 0.25, dtype=torch.float64)
    assert math.isfinite(loop.hypergradient_consistency(_moments(const), 5)[0])
    assert loop.hypergradient_consistency(_moments(mixed * 1e-6), 16) == pytest.approx(
        loop.hypergradient_consistency(_moments(mixed), 16))
    assert all(math.isnan(v) for v in loop.hypergradient_consistency(_moments(noise[:1]), 1))


def test_lr_schedules():
    cos = _config(epochs=10, lr=0.1)
    assert lr_at(cos, 0, 5) == pytest.approx(0.1)
    assert lr_at(cos, 25, 5) == pytest.approx(0.05)
    assert lr_at(cos, 49, 5) < 0.001
    step = SearchConfig.from_preset("imagenet", epochs=270)
    assert [lr_at(step, e * 10, 10) for e in (0, 89, 90, 180, 240, 269)] == pytest.approx(
        [0.1, 0.1, 0.01, 0.001, 0.0001, 0.0001])


def test_presets_follow_the_paper():
    c = SearchConfig.from_preset(dataset="cifar10")
    assert (c.epochs, c.lr, c.lr_schedule, c.wd, c.hparam_lr, c.batch_size, c.sigma, c.t_train, c.t_val) == (
        200, 0.05, "cosine", 0.005, 0.03, 128, 1.0, 2, 1)
    assert (c.train_size, c.val_size, c.model, c.strategy, c.cutout) == (4000, 10000, "wrn-40-2", "first-bn", 16)
    s = SearchConfig.from_preset(dataset="svhn")
    assert (s.epochs, s.lr, s.wd, s.hparam_lr, s.cutout, s.flip, s.crop_padding) == (160, 0.01, 0.01, 0.02, 20, False, 0)
    i = SearchConfig.from_preset(dataset="imagefolder")
    assert i.preset == "imagenet" and (i.epochs, i.lr, i.lr_schedule, i.lr_milestones, i.wd, i.hparam_lr) == (
        270, 0.1, "step", (90, 180, 240), 0.001, 0.007)
    assert (i.train_size, i.val_size, i.image_size, i.classes) == (6000, 10000, 32, 120)
    assert SearchConfig.from_preset("cifar10", dataset="imagefolder", epochs=None).epochs == 200
    assert set(PRESETS) == {"cifar10", "svhn", "imagenet"}


@pytest.mark.parametrize(("overrides", "match"), [
    ({"strategy": "none"}, "strategy"),
    ({"strategy": "bogus"}, "strategy"),
    ({"dataset": "mnist"}, "dataset"),
    ({"epochs": 0}, "epochs"),
    ({"lr": -1.0}, "lr"),
    ({"hparam_lr": 0.0}, "hparam_lr"),
    ({"sigma": math.nan}, "sigma"),
    ({"lr_schedule": "linear"}, "lr_schedule"),
    ({"lr_milestones": (5, 2)}, "lr_milestones"),
    ({"device": "tpu:banana"}, "device"),
    ({"count_probs": (0.5, 0.6)}, "count_probs"),
    ({"batch_size": True}, "batch_size"),
    ({"val_bn": "eval"}, "val_bn must be one of \\['batch', 'running'\\], got 'eval'"),
    ({"init": "none"}, "init must be one of 'paper', 'identity', 'zero', 'uniform:F' .* got 'none'"),
    ({"init": "uniform:1.5"}, "fraction of init 'uniform:F' must be a number strictly between 0 and 1, got '1.5'"),
    ({"init": "uniform"}, "init must be one of .* got 'uniform'"),
    ({"prior_decay": -1.0}, "prior_decay"),
    ({"prior_decay": 100.0}, "hparam_lr \\* prior_decay must be at most 1"),
    ({"hparam_accumulate": 0}, "hparam_accumulate"),
    ({"hyper_input": "lambda"}, "hyper_input must be one of \\['hparams', 'applied'\\], got 'lambda'"),
])
def test_bad_config(overrides, match):
    with pytest.raises(ValueError, match=match):
        SearchConfig.from_preset("cifar10", **overrides)


def test_bad_preset_and_field():
    with pytest.raises(ValueError, match="preset"):
        SearchConfig.from_preset("mnist")
    with pytest.raises(ValueError, match="learning_rate"):
        SearchConfig.from_preset("cifar10", learning_rate=0.1)


# ------------------------------------------------------------------------------------------ baseline
def _reference_baseline(x, flips, offsets, centres, pad, size):
    """Per-image reference: PBA's zero_pad_and_crop, random_flip and cutout_numpy written out."""
    out = []
    h, w = x.shape[-2:]
    for i in range(x.shape[0]):
        img = torch.nn.functional.pad(x[i], (pad, pad, pad, pad))
        oy, ox = offsets[i].tolist()
        img = img[:, oy : oy + h, ox : ox + w]
        if flips[i]:
            img = img.flip(-1)
        cy, cx = centres[i].tolist()
        img = img.clone()
        img[:, max(0, cy - size // 2) : min(h, cy + size // 2), max(0, cx - size // 2) : min(w, cx + size // 2)] = 0
        out.append(img)
    return torch.stack(out)


def test_baseline_augment_matches_reference():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 3, 12, 10, generator=g)
    seed = 7
    out = baseline_augment(x, flip=True, crop_padding=4, cutout=6, generator=torch.Generator().manual_seed(seed))
    # Replay the draws in the documented order: flips, crop offsets, Cutout rows, Cutout columns.
    r = torch.Generator().manual_seed(seed)
    flips = torch.rand(16, generator=r) < 0.5
    offsets = torch.randint(0, 9, (16, 2), generator=r)
    centres = torch.stack([torch.randint(0, 12, (16,), generator=r), torch.randint(0, 10, (16,), generator=r)], 1)
    assert 0 < int(flips.sum()) < 16
    assert torch.equal(out, _reference_baseline(x, flips, offsets, centres, 4, 6))
    assert torch.equal(baseline_augment(x, flip=False, crop_padding=0, cutout=0), x)
    # Cutout alone zeroes one clipped square per image.
    cut = baseline_augment(x, flip=False, crop_padding=0, cutout=4, generator=g)
    zeros = (cut == 0).all(dim=1).flatten(1).sum(dim=1)
    assert ((zeros >= 1) & (zeros <= 16)).all()


def test_policy_noise_is_per_image(cifar, monkeypatch):
    # Every training image draws its own lambda_i: the policies inside one batch differ.
    train, val = _tiny(cifar)
    search = loop._Search(_config(), train, val, log=lambda m: None)
    seen = {}
    real = loop.functional.augment

    def spy(images, prob, mag, *args, **kwargs):
        seen["prob"] = prob
        return real(images, prob, mag, *args, **kwargs)

    monkeypatch.setattr(loop.functional, "augment", spy)
    acc = {k: torch.zeros(()) for k in ("train_loss", "train_correct", "train_n")}
    search.train_step(torch.arange(8), acc)
    assert seen["prob"].shape == (8, 2, 15)
    assert seen["prob"].std(dim=0).min() > 0.01
    lam_mean = hparams_to_policy(search.hparams.detach())[0]
    assert lam_mean.shape == (2, 15) and NUM_HPARAMS == 54


def test_amp_runs_the_network_in_bfloat16(cifar, tmp_path: Path, monkeypatch):
    """--amp (issue 12, GPU speed paths): the forward passes run under bfloat16 autocast (checked here on
    the CPU, where autocast also works), losses and lambda stay float32, and the provenance says so."""
    seen = []
    original = torch.nn.functional.conv2d

    def conv2d(x, *args, **kwargs):
        seen.append(x.dtype)
        return original(x, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "conv2d", conv2d)
    result = run_search(_config(epochs=1, amp=True), tmp_path, data=_tiny(cifar), progress=False, log=lambda m: None)
    assert torch.bfloat16 in seen
    assert result.schedule.provenance["amp"] is True
    assert np.isfinite(result.schedule.prob).all()
