"""benchmarks/search_cost.py: the output's structure on a tiny model (timings are not checked)."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
import torch

from hba_augment.datasets import ImageData

pytestmark = pytest.mark.usefixtures("torch_single_thread")

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "search_cost.py"


@pytest.fixture(scope="module")
def search_cost():
    spec = importlib.util.spec_from_file_location("search_cost", _PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["search_cost"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("search_cost", None)


def _images(n: int, seed: int) -> ImageData:
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=g)
    labels = torch.arange(n) % 10
    return ImageData(images, labels, [f"class{i}" for i in range(10)])


def _positive_times(summary: dict, n: int) -> None:
    assert len(summary["wall_s"]) == len(summary["cpu_s"]) == n
    assert all(t >= 0 for t in summary["wall_s"] + summary["cpu_s"])
    assert summary["min_wall_s"] <= summary["median_wall_s"] <= summary["max_wall_s"]


def test_run_benchmark_structure(search_cost):
    lines: list[str] = []
    # One step is rounded up to one search outer iteration (t_train = 2 training steps) for every method.
    result = search_cost.run_benchmark(_images(16, 0), _images(8, 1), model="wrn-10-1", batch_size=8, steps=1,
                                       warmup=0, profile=True, log=lines.append)
    assert lines and result["settings"]["steps"] == 2 and result["settings"]["warmup"] == 0
    assert result["settings"]["rounds"] == 1 and result["settings"]["train_images_used"] == 16
    methods = result["methods"]
    assert list(methods) == list(search_cost.METHODS)
    for name in ("plain", "plain+policy"):
        m = methods[name]
        assert m["timed_steps"] == 2
        _positive_times(m["step"], 2)
    assert methods["plain"]["augment"] is None
    _positive_times(methods["plain+policy"]["augment"], 2)  # the HBA policy's one augment call per batch
    s = methods["search"]
    assert s["timed_steps"] == 2 and s["t_train"] == 2 and s["t_val"] == 1
    _positive_times(s["iteration"], 1)
    _positive_times(s["train_step"], 2)
    _positive_times(s["val_step"], 1)
    _positive_times(s["augment"], 2)  # one functional.augment call per search training step
    assert s["hyper_layers"] == ["block1.0.bn1"]
    assert methods["plain"]["ratio_wall"] == methods["plain"]["ratio_cpu"] == 1.0
    epoch = result["epoch"]
    assert (epoch["training_steps"], epoch["search_outer_iterations"], epoch["search_validation_steps"]) == (500, 250, 250)
    for m in methods.values():
        assert m["epoch_wall_s"] > 0 and math.isfinite(m["ratio_cpu"])
    assert epoch["ratio_wall"] == s["ratio_wall"]
    assert math.isclose(s["epoch_cpu_s"], 250 * s["iteration"]["median_cpu_s"])
    assert math.isclose(methods["plain"]["epoch_cpu_s"], 500 * methods["plain"]["median_cpu_s"])
    for name in ("search", "plain"):
        prof = result["profile"][name]
        assert 0 < len(prof["top"]) <= 15 and prof["total_self_cpu_ms"] > 0
    labels = {e["name"] for e in result["profile"]["search"]["labelled"]}
    assert labels == {"hba: search train_step", "hba: search val_step", "hba: functional.augment"}
    json.dumps(result)  # JSON-compatible throughout

    md = search_cost.render_markdown(result)
    rows = [line for line in md.splitlines() if line.startswith("| ") and not line.startswith("| method")]
    assert [r.split(" | ")[0][2:] for r in rows[:3]] == list(search_cost.METHODS)
    assert "Search / plain per epoch" in md and "Profile (torch.profiler, CPU)" in md


def test_bad_arguments(search_cost):
    with pytest.raises(ValueError, match="need 16 training images"):
        search_cost.run_benchmark(_images(8, 0), _images(8, 1), model="wrn-10-1", batch_size=8, steps=1)
    with pytest.raises(ValueError, match="steps >= 1"):
        search_cost.run_benchmark(_images(16, 0), _images(8, 1), model="wrn-10-1", batch_size=8, steps=0)


def test_command_line_writes_json_and_markdown(search_cost, cifar_dir: Path, tmp_path: Path, capsys):
    data_dir = cifar_dir
    out = tmp_path / "sc"
    assert search_cost.main(["--model", "wrn-10-1", "--batch-size", "8", "--steps", "1", "--warmup", "0",
                             "--data-dir", str(data_dir), "--out", str(out)]) == 0
    result = json.loads(Path(f"{out}.json").read_text())
    assert set(result) == {"header", "load", "settings", "methods", "epoch"}
    assert result["header"]["command"].startswith("python benchmarks/search_cost.py --model wrn-10-1")
    assert len(result["load"]["before"]) == len(result["load"]["after"]) == 3
    md = Path(f"{out}.md").read_text()
    assert md == capsys.readouterr().out.removesuffix("\n") and "Load average" in md
