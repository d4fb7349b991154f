"""benchmarks/search_dynamics.py: its table tells a gradient that keeps its sign from noise."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import search_dynamics  # noqa: E402


def _metrics(folder: Path, means: np.ndarray) -> None:
    folder.mkdir()
    rows = [{"hypergrad_mean": m.tolist(), "hypergrad_abs_t_mean": 1.0, "lambda_rms_from_start": 0.5,
             "mean_prob": 0.4, "max_prob": 0.6, "mean_mag_fraction": 0.5, "train_loss": 1.5, "epoch_seconds": 10.0}
            for m in means]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_pooled_t_separates_a_steady_push_from_noise(tmp_path: Path):
    rng = np.random.default_rng(0)
    noise = rng.normal(size=(40, 54))
    _metrics(tmp_path / "noise", noise)
    _metrics(tmp_path / "push", noise + 0.8)  # every hyperparameter pushed the same way, epoch after epoch
    quiet, steady = (search_dynamics.summary(tmp_path / n) for n in ("noise", "push"))
    assert quiet["pooled_abs_t"] < 1.2 and quiet["pooled_over_2"] < 0.15
    assert steady["pooled_abs_t"] > 4 and steady["pooled_over_2"] > 0.9
    assert search_dynamics.summary(tmp_path / "push", epochs=10)["epochs"] == 10
    table = search_dynamics.table([quiet, steady])
    assert table.count("\n") == 3 and "| push | `?` | 40 |" in table
