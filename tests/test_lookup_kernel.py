"""benchmarks/lookup_kernel.py: both forms of the lookup give the same pixels before anything is timed
(timings are not checked)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import lookup_kernel


def test_rows_time_both_forms_on_pixels_that_agree(tmp_path: Path):
    out = tmp_path / "lookup"
    lookup_kernel.main(["--shapes", "2x8,3x5", "--repeats", "2", "--out", str(out)])
    record = json.loads(out.with_suffix(".json").read_text())
    assert [(r["batch"], r["side"]) for r in record["rows"]] == [(2, 8), (3, 5)]
    assert all(r["gather"] > 0 and r["flat"] > 0 for r in record["rows"])
    assert record["flat_from_values"] > 0
    assert "| 3 | 5 |" in out.with_suffix(".md").read_text()


def test_pixels_that_differ_stop_the_benchmark(monkeypatch):
    forms = lookup_kernel.forms

    def wrong_flat(images, tables):
        candidates = forms(images, tables)
        flat = candidates["flat"]
        candidates["flat"] = lambda: flat() + 1
        return candidates

    monkeypatch.setattr(lookup_kernel, "forms", wrong_flat)
    with pytest.raises(AssertionError, match="the flat lookup gave other pixels"):
        lookup_kernel.time_shape(2, 4, torch.device("cpu"), repeats=1)
