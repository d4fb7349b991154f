"""benchmarks/paired.py: two policies of a policy_quality table compared seed by seed."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import paired


@pytest.fixture
def table(tmp_path: Path) -> Path:
    rows = [{"policy": "a", "seeds": [0, 1, 2], "test_errors": [19.4, 19.7, 19.6]},
            {"policy": "b", "seeds": [0, 1, 2], "test_errors": [20.0, 19.9, 20.4]},
            {"policy": "c", "seeds": [1, 2], "test_errors": [20.5, 20.1]}]
    path = tmp_path / "policy_quality.json"
    path.write_text(json.dumps({"rows": rows}))
    return path


def test_differences_are_taken_seed_by_seed(table: Path):
    errors = paired.load_errors(table)
    c = paired.compare(errors["a"], errors["b"])
    diffs = [-0.6, -0.2, -0.8]
    mean = sum(diffs) / 3
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / 2)
    assert c["seeds"] == [0, 1, 2] and c["mean_difference"] == pytest.approx(mean)
    assert c["sd_difference"] == pytest.approx(sd) and c["paired_t"] == pytest.approx(mean / (sd / math.sqrt(3)))
    assert 0 < c["paired_p"] < 0.2 and 0 < c["welch_p"] < 1
    # Only the seeds both have are paired.
    assert paired.compare(errors["a"], errors["c"])["seeds"] == [1, 2]


def test_the_table_and_its_mistakes(table: Path, tmp_path: Path, capsys):
    out = tmp_path / "paired.md"
    assert paired.main([str(table), "a", "b", "--out", str(out)]) == 0
    assert "| a | b | 0,1,2 | 19.40, 19.70, 19.60 | 20.00, 19.90, 20.40 | -0.53 |" in out.read_text()
    assert paired.main([str(table), "a=c", "--out", str(out)]) == 0
    assert "| a | c | 1,2 |" in out.read_text()
    with pytest.raises(SystemExit, match="'d' is not a policy"):
        paired.main([str(table), "a", "d"])
    with pytest.raises(SystemExit, match="in pairs"):
        paired.main([str(table), "a", "b", "c"])


def test_several_tables_join_their_seeds_per_policy(table: Path, tmp_path: Path):
    more = tmp_path / "more.json"
    more.write_text(json.dumps({"rows": [{"policy": "a", "seeds": [3, 4], "test_errors": [19.5, 19.8]},
                                         {"policy": "b", "seeds": [3, 4], "test_errors": [20.1, 20.2]}]}))
    out = tmp_path / "paired.md"
    assert paired.main([f"{table},{more}", "a", "b", "--out", str(out)]) == 0
    assert "| a | b | 0,1,2,3,4 | 19.40, 19.70, 19.60, 19.50, 19.80 |" in out.read_text()
    with pytest.raises(SystemExit, match="'a' seed 0 is in more than one table"):
        paired.main([f"{table},{table}", "a", "b"])


def test_the_pooled_test_uses_every_policy_s_noise(table: Path):
    errors = paired.load_errors(table)
    s, df = paired.pooled_noise(errors)
    # a: deviations -0.167, 0.133, 0.033; b: -0.1, -0.2, 0.3; c: 0.2, -0.2 (df 2 + 2 + 1).
    squares = sum((v - sum(r) / len(r)) ** 2 for r in ([19.4, 19.7, 19.6], [20.0, 19.9, 20.4], [20.5, 20.1])
                  for v in r)
    assert df == 5 and s == pytest.approx(math.sqrt(squares / 5))
    t, p = paired.pooled_test(errors["a"], errors["b"], (s, df))
    assert t == pytest.approx((19.5667 - 20.1) / (s * math.sqrt(2 / 3)), rel=1e-3)
    assert p == pytest.approx(2 * paired.stats.t.sf(abs(t), 5))
    # Each policy's mean over its own seeds, unpaired (c lacks seed 0).
    t_ac, _ = paired.pooled_test(errors["a"], errors["c"], (s, df))
    assert t_ac == pytest.approx((19.5667 - 20.3) / (s * math.sqrt(1 / 3 + 1 / 2)), rel=1e-3)
    assert math.isnan(paired.pooled_test(errors["a"], {}, (s, df))[1])


def test_blocks_compare_within_a_machine_and_combine(table: Path, tmp_path: Path):
    """``--block``: another machine's runs of the same seeds are a block of their own; its level (here about
    a point higher) does not enter the combined difference, only each block's own difference."""
    cpu = tmp_path / "cpu.json"
    cpu.write_text(json.dumps({"rows": [{"policy": "a", "seeds": [0, 1], "test_errors": [20.4, 20.8]},
                                        {"policy": "b", "seeds": [0], "test_errors": [21.0]}]}))
    gpu_errors = paired.load_errors(table)
    cpu_errors = paired.load_errors(cpu)
    by_block = {f"{p}@{i}": r for i, blk in enumerate((gpu_errors, cpu_errors)) for p, r in blk.items()}
    s, df = paired.pooled_noise(by_block)
    assert df == 2 + 2 + 1 + 1  # a, b, c on the GPU; a on the CPU (b has one run there)
    r = paired.blocked_test([(gpu_errors["a"], gpu_errors["b"]), (cpu_errors["a"], cpu_errors["b"])], (s, df))
    d_gpu, w_gpu = 19.5667 - 20.1, 1 / (1 / 3 + 1 / 3)
    d_cpu, w_cpu = 20.6 - 21.0, 1 / (1 / 2 + 1 / 1)
    assert r["difference"] == pytest.approx((d_gpu * w_gpu + d_cpu * w_cpu) / (w_gpu + w_cpu), rel=1e-3)
    assert r["se"] == pytest.approx(s / math.sqrt(w_gpu + w_cpu))
    assert r["p"] == pytest.approx(2 * paired.stats.t.sf(abs(r["difference"] / r["se"]), df))
    assert r["per_block"] == pytest.approx([d_gpu, d_cpu], rel=1e-3)
    # A block without one of the policies is left out; none with both: undefined.
    alone = paired.blocked_test([(gpu_errors["a"], gpu_errors["b"]), (cpu_errors["a"], {})], (s, df))
    assert alone["difference"] == pytest.approx(d_gpu, rel=1e-3)
    assert math.isnan(paired.blocked_test([(gpu_errors["a"], {})], (s, df))["p"])

    out = tmp_path / "paired.md"
    assert paired.main([str(table), "a", "b", "--block", str(cpu), "--out", str(out)]) == 0
    text = out.read_text()
    assert "| a | b | 0,1,2 |" in text  # the first block's seed-by-seed row, as without --block
    assert "| a | b | 3 / 3, -0.53; 2 / 1, -0.40 |" in text
    # Without --block the same seeds of two machines are refused, not joined.
    with pytest.raises(SystemExit, match="in more than one table"):
        paired.main([f"{table},{cpu}", "a", "b"])


def test_a_contrast_is_the_mean_of_means_of_each_side(table: Path, tmp_path: Path):
    """``--contrast``: a 2x2's main effect, the mean of two policies' means against two others', with the
    standard error of that combination of means under the table's pooled noise."""
    errors = paired.load_errors(table)
    noise = paired.pooled_noise(errors)
    s, df = noise
    r = paired.blocked_contrast([([errors["a"], errors["c"]], [errors["b"]])], noise)
    mean_a, mean_b, mean_c = (19.4 + 19.7 + 19.6) / 3, (20.0 + 19.9 + 20.4) / 3, (20.5 + 20.1) / 2
    assert r["difference"] == pytest.approx((mean_a + mean_c) / 2 - mean_b)
    assert r["se"] == pytest.approx(s * math.sqrt((1 / 3 + 1 / 2) / 4 + 1 / 3))
    assert r["p"] == pytest.approx(2 * paired.stats.t.sf(abs(r["difference"] / r["se"]), df))
    # One policy a side is the pooled test: the difference of the means over s sqrt(1/3 + 1/3).
    one = paired.blocked_contrast([([errors["a"]], [errors["b"]])], noise)
    assert one["t"] == pytest.approx((mean_a - mean_b) / (s * math.sqrt(2 / 3)))
    assert (one["t"], one["p"]) == pytest.approx(paired.pooled_test(errors["a"], errors["b"], noise))
    # A policy without runs leaves the contrast undefined.
    assert math.isnan(paired.blocked_contrast([([errors["a"], {}], [errors["b"]])], noise)["difference"])

    out = tmp_path / "paired.md"
    assert paired.main([str(table), "--contrast", "a+c=b", "--out", str(out)]) == 0
    text = out.read_text()
    assert "| a + c | b | 3 + 2 / 3, -0.17 | -0.17 |" in text and "Seed by seed" not in text
    with pytest.raises(SystemExit, match="'d' is not a policy"):
        paired.main([str(table), "--contrast", "a+d=b"])
    with pytest.raises(SystemExit):
        paired.main([str(table), "--contrast", "a+c"])
    with pytest.raises(SystemExit):
        paired.main([str(table)])


def test_a_contrast_combines_over_blocks_as_a_difference_does(table: Path, tmp_path: Path):
    """With ``--block`` a contrast is taken within each machine and combined, weighted by the inverse of its
    variance factor (one policy a side, the blocked difference: ``test_blocks_compare_within_a_machine...``)."""
    cpu = tmp_path / "cpu.json"
    cpu.write_text(json.dumps({"rows": [{"policy": "a", "seeds": [0, 1], "test_errors": [20.4, 20.8]},
                                        {"policy": "b", "seeds": [0], "test_errors": [21.0]},
                                        {"policy": "c", "seeds": [0, 1], "test_errors": [21.2, 21.0]}]}))
    gpu, cpu_errors = paired.load_errors(table), paired.load_errors(cpu)
    noise = (0.3, 10)
    r = paired.blocked_contrast([([gpu["a"], gpu["c"]], [gpu["b"]]),
                                 ([cpu_errors["a"], cpu_errors["c"]], [cpu_errors["b"]])], noise)
    v_gpu, v_cpu = (1 / 3 + 1 / 2) / 4 + 1 / 3, (1 / 2 + 1 / 2) / 4 + 1
    d_gpu = ((19.4 + 19.7 + 19.6) / 3 + (20.5 + 20.1) / 2) / 2 - (20.0 + 19.9 + 20.4) / 3
    d_cpu = (20.6 + 21.1) / 2 - 21.0
    assert r["per_block"] == pytest.approx([d_gpu, d_cpu])
    assert r["difference"] == pytest.approx((d_gpu / v_gpu + d_cpu / v_cpu) / (1 / v_gpu + 1 / v_cpu))
    assert r["se"] == pytest.approx(0.3 / math.sqrt(1 / v_gpu + 1 / v_cpu))

    out = tmp_path / "paired.md"
    assert paired.main([str(table), "--contrast", "a+c=b", "--block", str(cpu), "--out", str(out)]) == 0
    assert "| a + c | b | 3 + 2 / 3, -0.17; 2 + 2 / 1, -0.15 |" in out.read_text()
