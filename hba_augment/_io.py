"""Atomic file writes, shared by every module that writes results (schedules, checkpoints, caches)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

__all__ = ["atomic_open"]


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "wb", **kwargs: Any) -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path``; on success it replaces ``path`` in one step.

    Readers never see a half-written file, and a failure (an exception inside the block, e.g. a bad
    checksum) leaves ``path`` as it was and no temporary file behind.

    Args:
        path: the file to write.
        mode: ``"wb"`` or ``"w"`` (text; pass ``encoding=``).
        **kwargs: passed to :func:`os.fdopen`.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp creates the file as 0600; give it the permissions an ordinary open() would.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        with os.fdopen(fd, mode, **kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
