"""The layering rules: the core never imports the search, and only the op table lists op names."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from hba_augment.functional import OP_NAMES

PACKAGE = Path(__file__).resolve().parents[1] / "hba_augment"


def test_importing_the_core_does_not_import_search():
    code = (
        "import sys, hba_augment, hba_augment.functional, hba_augment.policy, hba_augment.schedule;"
        "print(sorted(m for m in sys.modules if m.startswith('hba_augment.search')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_core_modules_do_not_mention_search_imports():
    core = [p for p in PACKAGE.rglob("*.py") if "search" not in p.relative_to(PACKAGE).parts and p.name != "cli.py"]
    assert core, "no core modules found"
    offenders = [str(p) for p in core if re.search(r"^\s*(from|import)\s+hba_augment\.search|from \.search", p.read_text(), re.M)]
    assert offenders == []


def test_op_names_are_listed_only_in_the_table():
    # A list of op names is three or more name literals ("ShearX" or 'ShearX') within a few lines; the
    # per-op wrappers, which name one op each, are fine.
    pattern = re.compile("|".join(rf"[\"']{name}[\"']" for name in OP_NAMES))
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "_table.py":
            continue
        starts = [m.start() for m in pattern.finditer(path.read_text())]
        if any(b - a < 200 for a, b in zip(starts, starts[2:], strict=False)):
            offenders.append(str(path.relative_to(PACKAGE)))
    assert offenders == []
