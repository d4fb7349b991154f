"""benchmarks/_provenance.py: the commit the benchmarks' tables and records name."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import _provenance

ROOT = Path(__file__).resolve().parents[1]


def _in_checkout() -> bool:
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True).returncode == 0


@pytest.mark.skipif(not _in_checkout(), reason="needs a git checkout")
def test_the_commit_is_head_and_says_when_tracked_files_differ():
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert _provenance.git("rev-parse", "HEAD") == head
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                           text=True).stdout.strip()
    assert _provenance.git_commit() == head + (" (with uncommitted changes)" if dirty else "")
    assert re.fullmatch(r"[0-9a-f]{40}", head)
    # Paths are the checkout root's, as policy_quality.py's "package_modified" (git status -- hba_augment) needs.
    assert _provenance.git("ls-files", "--", "hba_augment/__init__.py") == "hba_augment/__init__.py"


def test_a_failing_git_gives_none_and_an_unknown_commit(monkeypatch):
    assert _provenance.git("no-such-subcommand-of-git") is None
    monkeypatch.setattr(_provenance, "git", lambda *args: None)
    assert _provenance.git_commit() == "unknown"
