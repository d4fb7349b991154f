"""train --cuda-graphs (issue 21, section 2): every full batch's whole step replayed from one CUDA graph.

On the CPU the same static-buffer step runs eagerly (``_runner.CapturedStep``), so these tests check what
the graph would replay: the same training as the ordinary path (the fused SGD's rounding aside), the
policy of each epoch, the short last batch, checkpoints either path can resume. The capture itself is
checked where a GPU is (``-m cuda``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from hba_augment import _graphs, _runner
from hba_augment.train.cli import build_parser
from hba_augment.train.trainer import TrainConfig, train_and_evaluate

pytestmark = pytest.mark.usefixtures("torch_single_thread")

# 72 images in batches of 32: two full batches (replayed) and a short one of 8 (eager) each epoch.
_SMALL = {"model": "wrn-10-1", "epochs": 2, "train_size": 72, "test_size": 32, "batch_size": 32, "num_workers": 0}


def _config(cifar_dir: Path, policy: str, device: str = "cpu", **overrides) -> TrainConfig:
    return TrainConfig.from_preset(data_dir=str(cifar_dir), policy=policy, device=device, **{**_SMALL, **overrides})


def _weights(out: Path) -> dict[str, torch.Tensor]:
    return torch.load(out / "checkpoint.pt", map_location="cpu", weights_only=True)["model"]


def _assert_close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float) -> None:
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name].float(), b[name].float(), atol=atol, rtol=0, msg=name)


@pytest.mark.parametrize("policy", ["hba:cifar10", "cutout"])
def test_the_static_step_trains_as_the_ordinary_one(cifar_dir: Path, tmp_path: Path, policy: str):
    """Same seed, same draws, same updates: the weights after two epochs agree but for the fused SGD
    kernel's rounding, and so does every epoch's record."""
    plain = train_and_evaluate(_config(cifar_dir, policy), tmp_path / "plain", progress=False, log=lambda m: None)
    graphs = train_and_evaluate(_config(cifar_dir, policy, cuda_graphs=True), tmp_path / "graphs", progress=False,
                                log=lambda m: None)
    _assert_close(_weights(tmp_path / "plain"), _weights(tmp_path / "graphs"), atol=1e-4)
    for a, b in zip(plain.history, graphs.history, strict=True):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-4)
        assert a["train_acc"] == b["train_acc"] and a["lr"] == b["lr"]
    assert graphs.test_error == pytest.approx(plain.test_error, abs=100 / 32 + 1e-9)  # one image at most
    assert graphs.summary["config"]["cuda_graphs"] is True


def test_a_changed_policy_changes_the_static_step(cifar_dir: Path, tmp_path: Path, monkeypatch):
    """The graph reads the epoch's policy from static tensors: a step must see each epoch's, not the first's."""
    from hba_augment.train import trainer

    seen = []
    real = trainer._Trainer._graph_step

    def spy(self, x, y):
        seen.append((self.epoch, self.static_prob.clone()))
        real(self, x, y)

    monkeypatch.setattr(trainer._Trainer, "_graph_step", spy)
    config = _config(cifar_dir, "hba:cifar10", cuda_graphs=True, epochs=3)
    train_and_evaluate(config, tmp_path, progress=False, log=lambda m: None)
    from hba_augment import HBAPolicy

    policy = HBAPolicy("cifar10", total_epochs=3)
    for epoch, prob in seen:
        policy.set_epoch(epoch)
        torch.testing.assert_close(prob, policy.policy_at("cpu")[0])
    assert len({e for e, _ in seen}) == 3 and len(seen) == 9


@pytest.mark.parametrize("first", [True, False])
def test_checkpoints_resume_across_the_two_paths(cifar_dir: Path, tmp_path: Path, first: bool):
    """A checkpoint holds the same optimiser either way (a number for the rate): one path resumes the other's."""
    whole = tmp_path / "whole"
    train_and_evaluate(_config(cifar_dir, "hba:cifar10"), whole, progress=False, log=lambda m: None)
    split = tmp_path / "split"

    class Stop(Exception):
        pass

    def stop(entry):
        raise Stop

    with pytest.raises(Stop):  # after the first of two epochs
        train_and_evaluate(_config(cifar_dir, "hba:cifar10", cuda_graphs=first), split, progress=False,
                           log=lambda m: None, on_epoch_end=stop)
    saved = torch.load(split / "checkpoint.pt", map_location="cpu", weights_only=True)["optimizer"]
    assert all(isinstance(g["lr"], float) and g["fused"] is None for g in saved["param_groups"])
    result = train_and_evaluate(_config(cifar_dir, "hba:cifar10", cuda_graphs=not first), split, resume=True,
                                progress=False, log=lambda m: None)
    assert [r["epoch"] for r in result.history] == [1, 2]
    _assert_close(_weights(whole), _weights(split), atol=1e-4)


def test_cuda_graphs_is_refused_with_compile_and_read_from_the_command_line(cifar_dir: Path):
    with pytest.raises(ValueError, match="cuda_graphs=True and compile=True exclude each other"):
        _config(cifar_dir, "cutout", cuda_graphs=True, compile=True).validate()
    required = ["--data-dir", "d", "--policy", "cutout", "--out", "o"]
    assert build_parser().parse_args([*required, "--cuda-graphs"]).cuda_graphs is True
    assert build_parser().parse_args(required).cuda_graphs is None  # the config's default: off


def test_a_captured_step_runs_its_function_every_call_off_cuda():
    calls = []
    step = _runner.CapturedStep(lambda x, y: calls.append((x, y)), (4, 3, 8, 8), torch.device("cpu"))
    full, short = torch.zeros(4, 3, 8, 8, dtype=torch.uint8), torch.zeros(2, 3, 8, 8, dtype=torch.uint8)
    for x in (full, full, full, full, short):
        step(x, torch.zeros(len(x), dtype=torch.int64))
    assert len(calls) == 5 and not step.captured
    assert all(x is full for x, _ in calls[:4]) and calls[4][0] is short  # the batch itself, no copy


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_the_step_is_captured_and_trains_as_eager(cifar_dir: Path, tmp_path: Path):
    """Warm-up, capture, replay: a replayed run ends near the eager one (CUDA is not bit-exact)."""
    config = dict(epochs=2, train_size=256, batch_size=32, amp=True)
    eager = train_and_evaluate(_config(cifar_dir, "hba:cifar10", "cuda", **config), tmp_path / "eager",
                               progress=False, log=lambda m: None)
    graphs = train_and_evaluate(_config(cifar_dir, "hba:cifar10", "cuda", cuda_graphs=True, **config),
                                tmp_path / "graphs", progress=False, log=lambda m: None)
    for a, b in zip(eager.history, graphs.history, strict=True):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=0.05)


# ---------------------------------------------------------------------------------------------------------
# search --cuda-graphs: the hypernetwork and teacher objectives replay each full batch's augmentation call.
# ---------------------------------------------------------------------------------------------------------


def test_a_captured_call_runs_its_function_every_call_off_cuda():
    calls = []

    def call(x, p):
        calls.append(x)
        return x + 1, p

    captured = _graphs.CapturedCall(call, torch.device("cpu"))
    full, short = torch.zeros(4, 3), torch.zeros(2, 3)
    for x in (full, full, full, full, full, short):
        out, p = captured(x, torch.ones(len(x)))
        assert torch.equal(out, x + 1) and torch.equal(p, torch.ones(len(x)))
    assert len(calls) == 6 and not captured.captured
    assert all(x is full for x in calls[:5]) and calls[5] is short  # the inputs themselves, no copy


@pytest.mark.parametrize("hyper_input", ["hparams", "applied"])
def test_the_search_with_cuda_graphs_searches_as_without(cifar_dir: Path, tmp_path: Path, hyper_input: str):
    # On the CPU the captured call is the call itself: the same draws, the same schedule, bit for bit. The
    # applied hyper-input takes augment's second output through the same call.
    from hba_augment.datasets import load_dataset, reduced_split
    from hba_augment.search import loop
    from hba_augment.search.cli import build_parser as search_parser
    from hba_augment.search.cli import config_from_args

    data = reduced_split(load_dataset("cifar10", cifar_dir), 72, 32, seed=0)
    results = []
    for graphs in (False, True):
        config = loop.SearchConfig.from_preset("cifar10", dataset="cifar10", data_dir="unused", model="wrn-10-1",
                                               epochs=2, train_size=72, val_size=32, batch_size=32, init="trivialaugment",
                                               hyper_input=hyper_input, cuda_graphs=graphs)
        results.append(loop.run_search(config, tmp_path / str(graphs), data=data, progress=False, plot=False,
                                       log=lambda m: None))
    eager, graphs = results
    np.testing.assert_array_equal(graphs.schedule.prob, eager.schedule.prob)
    np.testing.assert_array_equal(graphs.schedule.mag, eager.schedule.mag)  # NaN where an op has none
    assert [m["train_loss"] for m in graphs.metrics] == [m["train_loss"] for m in eager.metrics]
    args = search_parser().parse_args(["--data-dir", "d", "--out", "o", "--cuda-graphs"])
    assert config_from_args(args, "cpu").cuda_graphs is True
    assert config_from_args(search_parser().parse_args(["--data-dir", "d", "--out", "o"]), "cpu").cuda_graphs is False


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_a_captured_augment_call_gives_the_eager_pixels(cifar_images):
    """Warm-up, capture, replays: with per-image policies and the search's own generator, every call gives the
    pixels the eager call gives from the same generator state, and the generator ends where eager's does."""
    from hba_augment.functional import NUM_OPS, OPS, augment

    device = torch.device("cuda")
    images = cifar_images[:32].to(device)
    prob = torch.full((32, 2, NUM_OPS), 0.5, device=device)
    # Per-image magnitudes anywhere in each op's range (0 for the ops without one), as the search draws them.
    low = torch.tensor([spec.low or 0.0 for spec in OPS], device=device)
    high = torch.tensor([spec.high or 0.0 for spec in OPS], device=device)
    mag = low + (high - low) * torch.rand(32, 2, NUM_OPS, generator=torch.Generator(device).manual_seed(1), device=device)
    streams = [torch.Generator(device).manual_seed(5) for _ in range(2)]

    def call(x, p, m, generator=streams[1]):
        return augment(x, p, m, generator=generator, check_policy=False, return_applied=True)

    captured = _graphs.CapturedCall(call, device, (streams[1],))
    for _ in range(_graphs.GRAPH_WARMUP_STEPS + 3):
        expected, expected_applied = augment(images, prob, mag, generator=streams[0], check_policy=False,
                                             return_applied=True)
        out, applied = captured(images, prob, mag)
        assert torch.equal(out, expected) and torch.equal(applied, expected_applied)
    assert captured.captured
    assert torch.equal(torch.rand(4, generator=streams[0], device=device),
                       torch.rand(4, generator=streams[1], device=device))


# -- the capture gate (lanes: a capture meets no other thread's call) ----------------------------------------


def _wait_until(gate: _graphs.CaptureGate, predicate) -> None:
    """Wait, on the gate's own condition (notified whenever a thread starts waiting), until ``predicate``."""
    with gate._cond:
        assert gate._cond.wait_for(predicate, timeout=60), "the gate never reached the expected state"


def test_the_capture_gate_lets_calls_share_it_and_a_capture_wait_for_them_and_go_first():
    import threading

    gate = _graphs.CaptureGate()
    order: list[str] = []
    release_call = threading.Event()

    def first_call():
        with gate.call():
            order.append("call-1 in")
            release_call.wait(timeout=60)
            order.append("call-1 out")

    def capture():
        with gate.capture():
            order.append("capture")

    def later_call():
        with gate.call():
            order.append("call-2")

    threads = [threading.Thread(target=first_call)]
    threads[0].start()
    _wait_until(gate, lambda: gate._calls == 1)
    with gate.call():  # a second call shares the gate with the first at once
        order.append("main call")
    threads.append(threading.Thread(target=capture))
    threads[1].start()
    _wait_until(gate, lambda: gate._waiting_captures == 1)  # held back by the running call
    threads.append(threading.Thread(target=later_call))
    threads[2].start()
    _wait_until(gate, lambda: gate._waiting_calls == 1)  # held back by the waiting capture
    assert order == ["call-1 in", "main call"]
    release_call.set()
    for thread in threads:
        thread.join(timeout=60)
    assert order == ["call-1 in", "main call", "call-1 out", "capture", "call-2"]
    assert (gate._calls, gate._capturing, gate._waiting_calls, gate._waiting_captures) == (0, False, 0, 0)


def test_a_thread_holding_the_capture_gate_passes_it_again():
    # A call nested in a call (a policy's graph inside a captured step) must not wait for itself. In a thread
    # of its own, so that a gate that did wait fails this test instead of hanging the suite.
    import threading

    gate = _graphs.CaptureGate()
    seen = []

    def nested():
        with gate.call(), gate.capture(), gate.call():
            seen.append((gate._calls, gate._capturing))
        with gate.capture(), gate.call():
            seen.append((gate._calls, gate._capturing))

    thread = threading.Thread(target=nested, daemon=True)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "the gate made a thread wait for itself"
    assert seen == [(1, False), (0, True)]
    assert (gate._calls, gate._capturing) == (0, False)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_a_refused_capture_leaves_the_call_eager():
    # A host read cannot be captured: CUDA invalidates the capture; the call warns once and stays eager, and
    # its generator, registered with the refused graph, still draws eagerly.
    device = torch.device("cuda")
    x = torch.arange(6.0, device=device)
    g = torch.Generator(device=device).manual_seed(0)

    def call(t):
        return t * 2 + torch.rand(t.shape, device=device, generator=g) * 0 + float(t.sum()) * 0

    captured = _graphs.CapturedCall(call, device, (g,))
    with pytest.warns(RuntimeWarning, match="capture failed"):
        for _ in range(_graphs.GRAPH_WARMUP_STEPS + 3):
            assert torch.equal(captured(x), x * 2)
    assert captured.failed and not captured.captured
    assert torch.equal(captured(x), x * 2)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_lanes_warm_up_and_capture_side_by_side():
    """Four lanes warm up and capture a network's whole training step at the same time, five rounds over:
    every capture succeeds (on an H200, before the gate, one process in eight with three lanes had its
    capture invalidated, 2026-11-28)."""
    from hba_augment import _lanes

    device = torch.device("cuda")

    def lane(seed: int):
        def run() -> bool:
            with _lanes.GLOBAL_RNG_LOCK:
                torch.manual_seed(seed)
                net = torch.nn.Sequential(
                    torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                    torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10)).to(device)
            opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)

            def step(x, y):
                opt.zero_grad(set_to_none=True)
                loss = torch.nn.functional.cross_entropy(net(x), y)
                loss.backward()
                opt.step()
                return loss.detach()

            g = torch.Generator(device=device).manual_seed(seed)
            x = torch.randn(32, 3, 16, 16, device=device, generator=g)
            y = torch.randint(0, 10, (32,), device=device, generator=g)
            captured = _graphs.CapturedCall(step, device)
            losses = [captured(x, y) for _ in range(_graphs.GRAPH_WARMUP_STEPS + 4)]
            return captured.captured and not captured.failed and bool(torch.isfinite(torch.stack(losses)).all())

        return run

    for _ in range(5):
        outcomes = _lanes.side_by_side([lane(seed) for seed in range(4)], device)
        assert [(o.value, o.error) for o in outcomes] == [(True, None)] * 4
