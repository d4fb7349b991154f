"""Several independent runs side by side in one process ("lanes"): one thread and, on CUDA, one stream each.

Why: a training of a small network on a GPU is bound by launching kernels, and several trainings in separate
processes take turns on the GPU (without MPS, the GPU runs one process's kernels at a time): on an H100,
eight processes reached 3.7x the steps per second of one (``benchmarks/results/cuda/train_speed.md``). Runs
in one process can share the GPU instead: kernels of different CUDA streams run at the same time, and with
CUDA graphs (``--cuda-graphs``) a lane's whole step costs its thread one launch, so the threads hardly
compete for Python's interpreter lock.

What a lane's code must keep to (``hba-augment train`` with several seeds, the population search's members):

- It draws only from its own generators. Torch's default generator is shared by the threads; code that
  must seed it (building a network from a seed, the per-image policies' seeding of each image) holds
  :data:`GLOBAL_RNG_LOCK` while it does.
- It works on the current CUDA stream (the lane's), as PyTorch's operations do. Each lane's stream first
  waits for the caller's, and the caller's waits for every lane's before :func:`side_by_side` returns, so
  tensors made before or used after the lanes are safe.
- A CUDA graph is captured from the lane's thread alone (``capture_error_mode="thread_local"``, a capture
  stream of its own: :class:`~hba_augment._graphs.CapturedCall`), while no other lane is inside a captured
  call (:data:`~hba_augment._graphs.CAPTURE_GATE`: on an H200 one process in eight failed its capture
  without it, 2026-11-28).
- The kernels' cached constant tensors are the lane's own (:func:`hba_augment.functional.cache_scope`, the
  lane's index): one made on a lane's stream is never read on another lane's, which could read it before it
  is made. A lane of a later call with the same index reads them safely, since its stream waits for the
  caller's, which waited for every earlier lane's.

Each lane's results do not depend on the others: on the CPU they are bit for bit those of the same run
alone (tested).
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeVar

import torch

from hba_augment.functional import cache_scope

__all__ = ["GLOBAL_RNG_LOCK", "Outcome", "side_by_side"]

#: Held by code that seeds and draws from torch's default generator while other lanes may run.
GLOBAL_RNG_LOCK = threading.RLock()

_T = TypeVar("_T")


class Outcome(NamedTuple):
    """What one lane ended with: its call's return value, or the exception it raised (then ``value`` is
    ``None``). (Not generic: a generic NamedTuple needs Python 3.11.)"""

    value: Any
    error: BaseException | None


def side_by_side(calls: Sequence[Callable[[], _T]], device: torch.device | str) -> list[Outcome]:
    """Run ``calls`` at the same time, each in its own thread and, on CUDA, its own stream.

    One call runs in the calling thread on the current stream, as if called directly. A lane that fails does
    not stop the others: every lane runs to its end and reports its own :class:`Outcome`. Each thread runs
    in a copy of the caller's :mod:`contextvars` context. The threads are daemons, so that an interrupt of
    the calling thread ends the process.

    Args:
        calls: the runs, each a callable of no arguments.
        device: the device they run on (``cuda``: a stream each).

    Returns:
        One :class:`Outcome` per call, in order.

    Raises:
        TypeError: ``calls`` holds something that is not callable.
    """
    for i, call in enumerate(calls):
        if not callable(call):
            raise TypeError(f"calls[{i}] must be callable, got {type(call).__name__}")
    device = torch.device(device)
    if len(calls) == 1:
        try:
            return [Outcome(calls[0](), None)]
        except Exception as e:  # reported as the lane's outcome, as with several lanes
            return [Outcome(None, e)]
    cuda = device.type == "cuda"
    origin = torch.cuda.current_stream(device) if cuda else None
    streams = [torch.cuda.Stream(device) for _ in calls] if cuda else [None] * len(calls)
    outcomes: list[Outcome] = [Outcome(None, RuntimeError("lane did not finish"))] * len(calls)

    def lane(i: int) -> None:
        try:
            with cache_scope(("lane", i)):
                if streams[i] is None:
                    value = calls[i]()
                else:
                    streams[i].wait_stream(origin)
                    with torch.cuda.device(device), torch.cuda.stream(streams[i]):
                        value = calls[i]()
            outcomes[i] = Outcome(value, None)
        except BaseException as e:  # reported to the caller, which decides
            outcomes[i] = Outcome(None, e)

    threads = [threading.Thread(target=contextvars.copy_context().run, args=(lane, i), name=f"hba-lane-{i}",
                                daemon=True) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for stream in streams:
        if stream is not None:
            origin.wait_stream(stream)
    return outcomes
