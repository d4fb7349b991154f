"""Where a benchmark's results came from, for the benchmarks: the git commit their tables name (torch-free,
so that a script that runs no torch itself, such as ``train_speed.py``, can name its commit without importing
it)."""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["git", "git_commit"]

#: The checkout's root: paths given to :func:`git` are relative to it.
ROOT = Path(__file__).resolve().parents[1]


def git(*args: str) -> str | None:
    """``git ARGS``'s stripped output, run at the checkout's root (``ROOT``, so that a path such as
    ``hba_augment`` names the package), or ``None`` when git fails, is missing, or takes over 30 s (outside a
    git checkout, for one)."""
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True,
                              timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def git_commit() -> str:
    """``HEAD``'s full hash, with ``" (with uncommitted changes)"`` when tracked files differ from it, or
    ``"unknown"`` outside a git checkout."""
    commit = git("rev-parse", "HEAD")
    if commit is None:
        return "unknown"
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return commit + (" (with uncommitted changes)" if dirty else "")
