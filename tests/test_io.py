"""hba_augment._io.atomic_open: the one atomic writer behind schedules, checkpoints and caches."""

import os
import stat

import pytest

from hba_augment._io import atomic_open


def test_replaces_the_file_with_ordinary_permissions(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("old")
    umask = os.umask(0o022)
    try:
        with atomic_open(target, "w", encoding="utf-8") as f:
            f.write("new")
    finally:
        os.umask(umask)
    assert target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644  # not mkstemp's 0600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_a_failure_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_open(target) as f:
        f.write(b"half")
        raise RuntimeError("checksum mismatch")
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]
