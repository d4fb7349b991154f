"""The kernels' constant tensors, made once per key: one home for how they are cached."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import torch

__all__ = ["constant_cache"]

_F = TypeVar("_F", bound=Callable)


def constant_cache(maxsize: int) -> Callable[[_F], _F]:
    """``functools.lru_cache(maxsize)`` for functions that build constant tensors (index tables, ramps,
    fills) from hashable keys such as a device and a dtype.

    While ``torch.compile`` traces a call, the function itself runs instead: dynamo does not trace through
    ``lru_cache`` (it calls the wrapped function anyway, with a warning for each one), and in a graph the
    constants are made once when it is compiled.

    Once CUDA is in use, the current CUDA stream is part of the key: a tensor made by a kernel on one stream
    is safe on that stream only (another stream could read it before the kernel ran, and the allocator
    could hand its memory out again while another stream reads it). Lanes (``hba_augment._lanes``) run on
    streams of their own.
    """

    def wrap(function: _F) -> _F:
        cached = functools.lru_cache(maxsize=maxsize)(lambda stream, *args, **kwargs: function(*args, **kwargs))

        @functools.wraps(function)
        def call(*args, **kwargs):
            # (is_dynamo_compiling: a third of is_compiling's cost, on a path taken for every single image)
            if torch.compiler.is_dynamo_compiling():
                return function(*args, **kwargs)
            stream = torch.cuda.current_stream().cuda_stream if torch.cuda.is_initialized() else None
            return cached(stream, *args, **kwargs)

        call.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
        return call  # type: ignore[return-value]

    return wrap
