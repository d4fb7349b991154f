"""``hba-augment train``: every policy trains on real CIFAR-10 images, defaults, resume, errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from hba_augment.datasets import load_dataset
from hba_augment.functional._table import NUM_OPS, OPS
from hba_augment.schedule import Schedule
from hba_augment.train.cli import main
from hba_augment.train.trainer import (
    PAPER_HPARAMS,
    TrainConfig,
    load_data,
    parse_policy,
    train_and_evaluate,
)

# Per test: --threads changes the process-wide setting.
pytestmark = pytest.mark.usefixtures("torch_single_thread_per_test")

POLICIES = ["none", "baseline", "cutout", "autoaugment", "randaugment", "trivialaugment", "hba"]


@pytest.fixture(scope="module")
def schedule_path(tmp_path_factory):
    """A two-entry schedule: strong ops in epoch 0, none in epoch 1 (so stretching matters)."""
    mag = np.array([[(o.low + o.high) / 2 if o.has_magnitude else np.nan for o in OPS]] * 2)
    prob = np.stack([np.full((2, NUM_OPS), 0.5), np.zeros((2, NUM_OPS))])
    path = tmp_path_factory.mktemp("schedule") / "two.json"
    Schedule(prob, np.stack([mag, mag]), name="two").save(path)
    return path


def cli(cifar_dir, out, policy, *extra):
    return ["--data-dir", str(cifar_dir), "--model", "wrn-10-1", "--policy", policy, "--epochs", "1",
            "--train-size", "128", "--test-size", "100", "--batch-size", "64", "--num-workers", "0",
            "--out", str(out), *extra]


@pytest.mark.parametrize("kind", POLICIES)
def test_every_policy_trains_one_epoch(kind, cifar_dir, schedule_path, tmp_path, capsys):
    policy = f"hba:{schedule_path}" if kind == "hba" else kind
    assert main(cli(cifar_dir, tmp_path, policy)) == 0
    result = json.loads((tmp_path / "result.json").read_text())
    assert 0 <= result["test_error"] <= 100 and np.isfinite(result["test_loss"])
    assert result["train_images"] == 128 and result["test_images"] == 100
    (entry,) = result["history"]
    assert entry["epoch"] == 1 and np.isfinite(entry["train_loss"]) and entry["test_error"] == result["test_error"]
    cfg = result["config"]
    assert cfg["policy"] == policy and cfg["model"] == "wrn-10-1" and cfg["command"].startswith("hba-augment train")
    aug = cfg["augmentation"]
    assert (aug["flip"], aug["crop_padding"]) == ((False, 0) if kind == "none" else (True, 4))
    assert aug["cutout"] == (0 if kind in ("none", "baseline") else 16)
    assert (tmp_path / "checkpoint.pt").is_file() and (tmp_path / "history.jsonl").is_file()
    assert "test error" in capsys.readouterr().out


def test_subsets_are_class_balanced_and_seeded(cifar_dir):
    config = TrainConfig.from_preset(data_dir=str(cifar_dir), model="wrn-10-1", policy="none", epochs=1,
                                     train_size=100, test_size=50, subset_seed=3)
    train, test, _ = load_data(config)
    assert torch.bincount(train.labels, minlength=10).tolist() == [10] * 10
    assert torch.bincount(test.labels, minlength=10).tolist() == [5] * 10
    again, _, _ = load_data(config)
    assert torch.equal(train.images, again.images)


def test_validation_split_holds_out_train_images_and_keeps_the_training_subset(cifar_dir):
    kw = {"data_dir": str(cifar_dir), "model": "wrn-10-1", "policy": "none", "epochs": 1, "train_size": 100,
          "subset_seed": 3}
    train, _, _ = load_data(TrainConfig.from_preset(**kw, test_size=50))
    vtrain, val, source = load_data(TrainConfig.from_preset(**kw, test_size=50, eval_split="val"))
    assert torch.equal(vtrain.images, train.images) and torch.equal(vtrain.labels, train.labels)
    assert torch.bincount(val.labels, minlength=10).tolist() == [5] * 10
    # None of them a training image; drawn from the train split, not the test split.
    seen = {bytes(x.numpy()) for x in vtrain.images}
    assert not any(bytes(x.numpy()) in seen for x in val.images)
    full = load_dataset("cifar10", str(cifar_dir), split="train")
    assert (full.images == val.images[0]).flatten(1).all(1).any()
    assert "held-out validation" in source
    # Default: every train-split image outside the training subset.
    _, rest, _ = load_data(TrainConfig.from_preset(**kw, eval_split="val"))
    assert len(rest.labels) == len(full.labels) - 100


@pytest.mark.parametrize(("kw", "match"), [
    ({"eval_split": "valid"}, "eval_split must be one of \\['test', 'val'\\], got 'valid'"),
    ({"eval_split": "val", "train_size": None}, "eval_split='val' needs train_size:"),
])
def test_bad_eval_split_is_refused(cifar_dir, kw, match):
    with pytest.raises(ValueError, match=match):
        TrainConfig.from_preset(**{"data_dir": str(cifar_dir), "policy": "none", "train_size": 100, **kw})


def test_validation_split_larger_than_the_rest_is_refused(cifar_dir):
    n = len(load_dataset("cifar10", str(cifar_dir), split="train").labels)
    config = TrainConfig.from_preset(data_dir=str(cifar_dir), policy="none", train_size=n - 10, test_size=11,
                                     eval_split="val")
    with pytest.raises(ValueError, match=f"need {n + 1} images; the train split of cifar10 at .* has {n}$"):
        load_data(config)


def test_cli_tests_on_the_validation_split(cifar_dir, tmp_path, capsys):
    assert main(cli(cifar_dir, tmp_path, "baseline", "--eval-split", "val")) == 0
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["eval_split"] == "val" and result["config"]["eval_split"] == "val"
    assert result["test_images"] == 100 and "held-out validation" in result["config"]["data_source"]
    assert capsys.readouterr().out.startswith("validation error ")


def _small_config(cifar_dir, **kw):
    values = {"data_dir": str(cifar_dir), "model": "wrn-10-1", "policy": "none", "epochs": 2, "train_size": 96,
              "test_size": 40, "batch_size": 32, "num_workers": 0, "eval_every": 1}
    return TrainConfig.from_preset(**{**values, **kw})


@pytest.mark.parametrize(("model", "policy"), [("shake-shake-8-2x4d", "hba"), ("wrn-10-1", "trivialaugment")])
def test_resume_continues_bit_for_bit(model, policy, cifar_dir, schedule_path, tmp_path):
    policy = f"hba:{schedule_path}" if policy == "hba" else policy
    config = _small_config(cifar_dir, model=model, policy=policy)
    data = load_data(config)[:2]
    quiet = {"progress": False, "log": lambda msg: None}
    straight = train_and_evaluate(config, tmp_path / "a", data=data, **quiet)

    class Stop(Exception):
        pass

    def stop(entry):
        raise Stop

    with pytest.raises(Stop):
        train_and_evaluate(config, tmp_path / "b", data=data, on_epoch_end=stop, **quiet)
    assert not (tmp_path / "b" / "result.json").exists()
    resumed = train_and_evaluate(config, tmp_path / "b", data=data, resume=True, **quiet)
    keys = ("train_loss", "train_acc", "test_loss", "test_error", "lr")
    assert [[h[k] for k in keys] for h in resumed.history] == [[h[k] for k in keys] for h in straight.history]
    assert resumed.summary["sessions"] == 2
    a = torch.load(tmp_path / "a" / "checkpoint.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize(("every", "written"), [(0, [False, False, True]), (2, [False, True, True]), (1, [True] * 3)])
def test_checkpoints_are_written_every_n_epochs_and_after_the_last(every, written, cifar_dir, tmp_path):
    config = _small_config(cifar_dir, epochs=3, checkpoint_every=every)
    seen = []
    train_and_evaluate(config, tmp_path, progress=False, log=lambda msg: None,
                       on_epoch_end=lambda entry: seen.append(
                           torch.load(tmp_path / "checkpoint.pt", weights_only=True)["epoch"]
                           if (tmp_path / "checkpoint.pt").exists() else None))
    assert [epoch == i + 1 for i, epoch in enumerate(seen)] == written
    # A resumed run may change it (it changes no result).
    resumed = train_and_evaluate(_small_config(cifar_dir, epochs=3, checkpoint_every=5), tmp_path, resume=True,
                                 progress=False, log=lambda msg: None)
    assert resumed.summary["epochs"] == 3


def test_per_image_policy_does_not_depend_on_worker_count(cifar_dir, tmp_path):
    results = []
    for workers in (0, 1):
        config = _small_config(cifar_dir, policy="autoaugment", epochs=1, num_workers=workers)
        results.append(train_and_evaluate(config, tmp_path / str(workers), progress=False, log=lambda m: None))
    assert results[0].history[0]["train_loss"] == results[1].history[0]["train_loss"]
    assert results[0].test_loss == results[1].test_loss


def test_hba_schedule_is_stretched_and_stepped(cifar_dir, schedule_path, tmp_path, monkeypatch):
    from hba_augment.policy import HBAPolicy

    seen = []
    original = HBAPolicy.set_epoch

    def spy(self, epoch):
        seen.append((epoch, self.schedule.index(epoch, self.total_epochs)))
        original(self, epoch)

    monkeypatch.setattr(HBAPolicy, "set_epoch", spy)
    config = _small_config(cifar_dir, policy=f"hba:{schedule_path}", epochs=4, eval_every=0)
    train_and_evaluate(config, tmp_path, progress=False, log=lambda m: None)
    assert seen == [(0, 0), (1, 0), (2, 1), (3, 1)]  # 2 entries stretched to 4 epochs


def test_paper_defaults():
    c = TrainConfig.from_preset(model="wrn-28-10", policy="cutout")
    assert (c.lr, c.wd, c.batch_size, c.epochs, c.lr_schedule) == (0.1, 0.0005, 128, 200, "cosine")
    assert (c.flip, c.crop_padding, c.cutout) == (True, 4, 16)
    c = TrainConfig.from_preset(model="shake-shake-26-2x96d", policy="cutout")
    assert (c.lr, c.wd, c.batch_size, c.epochs) == (0.01, 0.001, 128, 1800)
    c = TrainConfig.from_preset(dataset="cifar100", model="pyramidnet-272-200", policy="cutout")
    assert (c.lr, c.wd, c.batch_size, c.epochs) == (0.025, 0.0005, 64, 1800)
    c = TrainConfig.from_preset(dataset="svhn", model="wrn-28-10", policy="cutout")
    assert (c.lr, c.wd, c.epochs, c.flip, c.crop_padding, c.cutout) == (0.005, 0.001, 160, False, 0, 20)
    c = TrainConfig.from_preset(dataset="imagefolder", model="resnet-50", policy="baseline")
    assert (c.lr, c.wd, c.batch_size, c.epochs, c.lr_schedule, c.lr_milestones) == (
        0.1, 0.0001, 256, 270, "step", (90, 180, 240))
    c = TrainConfig.from_preset(dataset="imagefolder", model="resnet-50", policy="baseline", epochs=27)
    assert c.lr_milestones == (9, 18, 24)
    c = TrainConfig.from_preset(model="alexnet-stn", policy="none", lr=0.01, epochs=3)
    assert (c.lr, c.epochs, c.wd) == (0.01, 3, PAPER_HPARAMS["cifar10"]["wrn"][1])
    assert "no row for 'alexnet'" in c.hparams_source


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "vgg-99"], "Unknown model 'vgg-99'"),
        (["--policy", "mixup"], "Unknown policy 'mixup'"),
        (["--policy", "hba"], "hba:<shipped name or schedule JSON path>"),
        (["--policy", "hba:/nonexistent/schedule.json"], "/nonexistent/schedule.json"),
        (["--policy", "hba:not-a-shipped-name"], "not-a-shipped-name"),
        (["--preset", "imagenet", "--policy", "cutout"], "needs a Cutout size"),
    ],
)
def test_bad_arguments_fail_clearly(args, message, cifar_dir, tmp_path, capsys):
    argv = cli(cifar_dir, tmp_path, "none")
    for i in range(0, len(args), 2):
        if args[i] in argv:
            argv[argv.index(args[i]) + 1] = args[i + 1]
        else:
            argv[:0] = args[i : i + 2]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "error" in err and message in err
    assert not (tmp_path / "result.json").exists()


@pytest.mark.parametrize(("option", "value"), [("--epochs", "-3"), ("--epochs", "0"), ("--train-size", "x")])
def test_bad_numbers_are_rejected_by_the_parser(option, value, cifar_dir, tmp_path, capsys):
    argv = cli(cifar_dir, tmp_path, "none")
    argv[argv.index(option) + 1] = value
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert option in err and ("must be >= 1" in err or "expected an integer" in err)


def test_existing_output_needs_resume(cifar_dir, tmp_path, capsys):
    assert main(cli(cifar_dir, tmp_path, "none")) == 0
    assert main(cli(cifar_dir, tmp_path, "none")) == 2
    assert "--resume" in capsys.readouterr().err
    assert main([*cli(cifar_dir, tmp_path, "none"), "--resume"]) == 0  # finished: re-writes the same result


def test_resume_refuses_changed_settings(cifar_dir, tmp_path, capsys):
    assert main(cli(cifar_dir, tmp_path, "none")) == 0
    assert main([*cli(cifar_dir, tmp_path, "cutout"), "--resume"]) == 2
    assert "settings differ" in capsys.readouterr().err


def test_a_checkpoint_from_before_eval_split_resumes_as_a_test_split_run(cifar_dir, tmp_path, capsys):
    assert main(cli(cifar_dir, tmp_path, "none")) == 0
    path = tmp_path / "checkpoint.pt"
    state = torch.load(path, weights_only=True)
    del state["config"]["eval_split"]  # as written before the field existed
    torch.save(state, path)
    assert main([*cli(cifar_dir, tmp_path, "none"), "--resume"]) == 0
    assert main([*cli(cifar_dir, tmp_path, "none", "--eval-split", "val"), "--resume"]) == 2
    assert "eval_split: checkpoint 'test' vs now 'val'" in capsys.readouterr().err


def test_nan_loss_is_a_clear_error(cifar_dir, tmp_path, capsys):
    argv = [*cli(cifar_dir, tmp_path, "none"), "--lr", "1e30", "--batch-size", "16"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "diverged" in err and "smaller --lr" in err
    assert not (tmp_path / "result.json").exists()


def test_parse_policy():
    assert parse_policy(" HBA:cifar10 ") == ("hba", "cifar10")
    assert parse_policy("TrivialAugment") == ("trivialaugment", None)
    with pytest.raises(ValueError, match="Unknown policy"):
        parse_policy("cutout:16")


def test_top_level_cli_has_train(capsys):
    from hba_augment.cli import main as top

    with pytest.raises(SystemExit) as exc:
        top(["train", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "--policy" in out and "trivialaugment" in out
