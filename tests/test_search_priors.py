"""Starting policies of the search (--init), the pull back to them (--prior-decay), accumulated steps."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from hba_augment.datasets import load_dataset, reduced_split
from hba_augment.functional import MAGNITUDE_OPS, OP_NAMES, OPS, augment
from hba_augment.schedule import Schedule
from hba_augment.search import loop
from hba_augment.search.hparams import hparams_to_policy, init_hparams
from hba_augment.search.loop import SearchConfig, run_search
from hba_augment.search.priors import init_provenance, parse_init, prior_policy, start_schedule

pytestmark = pytest.mark.usefixtures("torch_single_thread")

_ACC_KEYS = ("train_loss", "train_correct", "train_n", "val_loss", "val_correct", "val_n")


@pytest.fixture(scope="module")
def tiny(cifar_dir: Path):
    return reduced_split(load_dataset("cifar10", cifar_dir), 96, 64, seed=0)


def _config(**kw) -> SearchConfig:
    base = {"dataset": "cifar10", "data_dir": "unused", "model": "wrn-10-1", "epochs": 2, "train_size": 96,
            "val_size": 64, "batch_size": 32}
    return SearchConfig.from_preset("cifar10", **{**base, **kw})


# ------------------------------------------------------------------------------------------ the priors
@pytest.mark.parametrize("init", ["paper", "identity", "zero", "uniform:0.3", "trivialaugment"])
def test_lambda_starts_at_the_prior(init):
    prior = prior_policy(init)
    prob, mag = hparams_to_policy(init_hparams(init, dtype=torch.float64))
    hair = 1e-5 if init == "zero" else 0.0  # lambda starts a hair inside a probability of 0 (a finite logit)
    np.testing.assert_allclose(prob.numpy(), prior.prob, rtol=1e-9, atol=hair)
    np.testing.assert_allclose(mag.numpy(), prior.mag, rtol=1e-9, atol=hair * 30)  # NaN where no magnitude
    assert math.isclose(sum(prior.count_probs), 1.0)


@given(st.floats(0.01, 0.99))
def test_uniform_prior_is_the_fraction_of_every_range(fraction):
    prior = prior_policy(f"uniform:{fraction}")
    assert np.all(prior.prob == fraction)
    for k, spec in enumerate(OPS):
        if spec.has_magnitude:
            assert prior.mag[:, k] == pytest.approx([spec.low + fraction * (spec.high - spec.low)] * 2)
        else:
            assert np.isnan(prior.mag[:, k]).all()


def test_zero_prior_is_pba_s_start_and_augments_nothing(cifar_images):
    prior = prior_policy("zero")
    assert np.all(prior.prob == 0) and prior.count_probs == (0.2, 0.3, 0.5)
    for k, spec in enumerate(OPS):
        assert (prior.mag[:, k] == spec.low).all() if spec.has_magnitude else np.isnan(prior.mag[:, k]).all()
    out = augment(cifar_images, torch.tensor(prior.prob), torch.tensor(prior.mag), prior.count_probs,
                  generator=torch.Generator().manual_seed(0))
    assert torch.equal(out, cifar_images)


def test_trivialaugment_prior_draws_one_op_nearly_uniformly(cifar_images):
    """TrivialAugment in this space: an op on 13/14 of the images, one at most, spread evenly over TA's ops,
    each op at two magnitudes with the mean and the variance of a uniform draw over its range."""
    prior = prior_policy("trivialaugment")
    n = 14_000
    images = cifar_images[:1].expand(n, -1, -1, -1).contiguous()
    g = torch.Generator().manual_seed(0)
    _, applied = augment(images, torch.tensor(prior.prob), torch.tensor(prior.mag), prior.count_probs, generator=g,
                         return_applied=True)
    fired = applied.sum(dim=(1, 2))  # (B,): slots applied per image
    assert int(fired.max()) == 1
    assert float((fired == 0).double().mean()) == pytest.approx(1 / 14, abs=0.01)
    ops = applied.any(dim=1).double().sum(0) / fired.sum()  # (15,): share of each op
    rare = [OP_NAMES.index("Invert"), OP_NAMES.index("Cutout")]
    common = [k for k in range(len(OPS)) if k not in rare]
    assert ops[common].min() > 0.8 / 13 and ops[common].max() < 1.2 / 13
    assert ops[rare].max() < 0.01
    for k, spec in enumerate(OPS):
        if spec.has_magnitude:
            frac = (prior.mag[:, k] - spec.low) / (spec.high - spec.low)
            assert frac.mean() == pytest.approx(0.5) and frac.var() == pytest.approx(1 / 12)
    # The enhancers' two factors lie symmetrically about their identity 1.
    assert prior.mag[:, OP_NAMES.index("Color")] == pytest.approx([1 - 0.52, 1 + 0.52], abs=0.005)


@pytest.mark.parametrize(("init", "match"), [
    ("none", "init must be one of"), ("uniform", "init must be one of"), ("paper:0.5", "init must be one of"),
    ("zero:0.1", "init must be one of"),
    ("uniform:0", "strictly between 0 and 1, got '0'"), ("uniform:nan", "got 'nan'"), ("uniform:x", "got 'x'"),
    (3, "init must be a string"),
])
def test_bad_init_names_are_refused(init, match):
    with pytest.raises(ValueError, match=match):
        parse_init(init)


def _ramp_file(path: Path) -> Path:
    """A three-entry schedule that ramps up and ends with probabilities of 0 and 1 and magnitudes at both
    ends of their ranges (as PBA's schedule does), saved as JSON."""
    low = np.array([spec.low if spec.has_magnitude else np.nan for spec in OPS])
    high = np.array([spec.high if spec.has_magnitude else np.nan for spec in OPS])
    prob = np.stack([np.full((2, 15), 0.1), np.full((2, 15), 0.3), np.tile([0.0, 1.0, 0.5], 10).reshape(2, 15)])
    mag = np.stack([np.stack([low, low])] * 2 + [np.stack([low, high])])
    Schedule(prob, mag, name="ramp", count_probs=(0.1, 0.9)).save(path)
    return path


def test_a_schedule_file_starts_at_its_last_entry(tmp_path: Path):
    path = _ramp_file(tmp_path / "ramp.json")
    saved = Schedule.load(path)
    prior = prior_policy(str(path))
    assert parse_init(str(path)) == ("schedule", None)
    np.testing.assert_array_equal(prior.prob, saved.prob[-1])
    np.testing.assert_array_equal(prior.mag, saved.mag[-1])
    assert prior.count_probs == (0.1, 0.9) and prior.prob.dtype == np.float64
    # The gradient search's lambda starts a hair inside its 0s, 1s and range ends: finite, at the policy.
    lam = init_hparams(str(path), dtype=torch.float64)
    assert torch.isfinite(lam).all()
    prob, mag = hparams_to_policy(lam)
    np.testing.assert_allclose(prob.numpy(), prior.prob, atol=1e-5)
    np.testing.assert_allclose(mag.numpy(), prior.mag, atol=1e-3)  # 1e-6 of Solarize's 255 is 2.6e-4
    # Its control is that entry held, named after the file, with the file's hash.
    control = start_schedule(str(path))
    assert control.name == "start-ramp" and control.epochs == 1 and tuple(control.count_probs) == (0.1, 0.9)
    np.testing.assert_array_equal(control.prob[0], prior.prob)
    digest = init_provenance(str(path))["init_sha256"]
    assert control.provenance["init_sha256"] == digest == hashlib.sha256(path.read_bytes()).hexdigest()
    assert init_provenance("paper") == {"init": "paper"}
    assert "init_sha256" not in start_schedule("paper").provenance


def test_a_missing_or_bad_schedule_file_is_refused(tmp_path: Path):
    with pytest.raises(ValueError, match=r"schedule file that does not exist: '.*nowhere\.json'"):
        parse_init(str(tmp_path / "nowhere.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert parse_init(str(bad)) == ("schedule", None)  # the name is checked without reading the file
    with pytest.raises(ValueError, match="format"):
        prior_policy(str(bad))


def test_a_search_from_an_edited_schedule_file_does_not_resume(tiny, tmp_path: Path):
    """The file's hash is among the checkpoint's settings: after an edit, resuming would pull lambda back
    to another start than the one it began with, and the provenance would name a file it never read."""
    path = _ramp_file(tmp_path / "ramp.json")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    quiet = {"progress": False, "log": lambda m: None, "plot": False, "data": tiny}
    config = _config(epochs=2, init=str(path), prior_decay=1.0)
    _interrupt_after_epoch_0(config, tmp_path / "cut", **quiet)
    original = path.read_bytes()
    saved = Schedule.load(path)
    Schedule(saved.prob * 0.5, saved.mag, name="edited", count_probs=saved.count_probs).save(path)
    with pytest.raises(ValueError, match=f"init_sha256: checkpoint '{digest}' vs now '[0-9a-f]{{64}}'"):
        run_search(config, tmp_path / "cut", resume=True, **quiet)
    path.write_bytes(original)
    resumed = run_search(config, tmp_path / "cut", resume=True, **quiet)
    assert resumed.schedule.provenance["init_sha256"] == digest and resumed.schedule.provenance["sessions"] == 2


def test_start_schedule_is_the_prior_held():
    schedule = start_schedule("uniform:0.3", count_probs=(0.5, 0.5))
    prior = prior_policy("uniform:0.3")
    assert isinstance(schedule, Schedule) and schedule.epochs == 1 and schedule.name == "start-uniform-0.3"
    np.testing.assert_array_equal(schedule.prob[0], prior.prob)
    assert tuple(schedule.count_probs) == (0.5, 0.5)
    assert tuple(start_schedule("trivialaugment").count_probs) == pytest.approx((1 / 14, 13 / 14))


def test_the_search_samples_with_its_priors_count_probs():
    assert _config(init="trivialaugment").count_probs == prior_policy("trivialaugment").count_probs
    assert _config().count_probs == (0.2, 0.3, 0.5)
    assert _config(init="trivialaugment", count_probs=(0.0, 1.0)).count_probs == (0.0, 1.0)


# ------------------------------------------------------------------------------- pull and accumulation
def _interrupt_after_epoch_0(config: SearchConfig, out: Path, **kwargs) -> None:
    """Run a search that is interrupted once its first epoch's checkpoint is written."""

    class Stop(Exception):
        pass

    def stop(metrics):
        raise Stop

    with pytest.raises(Stop):
        run_search(config, out, on_epoch_end=stop, **kwargs)


def _val_steps(search, n):
    acc = {k: torch.zeros(()) for k in _ACC_KEYS}
    search.train_step(torch.arange(32), acc)  # phi_V is zero until one training step
    out = []
    for _ in range(n):
        search.val_step(acc)
        out.append(search.hparams.detach().clone())
    return out


def test_a_full_pull_keeps_lambda_at_its_start(tiny):
    config = _config(init="uniform:0.3", prior_decay=1 / 0.03)  # hparam_lr * prior_decay = 1
    search = loop._Search(config, *tiny, log=lambda m: None)
    start = search.hparams.detach().clone()
    for lam in _val_steps(search, 3):
        torch.testing.assert_close(lam, start)
    # Without the pull the same steps move it.
    search = loop._Search(_config(init="uniform:0.3"), *tiny, log=lambda m: None)
    assert not torch.allclose(_val_steps(search, 1)[0], start)


def test_a_partial_pull_shrinks_the_step_towards_the_start(tiny):
    free = loop._Search(_config(), *tiny, log=lambda m: None)
    pulled = loop._Search(_config(prior_decay=10.0), *tiny, log=lambda m: None)
    start = free.hparams.detach().clone()
    a, b = _val_steps(free, 1)[0], _val_steps(pulled, 1)[0]
    torch.testing.assert_close(b - start, (a - start) * (1 - 0.03 * 10.0))


def test_accumulated_steps_use_the_mean_gradient(tiny):
    search = loop._Search(_config(hparam_accumulate=3), *tiny, log=lambda m: None)
    start = search.hparams.detach().clone()
    grads = []
    real = search._hparam_step

    def spy(grad):
        grads.append(grad.clone())
        real(grad)

    search._hparam_step = spy
    lams = _val_steps(search, 4)
    assert torch.equal(lams[0], start) and torch.equal(lams[1], start)  # nothing until the third gradient
    # The third makes one Adam step with the mean g of the three: Adam's first step is lr g / (|g| + eps).
    mean = torch.stack(grads[:3]).mean(0)
    torch.testing.assert_close(lams[2] - start, -0.03 * mean / (mean.abs() + 1e-8), atol=1e-6, rtol=1e-4)
    assert torch.equal(lams[3], lams[2]) and search.hgrad_pending_steps == 1


def test_resume_mid_accumulation_is_bit_exact(tiny, tmp_path: Path):
    # 3 SGD steps per epoch = 2 iterations = 2 validation steps: an accumulation of 3 spans epochs.
    config = _config(epochs=3, hparam_accumulate=3, prior_decay=2.0, init="trivialaugment")
    quiet = {"progress": False, "log": lambda m: None, "plot": False, "data": tiny}
    full = run_search(config, tmp_path / "full", **quiet)
    _interrupt_after_epoch_0(config, tmp_path / "cut", **quiet)
    resumed = run_search(config, tmp_path / "cut", resume=True, **quiet)
    assert np.array_equal(resumed.schedule.prob, full.schedule.prob)
    prov = resumed.schedule.provenance
    assert (prov["init"], prov["prior_decay"], prov["hparam_accumulate"]) == ("trivialaugment", 2.0, 3)
    assert tuple(resumed.schedule.count_probs) == pytest.approx((1 / 14, 13 / 14))
    # Epoch 0 had 2 validation steps: no step of lambda yet; epoch 1 made the first.
    rms = [m["lambda_rms_from_start"] for m in resumed.metrics]
    assert rms[0] == 0 and rms[1] > 0


def test_the_command_line_reaches_the_config(capsys):
    from hba_augment.search.cli import build_parser, config_from_args

    args = build_parser().parse_args(["--data-dir", "d", "--out", "o", "--init", "uniform:0.4", "--prior-decay", "2",
                                      "--hparam-accumulate", "4", "--count-probs", "1/4,3/4"])
    config = config_from_args(args, "cpu")
    assert (config.init, config.prior_decay, config.hparam_accumulate) == ("uniform:0.4", 2.0, 4)
    assert config.count_probs == (0.25, 0.75)
    assert config_from_args(build_parser().parse_args(["--data-dir", "d", "--out", "o"]), "cpu").count_probs == (
        0.2, 0.3, 0.5)
    for bad, said in ((["--init", "uniform:2"], "strictly between 0 and 1"), (["--init", "no/such.json"], "does not exist"),
                      (["--count-probs", "0.5,0.6"], "summing to 1"),
                      (["--count-probs", "a,b"], "comma-separated")):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["--data-dir", "d", "--out", "o", *bad])
        assert said in capsys.readouterr().err


# ------------------------------------------------------------------------------------ teacher objective
@pytest.mark.parametrize(("estimator", "weight"), [("es", 1.0), ("applied", 1.0), ("applied", 2.0)])
def test_teacher_objective_ascends_the_scores_estimate(tiny, monkeypatch, estimator, weight):
    search = loop._Search(_config(objective="teacher", init="trivialaugment", teacher_decay=0.9,
                                  teacher_estimator=estimator, teacher_weight=weight), *tiny, log=lambda m: None)
    start = search.hparams.detach().clone()
    teacher0 = [p.clone() for p in search.teacher.parameters()]
    seen = {}
    real = search._teacher_step

    def spy(x, condition, logits, y, eps, applied, global_size):
        # The score, computed here from the same inputs before the step: hard for the network, easy for the teacher.
        with torch.no_grad(), loop._frozen_bn_statistics(search.teacher):
            t = torch.nn.functional.cross_entropy(search.teacher(search._layout(x), condition), y, reduction="none")
        r = torch.nn.functional.cross_entropy(logits.detach(), y, reduction="none") - weight * t
        w = r - r.mean()
        if estimator == "es":
            assert applied is None
            seen["ascent"] = w @ eps / (len(y) * search.config.sigma)
        else:
            # Probabilities: the score's covariance with applying the slot; magnitudes: the perturbations of
            # the images that applied the slot, and no other image's.
            a = applied.reshape(len(y), -1).double()
            prob = torch.stack([(w.double() * (a[:, s] - a[:, s].mean())).sum() for s in range(30)]) / len(y)
            mag = torch.zeros(24, dtype=torch.float64)
            for j in range(24):
                copy, k = divmod(j, 12)
                users = applied[:, copy, MAGNITUDE_OPS[k]]
                mag[j] = (w[users].double() * eps[users, 30 + j].double()).sum() / len(y)
            seen["ascent"] = torch.cat([prob, mag]).float()
        real(x, condition, logits, y, eps, applied, global_size)

    monkeypatch.setattr(search, "_teacher_step", spy)
    acc = {k: torch.zeros(()) for k in _ACC_KEYS}
    pos = search.val_stream.pos
    search.train_step(torch.arange(32), acc)
    moved = search.hparams.detach() - start
    # Adam's first step: lr * a / (|a| + eps) along the ascent a.
    expected = 0.03 * seen["ascent"] / (seen["ascent"].abs() + 1e-8)
    torch.testing.assert_close(moved, expected, atol=1e-6, rtol=1e-3)
    assert search.hgrad_steps == 1 and search.val_stream.pos == pos  # no validation images used
    # The teacher is the moving average of the trained weights.
    for t0, t1, w in zip(teacher0, search.teacher.parameters(), search.hm.parameters(), strict=True):
        torch.testing.assert_close(t1, 0.9 * t0 + 0.1 * w)
    assert not any(p.requires_grad for p in search.teacher.parameters())


def test_teacher_search_resumes_bit_exact(tiny, tmp_path: Path):
    config = _config(epochs=2, objective="teacher", init="uniform:0.3")
    quiet = {"progress": False, "log": lambda m: None, "plot": False, "data": tiny}
    full = run_search(config, tmp_path / "full", **quiet)
    _interrupt_after_epoch_0(config, tmp_path / "cut", **quiet)
    resumed = run_search(config, tmp_path / "cut", resume=True, **quiet)
    assert np.array_equal(resumed.schedule.prob, full.schedule.prob)
    assert resumed.schedule.provenance["objective"] == "teacher"
    assert math.isnan(resumed.metrics[0]["val_loss"]) and resumed.metrics[0]["hypergrad_abs_t_mean"] > 0


@pytest.mark.parametrize(("overrides", "match"), [
    ({"objective": "teacher", "sigma": 0.0}, "sigma must be > 0"),
    ({"objective": "teacher", "val_bn": "running"}, "no validation steps"),
    ({"objective": "bogus"}, "objective must be one of \\['hypernetwork', 'teacher'\\], got 'bogus'"),
    ({"teacher_decay": 1.0}, "teacher_decay must be a number in \\[0, 1\\), got 1.0"),
    ({"teacher_weight": -1.0}, "teacher_weight"),
    ({"teacher_estimator": "sgd"}, "teacher_estimator must be one of \\['applied', 'es'\\], got 'sgd'"),
])
def test_bad_teacher_settings(overrides, match):
    with pytest.raises(ValueError, match=match):
        _config(**overrides)
