"""A population search's members trained as one fused network (``--population-fuse``,
``hba_augment.search._member.FusedWorker``): each member trains, is scored and is saved as it is by a
:class:`~hba_augment.search._member.Worker`, exploits included, and whole searches run and resume."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import mid_magnitudes
from test_search_population import _config, _fake_cifar, _without_times

from hba_augment._space import NUM_COPIES, NUM_OPS
from hba_augment.cli import main
from hba_augment.datasets import load_dataset, reduced_split
from hba_augment.schedule import Schedule
from hba_augment.search._member import FusedWorker, Worker
from hba_augment.search.loop import SearchConfig
from hba_augment.search.population import PopulationConfig, run_population_search

pytestmark = pytest.mark.usefixtures("torch_single_thread_per_test")


@pytest.fixture(scope="module")
def fake_data(tmp_path_factory):
    root = _fake_cifar(tmp_path_factory.mktemp("fake"))
    return reduced_split(load_dataset("cifar10", root), 40, 20, seed=1)


def _plain_search(**kw) -> SearchConfig:
    """No random augmentation at all (no baseline, policies of probability 0): members train deterministically."""
    return SearchConfig.from_preset("cifar10", **{"data_dir": "unused", "model": "wrn-10-1", "epochs": 4,
                                                  "train_size": 40, "val_size": 20, "batch_size": 16, "seed": 1,
                                                  "flip": False, "crop_padding": 0, "cutout": 0, **kw})


def _tasks(folder, weights=None, members=(0, 1, 2)):
    zero = np.zeros((NUM_COPIES, NUM_OPS))
    return [{"member": m, "prob": zero, "mag": mid_magnitudes(), "epochs": 2, "save": str(folder / f"m{m}.pt"),
             "weights": None if weights is None else weights.get(m), "streams": None} for m in members]


def _relative(a, b):
    num = sum(float((a[k].float() - v.float()).square().sum()) for k, v in b.items() if v.is_floating_point())
    return (num / sum(float(v.float().square().sum()) for v in b.values() if v.is_floating_point())) ** 0.5


def _train_and_exploit_as_plain(config, fake_data, tmp_path, score_ema, loss_rel, weights_rel, momenta_rel):
    """Two rounds, the second with an exploit (member 2 takes member 0's weights, momentum and, with
    ``score_ema``, weights' average), by a plain and a fused worker: records and saved states agree within
    the tolerances given."""
    plain = Worker(config, *fake_data, [0, 1, 2], score_ema)
    fused = FusedWorker(config, *fake_data, [0, 1, 2], score_ema)
    for round_, weights in enumerate((None, {2: "m0.pt"})):
        out = {name: tmp_path / f"{name}{round_}" for name in ("plain", "fused")}
        records = {}
        for name, worker in (("plain", plain), ("fused", fused)):
            out[name].mkdir()
            donors = None if weights is None else {m: tmp_path / f"{name}{round_ - 1}" / f for m, f in weights.items()}
            records[name] = worker.run_round(_tasks(out[name], donors))
        for a, b in zip(records["plain"], records["fused"], strict=True):
            assert a["member"] == b["member"] and b["finite"]
            assert b["train_loss"] == pytest.approx(a["train_loss"], rel=loss_rel)
            assert b["val_loss"] == pytest.approx(a["val_loss"], rel=loss_rel)
            assert abs(b["val_acc"] - a["val_acc"]) <= 1 / 20 + 1e-9
        for m in (0, 1, 2):
            a = torch.load(out["plain"] / f"m{m}.pt", weights_only=True)
            b = torch.load(out["fused"] / f"m{m}.pt", weights_only=True)
            assert a.keys() == b.keys() and (a["step"], a["epoch"]) == (b["step"], b["epoch"])
            assert torch.equal(a["g_data"], b["g_data"])  # each member's own data order
            assert _relative(b["model"], a["model"]) < weights_rel
            assert ("ema" in b) == (score_ema is not None) and ("ema" not in b or _relative(b["ema"], a["ema"]) < weights_rel)
            momenta = {j: s["momentum_buffer"] for j, s in a["optimizer"]["state"].items()}
            assert _relative({j: s["momentum_buffer"] for j, s in b["optimizer"]["state"].items()}, momenta) < momenta_rel
    # The exploit took effect: member 2 left round 1 from member 0's weights, not its own.
    a0 = torch.load(tmp_path / "fused1" / "m0.pt", weights_only=True)["model"]
    a2 = torch.load(tmp_path / "fused1" / "m2.pt", weights_only=True)["model"]
    assert _relative(a2, a0) < 0.5


@pytest.mark.parametrize("score_ema", [None, 0.9])
def test_fused_members_train_and_exploit_as_plain_ones(fake_data, tmp_path, score_ema):
    """Up to rounding: weights within 1e-3 of their norm (the same members in another memory format differ by
    more, tests/test_fused.py); losses within 5e-4 (grouped and plain convolutions round differently by CPU:
    3.4e-4 on an AMD EPYC, within 2e-4 on the Xeon of earlier sessions)."""
    _train_and_exploit_as_plain(_plain_search(), fake_data, tmp_path, score_ema, 5e-4, 1e-3, 0.05)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_fused_members_train_and_exploit_as_plain_ones(fake_data, tmp_path):
    """bfloat16, channels-last, cuDNN's grouped convolutions, the weights' average: a fused round and an
    exploit end near a plain worker's (CUDA is not bit-exact and bfloat16 rounds coarsely; a wrong slice,
    order or state differs by far more: on the CPU another member's weights lie 1.0 of their norm away after
    a round, its momenta 1.4)."""
    config = _plain_search(device="cuda", amp=True, channels_last=True)
    _train_and_exploit_as_plain(config, fake_data, tmp_path, 0.9, 0.05, 0.05, 0.3)


def test_a_fused_worker_trains_all_its_members_together(fake_data, tmp_path):
    worker = FusedWorker(_plain_search(), *fake_data, [0, 2])
    with pytest.raises(ValueError, match=r"tasks for members \[0, 2\]"):
        worker.run_round(_tasks(tmp_path, members=(0,)))
    tasks = _tasks(tmp_path, members=(0, 2))
    tasks[1]["epochs"] = 1
    with pytest.raises(ValueError, match="same epochs"):
        worker.run_round(tasks)


def test_fused_members_share_one_process_unless_told_otherwise():
    fused = PopulationConfig(search=_plain_search(), population=8, population_fuse=True)
    assert fused.procs == 1 and PopulationConfig(search=_plain_search(), population=8).procs == 8
    assert PopulationConfig(search=_plain_search(), population=8, population_fuse=True, population_procs=2).procs == 2


@pytest.mark.parametrize(("kw", "match"), [({"cuda_graphs": True}, "does not take cuda_graphs"),
                                           ({"model": "resnet-18"}, "needs a WRN"),
                                           ({"population_lanes": 2}, "does not take population_lanes")])
def test_fused_members_refuse_what_they_cannot_do(kw, match):
    search = _plain_search(**{k: v for k, v in kw.items() if k != "population_lanes"})
    config = PopulationConfig(search=search, population=2, population_procs=0, population_fuse=True,
                              **{k: v for k, v in kw.items() if k == "population_lanes"})
    with pytest.raises(ValueError, match=match):
        config.validate()


def test_a_fused_population_search_runs_and_resumes_bit_for_bit(fake_data, tmp_path):
    config = _config(population_fuse=True)
    whole = run_population_search(config, tmp_path / "whole", data=fake_data, plot=False, log=lambda m: None)
    assert whole.schedule.provenance["population_fuse"] is True
    # The members did train fused: the same search unfused draws its augmentations apart and scores otherwise.
    plain = run_population_search(_config(), tmp_path / "plain", data=fake_data, plot=False, log=lambda m: None)
    assert [r["val_acc"] for r in plain.metrics] != [r["val_acc"] for r in whole.metrics]

    def stop_after_round_2(message: str) -> None:
        if message.startswith("round 2/"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_population_search(config, tmp_path / "cut", data=fake_data, plot=False, log=stop_after_round_2)
    resumed = run_population_search(config, tmp_path / "cut", resume=True, data=fake_data, plot=False,
                                    log=lambda m: None)
    np.testing.assert_array_equal(resumed.schedule.prob, whole.schedule.prob)
    assert _without_times(resumed.metrics) == _without_times(whole.metrics)
    # Its members share a stream that each state file holds: it resumes fused only.
    with pytest.raises(KeyboardInterrupt):
        run_population_search(config, tmp_path / "cut2", data=fake_data, plot=False, log=stop_after_round_2)
    with pytest.raises(ValueError, match="population_fuse"):
        run_population_search(_config(), tmp_path / "cut2", resume=True, data=fake_data, plot=False,
                              log=lambda m: None)


def test_the_command_line_fuses_the_members(tmp_path):
    data_dir = _fake_cifar(tmp_path / "data")
    out = tmp_path / "run"
    assert main(["search", "--objective", "population", "--population", "3", "--population-procs", "0",
                 "--population-fuse", "--exploit-every", "1", "--dataset", "cifar10", "--data-dir", str(data_dir),
                 "--model", "wrn-10-1", "--epochs", "2", "--train-size", "40", "--val-size", "20", "--batch-size",
                 "20", "--seed", "2", "--device", "cpu", "--out", str(out), "--no-plot", "--no-progress"]) == 0
    assert Schedule.load(out / "schedule.json").provenance["population_fuse"] is True
    # Not an option of the other objectives.
    assert main(["search", "--population-fuse", "--dataset", "cifar10", "--data-dir", str(data_dir), "--epochs", "1",
                 "--out", str(tmp_path / "other")]) == 2
