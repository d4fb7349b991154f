"""benchmarks/policy_signal.py: branches of one trunk, one round each, under common random numbers (issue 20)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from hba_augment.schedule import Schedule
from hba_augment.search.priors import prior_policy

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import policy_signal  # noqa: E402

pytestmark = pytest.mark.usefixtures("torch_single_thread")


def test_branches_share_the_trunk_and_each_replicate_s_streams(cifar_dir: Path, tmp_path: Path):
    start = prior_policy("paper")
    same = tmp_path / "same.json"
    Schedule.constant(start.prob, start.mag, count_probs=start.count_probs).save(same)
    out = tmp_path / "probe"
    args = ["--out", str(out), "--dataset", "cifar10", "--data-dir", str(cifar_dir), "--model", "wrn-10-1",
            "--epochs", "3", "--branch-at", "1", "--every", "1", "--replicates", "2", "--explored", "1",
            "--train-size", "60", "--val-size", "40", "--batch-size", "20", "--policy", f"again={same}@0",
            "--ema", "0.9"]
    policy_signal.main(args)
    results = [json.loads(p.read_text()) for p in sorted((out / policy_signal.RESULTS_FOLDER).glob("*.json"))]
    assert [(r["branch_at"], r["replicate"]) for r in results] == [(1, 0), (1, 1)]
    for r in results:
        assert set(r["scores"]) == {"raw", "ema"}
        for score in r["scores"].values():
            assert list(score["val_acc"]) == ["none", "start", "explored-0", "again"]
            # The start given again as a schedule: same trunk, same streams, same policy, so the same network.
            assert score["val_acc"]["again"] == score["val_acc"]["start"]
            assert score["val_loss"]["again"] == score["val_loss"]["start"]
        # The average of the weights is another network than the weights.
        assert r["scores"]["ema"]["val_loss"]["start"] != r["scores"]["raw"]["val_loss"]["start"]
        assert r["mean_p"]["none"] == 0 and r["mean_p"]["start"] == pytest.approx(0.05)
    # Replicates draw other streams: the same policy from the same trunk ends elsewhere.
    assert results[0]["scores"]["raw"]["val_loss"]["start"] != results[1]["scores"]["raw"]["val_loss"]["start"]
    report = (out / policy_signal.REPORT_FILE).read_text()
    assert "| 1 | 0.9 | raw | explored-0 |" in report and "| 1 | 0.9 | ema | 2 |" in report
    # A rerun finds every result and trains nothing: the report is rebuilt as it was.
    policy_signal.main([*args[:2], "--report-only"])
    assert (out / policy_signal.REPORT_FILE).read_text().split("- Search settings")[1] == report.split(
        "- Search settings")[1]
