"""CUDA graphs of calls that are bound by kernel launches (issue 21): one home for the warm-up and capture rules.

Used by the transform (``HBAPolicy(cuda_graphs=True)``), the searches (``search --cuda-graphs``) and, through
:data:`GRAPH_WARMUP_STEPS`, the training steps of ``hba_augment._runner.CapturedStep``. Nothing here reads a
tensor's value on the host.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence

import torch
from torch import Tensor

__all__ = ["CAPTURE_GATE", "GRAPH_WARMUP_STEPS", "CaptureGate", "CapturedCall"]

#: Eager calls before a call is captured: cudnn's autotuning, lazily made state (momentum buffers) and the
#: allocator's caches settle first, as ``torch.cuda.graphs`` asks.
GRAPH_WARMUP_STEPS = 3


class CaptureGate:
    """A lock that calls share and a capture holds alone: while one thread captures a CUDA graph, no other
    thread of the process is inside a :class:`CapturedCall` (eager or replaying), and no two capture at once.

    Why: lanes (``hba_augment._lanes``) run several trainings' steps in threads of one process. Their captures
    share process-wide state that torch keeps for a capture (the default CUDA generator's capture offsets, the
    caching allocator's capture pools, the one autograd thread per device that runs every lane's backward
    pass). On an H200 on 2026-11-28 one process in eight with three lanes each failed with
    ``cudaErrorStreamCaptureInvalidated`` (``benchmarks/results/cuda/train_speed_lanes.md``); with the gate a
    capture meets none of the other lanes' steps. A capture happens once per training (and after a checkpoint
    is loaded), so the lanes wait for it only then. Waiting captures go before new calls.

    A thread that already holds the gate (a call nested in a call, e.g. a policy's graph inside a captured
    step) passes through it without waiting.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._calls = 0
        self._capturing = False
        self._waiting_captures = 0
        self._waiting_calls = 0
        self._held = threading.local()

    def _depth(self) -> int:
        return getattr(self._held, "depth", 0)

    @contextlib.contextmanager
    def _hold(self, alone: bool) -> Iterator[None]:
        if self._depth():
            self._held.depth += 1
            try:
                yield
            finally:
                self._held.depth -= 1
            return
        with self._cond:
            if alone:
                self._waiting_captures += 1
                self._cond.notify_all()  # (for whoever watches the counts: the tests)
                self._cond.wait_for(lambda: not self._capturing and not self._calls)
                self._waiting_captures -= 1
                self._capturing = True
            else:
                self._waiting_calls += 1
                self._cond.notify_all()
                self._cond.wait_for(lambda: not self._capturing and not self._waiting_captures)
                self._waiting_calls -= 1
                self._calls += 1
        self._held.depth = 1
        try:
            yield
        finally:
            self._held.depth = 0
            with self._cond:
                if alone:
                    self._capturing = False
                else:
                    self._calls -= 1
                self._cond.notify_all()

    def call(self) -> contextlib.AbstractContextManager[None]:
        """Held by an eager or replayed call: many threads at once, none while a capture holds the gate."""
        return self._hold(alone=False)

    def capture(self) -> contextlib.AbstractContextManager[None]:
        """Held by a capture: alone."""
        return self._hold(alone=True)


#: The process's gate (one per process: what it guards is torch's per-process state).
CAPTURE_GATE = CaptureGate()


class CapturedCall:
    """A call from tensors to tensors replayed from one CUDA graph (issue 21: on an H100 the search's augmentation
    of a 128-image batch with per-image policies took 8 ms, bound by launching its kernels;
    ``benchmarks/results/cuda/search_cost.md``).

    ``call(*inputs)`` must read no tensor's value on the host and return a tensor, a tuple of tensors or
    ``None``. The shapes and dtypes of ``example`` (default: the first call's inputs) are the graph's. On
    CUDA, every call with those copies its inputs into static buffers: the first ``warmup`` such calls run
    eagerly on a side stream, the next one captures the call (``torch.cuda.CUDAGraph``, ``generators``
    registered so that replays advance their random streams as eager calls would), and every later one
    replays it: one launch. Other calls (the short last batch of an epoch) and every call on other devices
    run ``call`` eagerly on the inputs themselves, so the same call runs (and is tested) everywhere. Returns
    what ``call`` returns, as new tensors (a replay's outputs are copied out of the graph's, which the next
    replay overwrites).

    Calls and captures go through :data:`CAPTURE_GATE`, so that a capture meets no other thread's call. If CUDA
    refuses a capture, this call runs eagerly from then on (with a ``RuntimeWarning``) rather than ending the
    training that makes it.

    Args:
        call: the call.
        device: where it runs.
        generators: the CUDA generators ``call`` draws from, besides torch's default one.
        warmup: eager calls before the capture.
        example: tensors with the shapes and dtypes of the calls to capture.
    """

    def __init__(self, call: Callable[..., Tensor | tuple[Tensor, ...] | None], device: torch.device,
                 generators: Sequence[torch.Generator] = (), warmup: int = GRAPH_WARMUP_STEPS,
                 example: Sequence[Tensor] | None = None) -> None:
        self.call, self.device, self.warmup = call, device, warmup
        self.generators = tuple(generators) if device.type == "cuda" else ()
        self.static: list[Tensor] | None = None
        if example is not None and device.type == "cuda":
            self.static = [torch.empty_like(t, device=device, memory_format=torch.contiguous_format) for t in example]
        self.outputs: Tensor | tuple[Tensor, ...] | None = None
        self.graph: torch.cuda.CUDAGraph | None = None
        self.side: torch.cuda.Stream | None = None
        self.eager_calls = 0
        self.failed = False
        self._refused: list[torch.cuda.CUDAGraph] = []

    @property
    def captured(self) -> bool:
        return self.graph is not None

    def reset(self) -> None:
        """Forget the graph (after tensors it holds were replaced, e.g. by loading a checkpoint): the next
        calls warm up and capture again."""
        self.graph, self.eager_calls, self.failed = None, 0, False

    def _matches(self, inputs: Sequence[Tensor]) -> bool:
        return self.static is not None and all(
            a.shape == b.shape and a.dtype == b.dtype for a, b in zip(inputs, self.static, strict=True))

    def __call__(self, *inputs: Tensor) -> Tensor | tuple[Tensor, ...] | None:
        if self.device.type != "cuda":
            return self.call(*inputs)
        if self.static is None:
            self.static = [torch.empty_like(t, memory_format=torch.contiguous_format) for t in inputs]
        if not self._matches(inputs):
            return self.call(*inputs)
        for static, tensor in zip(self.static, inputs, strict=True):
            static.copy_(tensor)
        if self.side is None:
            # One stream for this call's warm-up and capture, kept: torch hands streams out round-robin from a
            # pool of 32 per device, and a new one per warm-up call and capture (four a capture) wraps it
            # sooner, handing out again a stream another lane may be using.
            self.side = torch.cuda.Stream(self.device)
        current = torch.cuda.current_stream(self.device)
        if self.graph is None and not self.failed and self.eager_calls < self.warmup:
            with CAPTURE_GATE.call():
                self.side.wait_stream(current)
                with torch.cuda.stream(self.side):
                    out = self.call(*self.static)
                current.wait_stream(self.side)
            self.eager_calls += 1
            return out
        if self.failed:  # a capture failed: this call stays eager (see _capture)
            with CAPTURE_GATE.call():
                return self.call(*self.static)
        if self.graph is None:
            with CAPTURE_GATE.capture():
                captured = self._capture(current)
            if not captured:
                with CAPTURE_GATE.call():
                    return self.call(*self.static)
        with CAPTURE_GATE.call():
            self.graph.replay()  # (after a capture, which only records the call, this runs it)
            if self.outputs is None:
                return None
            if isinstance(self.outputs, tuple):
                return tuple(t.clone() for t in self.outputs)
            return self.outputs.clone()

    def _capture(self, current: torch.cuda.Stream) -> bool:
        """Capture the call on the side stream; ``False`` (with a warning, and eager calls from then on) if
        CUDA refused the capture: a training then goes on at eager speed, with the same steps, instead of
        ending."""
        graph = torch.cuda.CUDAGraph()
        for generator in self.generators:
            graph.register_generator_state(generator)
        # Not torch.cuda.graph, which synchronises the whole device and captures on a stream shared by every
        # graph of the process: lanes (hba_augment._lanes) capture in threads of their own, on streams of
        # their own, while other lanes run (thread-local capture).
        self.side.wait_stream(current)
        try:
            with torch.cuda.stream(self.side):
                graph.capture_begin(capture_error_mode="thread_local")
                try:
                    self.outputs = self.call(*self.static)
                finally:
                    graph.capture_end()
        except RuntimeError as e:
            self.failed, self.outputs = True, None
            # reset() takes the capture's state off the generators (so eager draws work again); the graph is
            # kept alive: a capture_end() that failed leaves torch's allocator a filter that points at it.
            with contextlib.suppress(RuntimeError):
                graph.reset()
            self._refused.append(graph)
            warnings.warn(f"CUDA graph capture failed, running eagerly from now on: {e}", RuntimeWarning,
                          stacklevel=3)
            return False
        current.wait_stream(self.side)
        self.graph = graph
        return True
