"""benchmarks/fused_models.py: N networks stepped as one (vmap over stacked weights) train as the same N stepped
one after another; the script's table (timings are not checked)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import fused_models


def test_the_fused_step_equals_each_network_stepped_alone():
    worst = fused_models.check("wrn-10-1", 3, 4, torch.device("cpu"))
    assert set(worst) == {"vmap", "grouped"}
    for w in worst.values():
        # float32, the same arithmetic up to the order of sums (a grouped convolution against three).
        assert w["logits"] < 1e-4 and w["weights"] < 1e-5 and w["buffers"] < 1e-5


@pytest.mark.parametrize("mode", ["vmap", "grouped"])
@pytest.mark.parametrize("channels_last", [False, True])
def test_a_member_is_its_own_network_after_steps(mode, channels_last):
    """After three fused steps, network 1 of the stack is network 1 stepped alone on its own rows: nothing of
    network 0's rows reaches it (weights, momentum, running statistics)."""
    device = torch.device("cpu")
    models = fused_models.build("wrn-10-1", 2, device, channels_last=channels_last)
    fused = fused_models.FUSED[mode](models)
    opt = torch.optim.SGD(fused.parameters(), **fused_models.SGD)
    alone = fused_models.build("wrn-10-1", 2, device, channels_last=False)[1]
    opt_alone = torch.optim.SGD(alone.parameters(), **fused_models.SGD)
    g = torch.Generator().manual_seed(0)
    pipe = fused_models.Pipeline(device, augment=False)
    for _ in range(3):
        x = torch.randint(0, 256, (2, 4, 3, 32, 32), dtype=torch.uint8, generator=g)
        y = torch.randint(0, 10, (2, 4), generator=g)
        fused_models.fused_step(fused, opt, pipe, x, y, amp=False, channels_last=channels_last)
        fused_models.loop_step([alone], [opt_alone], pipe, x[1:], y[1:], amp=False, channels_last=False)
    member = fused.member_state_dict(1)
    for name, value in alone.state_dict().items():
        if value.dtype.is_floating_point:
            torch.testing.assert_close(member[name], value, atol=1e-5, rtol=1e-4)


def test_the_script_writes_its_table(tmp_path: Path):
    out = tmp_path / "fused"
    code = fused_models.main(["--device", "cpu", "--model", "wrn-10-1", "--batch-size", "4", "--members", "1,2",
                              "--steps", "1", "--repeats", "1", "--warmup", "1", "--pool", "16", "--threads", "1",
                              "--out", str(out)])
    assert code == 0
    data = json.loads(out.with_suffix(".json").read_text())
    assert [(r["mode"], r["members"]) for r in data["rows"]] == [
        (mode, n) for n in (1, 2) for mode in ("loop", "loop-graphs", "vmap", "grouped", "grouped-graphs")]
    assert all(r["step_seconds"] > 0 and r["logits_dtype"] == "float32" for r in data["rows"])
    assert data["meta"]["check"]["grouped"]["logits"] < 1e-4
    assert "| 2 | grouped |" in out.with_suffix(".md").read_text()


@pytest.mark.parametrize(("flag", "text"), [("--members", "0"), ("--members", "a"), ("--modes", "hfta")])
def test_bad_options_are_refused(flag, text):
    with pytest.raises(SystemExit):
        fused_models.build_parser().parse_args([flag, text])
