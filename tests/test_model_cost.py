"""benchmarks/model_cost.py: one row per network, layout and precision."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import model_cost


@pytest.mark.parametrize("amp", [False, True])
def test_table_has_a_row_per_layout_and_precision(capsys, amp):
    # An "epoch" of 4 images is two steps of 2, so the epoch column must be twice the step column (the two
    # are printed to 0.1 and 0.001).
    args = ["--models", "wrn-10-1", "--steps", "1", "--batch-size", "2", "--epoch-images", "4"]
    args += ["--amp"] if amp else []
    assert model_cost.main(args) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| wrn-10-1 ")]
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    expected = {(layout, precision) for layout in ("NCHW", "channels-last")
                for precision in (("float32", "bfloat16 autocast") if amp else ("float32",))}
    assert {(c[1], c[2]) for c in cells} == expected
    for c in cells:
        step, epoch = float(c[3]), float(c[4])
        assert step > 0
        assert epoch == pytest.approx(2 * step, abs=0.051)
