"""The commit a benchmark's table names, for the benchmarks (torch-free, so that a script that runs no torch
itself, such as ``train_speed.py``, can name its commit without importing it)."""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["git_commit"]

HERE = Path(__file__).resolve().parent


def git_commit() -> str:
    """``HEAD``'s full hash, with ``" (with uncommitted changes)"`` when tracked files differ from it, or
    ``"unknown"`` outside a git checkout."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True, check=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=HERE, capture_output=True, text=True
        )
        return commit.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
