"""benchmarks/index_dtype.py: both index dtypes give the same lookup and histogram before anything is timed
(timings are not checked)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import index_dtype


def test_rows_time_both_dtypes_on_outputs_that_agree(tmp_path: Path):
    out = tmp_path / "index"
    index_dtype.main(["--device", "cpu", "--shapes", "2x8,3x5", "--repeats", "2", "--out", str(out)])
    rows = json.loads(out.with_suffix(".json").read_text())["rows"]
    assert [(r["batch"], r["side"]) for r in rows] == [(2, 8), (3, 5)]
    assert all(r["int64"] > 0 and r["int32"] > 0 for r in rows)
    assert "| 3 | 5 |" in out.with_suffix(".md").read_text()


def test_outputs_that_differ_stop_the_benchmark(monkeypatch):
    step = index_dtype._step

    def wrong_for_int32(images, tables, dtype):
        looked_up, hist = step(images, tables, dtype)
        return (looked_up + 1 if dtype == torch.int32 else looked_up), hist

    monkeypatch.setattr(index_dtype, "_step", wrong_for_int32)
    with pytest.raises(AssertionError, match="int32 indices gave other outputs"):
        index_dtype.time_shape(2, 4, torch.device("cpu"), repeats=1)
