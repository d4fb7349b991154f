"""benchmarks/rerun_noise.py: the same recorded run on two machines, and the noise of one run it implies."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import policy_quality
import rerun_noise

_AMD, _INTEL = "CPU: AMD EPYC, 2 cores", "CPU: Intel(R) Xeon(R) Processor, 2 cores"


def _record(root: Path, folder: str, name: str, *, policy: str, seed: int, machine: str, error: float,
            loss: float = 0.8, test_size: int | None = None, digest: str | None = "abc") -> None:
    key = ["train", "--model", "wrn-16-1", "--policy", policy, "--epochs", "100", "--seed", str(seed)]
    key += ["--test-size", str(test_size)] if test_size else []
    key += [f"{policy_quality.SCHEDULE_DIGEST}{digest}"] if digest else []
    result = {"test_error": error, "test_loss": loss, "test_images": 10000,
              "config": {"model": "wrn-16-1", "device_description": machine, "data_fingerprint": "f"}}
    path = root / folder / "results" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"key": key, "wall_seconds": 1.0, "result": result}))


def test_the_same_run_under_another_path_and_test_size_pairs_across_machines(tmp_path: Path):
    # The same schedule content under two paths, the whole test split against --test-size of its size.
    _record(tmp_path, "old", "pba-seed0", policy="hba:a/pba.json", seed=0, machine=_AMD, error=25.6, loss=0.78)
    _record(tmp_path, "new", "pba-seed0", policy="hba:b/pba.json", seed=0, machine=_INTEL, error=26.5, loss=0.79,
            test_size=10000)
    _record(tmp_path, "old", "pba-seed1", policy="hba:a/pba.json", seed=1, machine=_AMD, error=25.8)
    _record(tmp_path, "new", "pba-seed1", policy="hba:b/pba.json", seed=1, machine=_INTEL, error=25.2)
    pairs = rerun_noise.rerun_pairs(rerun_noise.load_runs(tmp_path))
    assert sorted(round(b["test_error"] - a["test_error"], 6) for a, b in pairs) == [-0.6, 0.9]
    summary = rerun_noise.summarise(pairs)
    rms = math.sqrt((0.9 ** 2 + 0.6 ** 2) / 2)
    assert summary["pairs"] == 2 and math.isclose(summary["rms"], rms)
    assert math.isclose(summary["run_sd"], rms / math.sqrt(2)) and math.isclose(summary["mean"], 0.15)


def test_other_runs_and_copies_on_one_machine_do_not_pair(tmp_path: Path):
    _record(tmp_path, "a", "x-seed0", policy="hba:x.json", seed=0, machine=_AMD, error=25.0)
    _record(tmp_path, "b", "x-seed0", policy="hba:x.json", seed=0, machine=_AMD, error=25.0)  # a copy: same machine
    _record(tmp_path, "c", "x-seed1", policy="hba:x.json", seed=1, machine=_INTEL, error=26.0)  # another seed
    _record(tmp_path, "d", "y-seed0", policy="hba:y.json", seed=0, machine=_INTEL, error=27.0, digest="other")
    _record(tmp_path, "e", "t-seed0", policy="trivialaugment", seed=0, machine=_INTEL, error=28.0, digest=None)
    assert rerun_noise.rerun_pairs(rerun_noise.load_runs(tmp_path)) == []
    assert rerun_noise.summarise([]) == {"pairs": 0}


def test_main_writes_the_table(tmp_path: Path, capsys):
    _record(tmp_path, "old", "t-seed0", policy="trivialaugment", seed=0, machine=_AMD, error=28.0, digest=None)
    _record(tmp_path, "new", "t-seed0", policy="trivialaugment", seed=0, machine=_INTEL, error=27.5, digest=None)
    out = tmp_path / "noise.md"
    assert rerun_noise.main(["--root", str(tmp_path), "--model", "wrn-16-1", "--out", str(out)]) == 0
    text = out.read_text()
    assert text == capsys.readouterr().out
    assert "(trivialaugment) | 0 | CPU: AMD EPYC | CPU: Intel(R) Xeon(R) Processor | 28.00 | 27.50 | -0.50 |" in text
    assert "1 pairs: B - A mean -0.50" in text
    assert rerun_noise.main(["--root", str(tmp_path), "--model", "wrn-40-2"]) == 0
    assert "pairs:" not in capsys.readouterr().out  # no run of that network
