"""``benchmarks/campaigns/issue21_gpu.sh``, the one device call for issue 21's GPU figures, run on the CPU with a
stand-in ``python3`` on the PATH: the budget decides which steps run, a step's exit status is recorded, and
a step the script does not know stops it before anything runs."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "campaigns" / "issue21_gpu.sh"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None,
                                reason="needs bash and coreutils' timeout")


def _run(tmp_path: Path, *args: str, dry: bool = False) -> subprocess.CompletedProcess:
    """The script with ``python3`` standing in: it records its arguments and fails (exit 3) for search_cost."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "python3"
    fake.write_text('#!/usr/bin/env bash\necho "$@" >> "$CALLS"\n[[ "$*" == *search_cost.py* ]] && exit 3\nexit 0\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "OUT": str(tmp_path / "out"),
           "CALLS": str(tmp_path / "calls.txt"), "HBA_DATA_DIR": "/data"}
    env.pop("DRY_RUN", None)
    if dry:
        env["DRY_RUN"] = "1"
    return subprocess.run(["bash", str(SCRIPT), "abc1234", *args], env=env, capture_output=True, text=True,
                          cwd=tmp_path, timeout=60)


def test_the_budget_decides_which_steps_run(tmp_path):
    done = _run(tmp_path, "450", dry=True)
    assert done.returncode == 0, done.stderr
    planned = [line.split()[2] for line in done.stdout.splitlines() if line.startswith("would run")]
    # 90 s of CUDA tests and the 200-s fused-models probe fit 450 s; the 240-s fused training does not fit the
    # 160 s left, the 90-s NCHW probe does; of the later steps only the last, the 40-s index probe, fits the 70 s
    # left: a step that fits runs even after others were skipped.
    assert planned == ["cuda_tests", "fused_models", "fused_models_nchw", "index_dtype"]
    assert "skipped for want of time: train_fused8 compiled_224 compiled_32_65536 compiled_32_1024" in done.stdout
    assert "benchmarks/fused_models.py --device cuda --amp --channels-last" in done.stdout
    assert not (tmp_path / "calls.txt").exists()  # a dry run runs nothing, not even the install


def test_each_step_runs_with_its_status_recorded(tmp_path):
    done = _run(tmp_path, "1000", "cuda_tests", "search_cost", "compiled_224_t4")
    assert done.returncode == 0, done.stderr
    calls = (tmp_path / "calls.txt").read_text().splitlines()
    assert calls[0].startswith("-m pip install")
    assert calls[1] == "-m pytest -q -p no:cacheprovider -m cuda"
    assert calls[2].startswith("benchmarks/search_cost.py --device cuda --data-dir /data")
    # The JSON of the compile options reaches the benchmark as one argument.
    assert '--compile-options {"options":{"realize_reads_threshold":4}} --out' in calls[3]
    summary = (tmp_path / "out" / "issue21_summary.txt").read_text().splitlines()
    assert [line.split(",")[0] for line in summary] == ["cuda_tests: exit 0", "search_cost: exit 3",
                                                        "compiled_224_t4: exit 0"]


def test_an_unknown_step_stops_the_call_before_anything_runs(tmp_path):
    done = _run(tmp_path, "1000", "cuda_tests", "compiled_244")
    assert done.returncode == 2
    assert "unknown step: compiled_244" in done.stderr
    assert not (tmp_path / "calls.txt").exists()
