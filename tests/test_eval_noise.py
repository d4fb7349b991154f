"""benchmarks/eval_noise.py: how much of the seeds' noise is the test set's, image by image."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from hba_augment.train.cli import main as train

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import eval_noise

pytestmark = pytest.mark.usefixtures("torch_single_thread_per_test")


def test_pair_statistics_count_the_images_one_run_alone_gets_right():
    # 1,000 images: both right on 700, both wrong on 200, only a right on 70, only b right on 30.
    a = np.array([True] * 700 + [False] * 200 + [True] * 70 + [False] * 30)
    b = np.array([True] * 700 + [False] * 200 + [False] * 70 + [True] * 30)
    stats = eval_noise.pair_stats(a, b)
    assert stats["delta"] == pytest.approx(100 * (0.23 - 0.27))  # a's error less b's: a is better
    assert stats["d"] == pytest.approx(0.1)
    assert stats["chance"] == pytest.approx(100 * math.sqrt(0.1 / 1000))
    assert stats["z"] == pytest.approx(stats["delta"] / stats["chance"])
    assert eval_noise.pair_stats(a, a) == {"delta": 0.0, "d": 0.0, "chance": 0.0, "z": 0.0}


def test_class_errors_and_their_agreement_between_the_two_sets():
    labels = np.array([0, 0, 1, 1, 1, 1, 2, 2])
    right = np.array([True, False, True, True, False, False, True, True])
    np.testing.assert_allclose(eval_noise.class_errors(right, labels, 4), [50.0, 50.0, 0.0, np.nan])
    a = {"test_classes": np.array([10.0, 20.0, 30.0, np.nan]), "pool_classes": np.array([11.0, 19.0, 33.0, 5.0])}
    b = {"test_classes": np.array([12.0, 20.0, 28.0, 1.0]), "pool_classes": np.array([12.0, 20.0, 31.0, 4.0])}
    # Differences (-2, 0, 2) and (-1, -1, 2) over the classes both sets have: r = 6 / sqrt(8 * 6).
    assert eval_noise.class_agreement(a, b) == pytest.approx(6 / math.sqrt(8 * 6))
    assert math.isnan(eval_noise.class_agreement(a, a))  # no difference: no correlation to speak of


def test_the_seeds_of_a_run_are_paired_on_the_test_set_and_the_pool(cifar_dir, tmp_path):
    runs = tmp_path / "runs"
    for seed in (0, 1):
        assert train(["--dataset", "cifar10", "--data-dir", str(cifar_dir), "--model", "wrn-10-1", "--policy", "cutout",
                      "--epochs", "1", "--train-size", "128", "--test-size", "100", "--batch-size", "64",
                      "--num-workers", "0", "--seed", str(seed), "--out", str(runs / f"cutout-seed{seed}")]) == 0
    (runs / "unfinished").mkdir()
    out = tmp_path / "noise"
    argv = [str(runs / "cutout-seed0"), str(runs / "cutout-seed1"), str(runs / "unfinished"), "--out", str(out),
            "--pool-size", "200"]
    eval_noise.main(argv)
    report = json.loads((out / "eval_noise.json").read_text())
    # A run in a runs/ folder is named by the folder above it too (policy_quality.py's layout).
    first, second = (f"{tmp_path.name}/cutout-seed{seed}" for seed in (0, 1))
    assert set(report["runs"]) == {first, second}
    for label, run in report["runs"].items():
        # The final network, evaluated again, gets the trainer's own test error.
        assert run["test_error"] == pytest.approx(run["recorded_test_error"], abs=1e-9), label
        assert 0 <= run["pool_error"] <= 100
    (pair,) = report["pairs"]
    assert (pair["a"], pair["b"]) == (first, second)
    errors = report["runs"]
    assert pair["test"]["delta"] == pytest.approx(errors[first]["test_error"] - errors[second]["test_error"])
    with np.load(out / "correct" / f"{tmp_path.name}__cutout-seed0.npz") as saved:
        assert (int(saved["test_n"]), int(saved["pool_n"])) == (100, 200)
        # Balanced sets: the mean of the classes' errors is the error.
        test_classes, pool_classes = saved["test_classes"], saved["pool_classes"]
    assert np.mean(test_classes) == pytest.approx(errors[first]["test_error"])
    assert np.mean(pool_classes) == pytest.approx(errors[first]["pool_error"])
    assert -1 <= pair["class_r"] <= 1 or math.isnan(pair["class_r"])
    summary = report["summary"]["wrn-10-1, 1 epochs"]
    assert summary["pool"]["pairs"] == 1
    assert summary["sd_test_less_pool"] == pytest.approx(abs(pair["test"]["delta"] - pair["pool"]["delta"]))
    assert summary["its_chance"] == pytest.approx(math.hypot(pair["test"]["chance"], pair["pool"]["chance"]))
    assert f"| {first} - {second} |" in (out / "eval_noise.md").read_text()

    # A second report reuses what was evaluated, checkpoints gone, and refuses another pool.
    for seed in (0, 1):
        (runs / f"cutout-seed{seed}" / "checkpoint.pt").unlink()
    eval_noise.main(argv)
    assert json.loads((out / "eval_noise.json").read_text())["pairs"] == report["pairs"]
    with pytest.raises(SystemExit, match="--pool-size 200"):
        eval_noise.main([*argv[:-1], "300"])
