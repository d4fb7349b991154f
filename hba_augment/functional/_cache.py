"""The kernels' constant tensors, made once per key: one home for how they are cached."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import threading
from collections.abc import Callable, Hashable, Iterator
from typing import TypeVar

import torch

__all__ = ["cache_scope", "constant_cache"]

_F = TypeVar("_F", bound=Callable)

# Whose caches a call uses: None, the process's; else the scope that cache_scope named.
_SCOPE: contextvars.ContextVar[Hashable] = contextvars.ContextVar("hba_augment_cache_scope", default=None)


@contextlib.contextmanager
def cache_scope(scope: Hashable) -> Iterator[None]:
    """Within this context (of the current thread or task), the kernels' cached constant tensors are
    ``scope``'s own: made and kept apart from every other scope's.

    Why: a constant tensor made by a kernel on one CUDA stream may be read on another stream only once that
    kernel ran. Runs side by side (``hba_augment._lanes``) each run on a stream of their own, so each lane
    keeps its own constants; outside a scope, as before, the process shares one set.

    Args:
        scope: any hashable key (a lane's index), or ``None`` for the process's caches.
    """
    token = _SCOPE.set(scope)
    try:
        yield
    finally:
        _SCOPE.reset(token)


def constant_cache(maxsize: int) -> Callable[[_F], _F]:
    """``functools.lru_cache(maxsize)`` for functions that build constant tensors (index tables, ramps,
    fills) from hashable keys such as a device and a dtype, one cache per :func:`cache_scope`.

    While ``torch.compile`` traces a call, the function itself runs instead: dynamo does not trace through
    ``lru_cache`` (it calls the wrapped function anyway, with a warning for each one), and in a graph the
    constants are made once when it is compiled.
    """

    def wrap(function: _F) -> _F:
        process = functools.lru_cache(maxsize=maxsize)(function)
        caches: dict[Hashable, Callable] = {None: process}
        lock = threading.Lock()

        def scoped(scope: Hashable) -> Callable:
            cached = caches.get(scope)
            if cached is None:
                with lock:
                    cached = caches.setdefault(scope, functools.lru_cache(maxsize=maxsize)(function))
            return cached

        @functools.wraps(function)
        def call(*args, **kwargs):
            # (is_dynamo_compiling: a third of is_compiling's cost, on a path taken for every single image)
            if torch.compiler.is_dynamo_compiling():
                return function(*args, **kwargs)
            scope = _SCOPE.get()
            # (the process's cache without a lookup: the per-image path calls this a few times an image)
            return process(*args, **kwargs) if scope is None else scoped(scope)(*args, **kwargs)

        def cache_clear() -> None:
            for cached in list(caches.values()):
                cached.cache_clear()

        call.cache_clear = cache_clear  # type: ignore[attr-defined]
        return call  # type: ignore[return-value]

    return wrap
