"""Running the search and policy evaluation on several processes with ``torchrun`` (part of the run driver).

``torchrun --nproc-per-node N -m hba_augment train ...`` starts N copies of the command with ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT`` in their environment. :func:`session`
joins them into one process group (gloo on the CPU, nccl on CUDA, each process on GPU ``LOCAL_RANK``)
and leaves it at the end; the workers ask :func:`current` where they stand and use the helpers below to
split work and combine results. A command started without ``torchrun`` (or with one process) runs
exactly as before: :data:`SINGLE` stands for it, and every helper is then a no-op.

The rules the workers follow (so that N processes compute one run, not N runs):

* each global batch (the ``--batch-size`` the user gave) is cut into N contiguous shards
  (:func:`shard`), one per rank, so every image of every batch is seen exactly once per epoch;
* test sets are split by whole evaluation batches, round-robin (:func:`eval_batches`), so every test
  image is evaluated exactly once and in the same batch as in a single-process run;
* only rank 0 writes files (:attr:`DistContext.is_main`); everyone waits for it where it matters
  (:func:`barrier`).
"""

from __future__ import annotations

import contextlib
import datetime
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

__all__ = [
    "DEFAULT_TIMEOUT",
    "SINGLE",
    "DistContext",
    "DistributedError",
    "all_gather_objects",
    "all_reduce_sum",
    "barrier",
    "broadcast_buffers",
    "broadcast_object",
    "current",
    "eval_batches",
    "launched",
    "rank_seed",
    "session",
    "shard",
]

#: Seconds a process waits for the others (joining, and in every collective) before it fails.
DEFAULT_TIMEOUT = 1800.0


class DistributedError(RuntimeError):
    """The processes of a distributed run could not start together, or one of them was lost."""


@dataclass(frozen=True)
class DistContext:
    """Where this process stands in the run.

    Attributes:
        rank: this process's rank in ``[0, world_size)``.
        world_size: number of processes.
        local_rank: rank on this machine (the GPU it uses).
        local_world_size: processes on this machine.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that logs and writes files."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """More than one process: the helpers communicate."""
        return self.world_size > 1


#: A run of one process.
SINGLE = DistContext()


def _env_int(name: str, default: int | None = None) -> int:
    text = os.environ.get(name)
    if text is None:
        if default is None:
            raise DistributedError(f"{name} is not set; start distributed runs with torchrun")
        return default
    try:
        return int(text)
    except ValueError:
        raise DistributedError(f"{name} must be an integer, got {text!r}") from None


def launched() -> bool:
    """Whether this process was started by ``torchrun`` (or alike) with more than one process in all."""
    return _env_int("WORLD_SIZE", 1) > 1


def current() -> DistContext:
    """The context of the process group this process belongs to (:data:`SINGLE` when there is none)."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return SINGLE
    world = torch.distributed.get_world_size()
    return DistContext(rank=torch.distributed.get_rank(), world_size=world, local_rank=_env_int("LOCAL_RANK", 0),
                       local_world_size=_env_int("LOCAL_WORLD_SIZE", world))


def _device_for(device: str, local_rank: int) -> torch.device:
    dev = torch.device(device)
    if dev.type != "cuda":
        return dev
    if dev.index is not None:
        # Each process must own one GPU; a fixed index would put every rank on the same one.
        raise ValueError(f"device {device!r} names one GPU, but under torchrun every process takes GPU "
                         "LOCAL_RANK; pass --device cuda (or auto), or restrict the GPUs with CUDA_VISIBLE_DEVICES")
    return torch.device("cuda", local_rank)


@contextlib.contextmanager
def session(device: str, timeout: float = DEFAULT_TIMEOUT) -> Iterator[tuple[DistContext, str]]:
    """Join torchrun's process group for the duration of a run, if this process was started by it.

    Without torchrun (``WORLD_SIZE`` unset or 1), or when the caller already initialised a process group,
    nothing is set up or torn down.

    Args:
        device: the requested device; ``"cuda"`` becomes ``"cuda:LOCAL_RANK"``.
        timeout: seconds to wait for the other processes, when joining and in every collective, before
            failing with :class:`DistributedError` (gloo) or an error of the NCCL watchdog.

    Yields:
        ``(context, device)``: this process's :class:`DistContext` and the device it must use.

    Raises:
        ValueError: a bad ``timeout``, or a device naming one GPU.
        DistributedError: the processes could not join within ``timeout``.
    """
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
        raise ValueError(f"timeout must be a number of seconds > 0, got {timeout!r}")
    if not launched() or torch.distributed.is_initialized():
        yield current(), device
        return
    rank, world, local_rank = _env_int("RANK"), _env_int("WORLD_SIZE"), _env_int("LOCAL_RANK", 0)
    dev = _device_for(device, local_rank)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    backend = "nccl" if dev.type == "cuda" else "gloo"
    where = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
    try:
        torch.distributed.init_process_group(backend, rank=rank, world_size=world,
                                             timeout=datetime.timedelta(seconds=timeout))
        # The first collective completes the connection of every pair: fail here, not in epoch 1.
        torch.distributed.barrier()
    except (RuntimeError, ValueError) as e:
        with contextlib.suppress(Exception):
            torch.distributed.destroy_process_group()
        raise DistributedError(f"rank {rank} of {world}: could not join the other processes at {where} "
                               f"({backend}, timeout {timeout:g} s): {e}") from e
    try:
        yield current(), str(dev)
    except DistributedError:
        raise
    except RuntimeError as e:
        if not _communication_failure(e):
            raise
        raise DistributedError(f"rank {rank} of {world}: lost the other processes (one failed, or did not answer "
                               f"within the timeout of {timeout:g} s): {e}") from e
    finally:
        torch.distributed.destroy_process_group()


# What gloo and NCCL say when a peer is gone or late: gloo raises plain RuntimeErrors.
_FAILURE_MESSAGES = ("Timed out", "timed out", "Connection closed by peer", "Connection reset by peer", "NCCL",
                     "gloo", "Broken pipe")


def _communication_failure(e: RuntimeError) -> bool:
    if isinstance(e, torch.distributed.DistError):
        return True
    return any(text in str(e) for text in _FAILURE_MESSAGES)


# ------------------------------------------------------------------------------------------ splitting
def rank_seed(seed: int, rank: int) -> int:
    """The seed of rank ``rank``'s own random stream; rank 0 keeps ``seed`` (single-process runs are unchanged)."""
    # A large odd multiplier (2^64 / golden ratio) keeps the ranks' seeds of nearby seeds apart.
    return (seed + rank * 0x9E3779B97F4A7C15) % 2**63


def shard(indices: Tensor, ctx: DistContext) -> Tensor:
    """This rank's contiguous part of a global batch of ``indices`` (sizes differ by at most one)."""
    if not ctx.distributed:
        return indices
    return indices.tensor_split(ctx.world_size)[ctx.rank]


def eval_batches(n: int, batch_size: int, ctx: DistContext) -> list[tuple[int, int]]:
    """This rank's evaluation batches ``(start, stop)`` of ``n`` images: batch ``k`` goes to rank ``k % world``.

    Over all ranks every image is in exactly one batch, the same batch as in a single-process run.
    """
    step = batch_size * ctx.world_size
    return [(start, min(start + batch_size, n)) for start in range(ctx.rank * batch_size, n, step)]


# -------------------------------------------------------------------------------------- communication
def all_reduce_sum(tensors: list[Tensor], ctx: DistContext) -> None:
    """Sum each tensor over the ranks, in place (one collective for all of them)."""
    if not ctx.distributed or not tensors:
        return
    # float64 holds the counts exactly (up to 2^53); nccl needs every tensor on the GPU.
    flat = torch.cat([t.reshape(-1).to(tensors[0].device, torch.float64) for t in tensors])
    torch.distributed.all_reduce(flat)
    offset = 0
    for t in tensors:
        t.copy_(flat[offset : offset + t.numel()].view_as(t))
        offset += t.numel()


def broadcast_buffers(module: nn.Module, ctx: DistContext) -> None:
    """Give every rank rank 0's buffers (batch norm's running statistics)."""
    if ctx.distributed:
        for buffer in module.buffers():
            torch.distributed.broadcast(buffer, src=0)


def broadcast_object(obj: Any, ctx: DistContext) -> Any:
    """Rank 0's ``obj`` on every rank (pickled)."""
    if not ctx.distributed:
        return obj
    box = [obj]
    torch.distributed.broadcast_object_list(box, src=0)
    return box[0]


def all_gather_objects(obj: Any, ctx: DistContext) -> list[Any]:
    """Every rank's ``obj``, in rank order (pickled)."""
    if not ctx.distributed:
        return [obj]
    out: list[Any] = [None] * ctx.world_size
    torch.distributed.all_gather_object(out, obj)
    return out


def barrier(ctx: DistContext) -> None:
    """Wait until every rank gets here."""
    if ctx.distributed:
        torch.distributed.barrier()
