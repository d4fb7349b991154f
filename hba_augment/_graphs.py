"""CUDA graphs of calls that are bound by kernel launches (issue 21): one home for the warm-up and capture rules.

Used by the transform (``HBAPolicy(cuda_graphs=True)``), the searches (``search --cuda-graphs``) and, through
:data:`GRAPH_WARMUP_STEPS`, the training steps of ``hba_augment._runner.CapturedStep``. Nothing here reads a
tensor's value on the host.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

__all__ = ["GRAPH_WARMUP_STEPS", "CapturedCall"]

#: Eager calls before a call is captured: cudnn's autotuning, lazily made state (momentum buffers) and the
#: allocator's caches settle first, as ``torch.cuda.graphs`` asks.
GRAPH_WARMUP_STEPS = 3


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
        self.eager_calls = 0

    @property
    def captured(self) -> bool:
        return self.graph is not None

    def reset(self) -> None:
        """Forget the graph (after tensors it holds were replaced, e.g. by loading a checkpoint): the next
        calls warm up and capture again."""
        self.graph, self.eager_calls = None, 0

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
        if self.graph is None and self.eager_calls < self.warmup:
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                out = self.call(*self.static)
            torch.cuda.current_stream(self.device).wait_stream(side)
            self.eager_calls += 1
            return out
        if self.graph is None:
            graph = torch.cuda.CUDAGraph()
            for generator in self.generators:
                graph.register_generator_state(generator)
            # Not torch.cuda.graph, which synchronises the whole device and captures on a stream shared by
            # every graph of the process: lanes (hba_augment._lanes) capture in several threads at once, on
            # streams of their own, while other lanes run (thread-local capture).
            current = torch.cuda.current_stream(self.device)
            capture = torch.cuda.Stream(self.device)
            capture.wait_stream(current)
            with torch.cuda.stream(capture):
                graph.capture_begin(capture_error_mode="thread_local")
                try:
                    self.outputs = self.call(*self.static)
                finally:
                    graph.capture_end()
            current.wait_stream(capture)
            self.graph = graph
        self.graph.replay()  # (after a capture, which only records the call, this runs it)
        if self.outputs is None:
            return None
        if isinstance(self.outputs, tuple):
            return tuple(t.clone() for t in self.outputs)
        return self.outputs.clone()
