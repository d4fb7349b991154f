"""Shared fixtures: where the real data lives, a fixed set of lossless CIFAR-10 images, one torch thread."""

from __future__ import annotations

import contextlib
import math
import os
import pickle
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

#: Number of CIFAR-10 images the pixel-exact tests compare against PIL.
N_CIFAR_IMAGES = 64


def _default_data_dir() -> Path:
    # tests/ -> repository root -> its parent, which holds the shared/ folder beside the repository.
    return Path(__file__).resolve().parents[2] / "shared" / "data"


def load_cifar_batch(path: Path, n: int | None = None) -> tuple[torch.Tensor, list[int]]:
    """Read one official CIFAR-10 python batch file.

    Args:
        path: a ``data_batch_*`` or ``test_batch`` pickle.
        n: keep only the first ``n`` images (all if ``None``).

    Returns:
        ``(images, labels)``: a uint8 tensor of shape (N, 3, 32, 32) and a list of N ints.
    """
    with open(path, "rb") as f:
        batch = pickle.load(f, encoding="bytes")
    data = np.asarray(batch[b"data"], dtype=np.uint8)
    labels = list(batch[b"labels"])
    if n is not None:
        data, labels = data[:n], labels[:n]
    # Rows are channel-planar: 1024 R values, then 1024 G, then 1024 B, each row-major 32x32.
    images = torch.from_numpy(data.reshape(-1, 3, 32, 32).copy())
    return images, labels


@contextlib.contextmanager
def _one_torch_thread() -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (the README's ``-n 2``) every worker shares the cores with the others: one intra-op
    thread each, for the worker and the commands its tests start, so that OpenMP never oversubscribes them
    (see :func:`torch_single_thread`)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        torch.set_num_threads(1)
        os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="module")
def torch_single_thread():
    """Run a module's tests with one intra-op thread, then restore the previous setting.

    Tiny tensors and small convolutions on a shared machine with few cores: threads only add
    synchronisation, and OpenMP workers waiting for a descheduled peer made the op tests ~50x slower.
    """
    with _one_torch_thread():
        yield


@pytest.fixture
def torch_single_thread_per_test():
    """One intra-op thread for each test, restored after it (for tests that change the setting themselves,
    e.g. through a command's ``--threads``)."""
    with _one_torch_thread():
        yield


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The shared real-data folder (env ``HBA_DATA_DIR`` overrides the default beside the repository)."""
    env = os.environ.get("HBA_DATA_DIR")
    path = Path(env) if env else _default_data_dir()
    if not path.is_dir():
        how = "HBA_DATA_DIR" if env else "the default location beside the repository"
        pytest.skip(f"shared data folder not found at {path} (from {how}); set HBA_DATA_DIR to it")
    return path


@pytest.fixture(scope="session")
def cifar_dir(data_dir: Path) -> Path:
    """The shared data folder, skipping unless it holds lossless CIFAR-10 (``cifar-10-batches-py/``)."""
    if not (data_dir / "cifar-10-batches-py" / "data_batch_1").is_file():
        pytest.skip(f"lossless CIFAR-10 not found in {data_dir}")
    return data_dir


@pytest.fixture(scope="session")
def cifar_images(data_dir: Path) -> torch.Tensor:
    """The first 64 lossless CIFAR-10 training images, uint8 tensor (64, 3, 32, 32)."""
    path = data_dir / "cifar-10-batches-py" / "data_batch_1"
    if not path.is_file():
        pytest.skip(f"lossless CIFAR-10 batch not found at {path}")
    images, _ = load_cifar_batch(path, N_CIFAR_IMAGES)
    return images


def check_cutout_structure(images, out, magnitude, fill):
    """Check a Cutout result exactly: the change is one axis-aligned patch of round(m*H) x round(m*W),
    clipped at the borders, painted with ``fill``; nothing else changed.

    ``magnitude`` is one number or one per image. ``fill`` must not occur in ``images`` (so that every
    painted pixel is a changed one).
    """
    _, channels, height, width = images.shape
    if isinstance(magnitude, (int, float)):
        magnitude = [magnitude] * len(images)
    fill_t = torch.as_tensor(fill, dtype=out.dtype).reshape(-1)
    for i, (before, after, m) in enumerate(zip(images, out, magnitude, strict=True)):
        # Magnitudes travel as float32 (as in the kernels): round(m * H) of that value, half to even.
        m32 = torch.tensor(float(m), dtype=torch.float32)
        ph, pw = int(torch.round(m32 * height).item()), int(torch.round(m32 * width).item())
        changed = (before != after).any(dim=0)
        if ph == 0 or pw == 0:
            assert not changed.any(), f"Cutout magnitude={m}: image {i} changed, expected an empty patch"
            continue
        rows = torch.nonzero(changed.any(dim=1)).flatten()
        cols = torch.nonzero(changed.any(dim=0)).flatten()
        assert len(rows) > 0, f"Cutout magnitude={m}: image {i} unchanged"
        y0, y1, x0, x1 = rows[0].item(), rows[-1].item() + 1, cols[0].item(), cols[-1].item() + 1
        h, w = y1 - y0, x1 - x0
        where = f"Cutout magnitude={m}, image {i}: patch rows {y0}:{y1}, cols {x0}:{x1}, expected {ph}x{pw}"
        # One rectangle: everything in the bounding box changed and took the fill, nothing else changed.
        assert changed[y0:y1, x0:x1].all() and changed.sum().item() == h * w, where
        assert (after[:, y0:y1, x0:x1] == fill_t.view(-1, 1, 1).expand(channels, 1, 1)).all(), where
        # Its size: exact unless clipped by a border; the centre pixel is inside, so at least half is left.
        assert (h == ph) if (y0 > 0 and y1 < height) else (math.ceil(ph / 2) <= h <= ph), where
        assert (w == pw) if (x0 > 0 and x1 < width) else (math.ceil(pw / 2) <= w <= pw), where


@pytest.fixture(scope="session")
def cutout_structure():
    """The exact structural check of a Cutout result: ``cutout_structure(images, out, magnitude, fill)``."""
    return check_cutout_structure


def mid_magnitudes() -> np.ndarray:
    """Every op's magnitude at the middle of its range (NaN for the ops without one), ``(2, NUM_OPS)``."""
    from hba_augment.functional._table import OPS

    return np.array([[(o.low + o.high) / 2 if o.has_magnitude else np.nan for o in OPS]] * 2)


@pytest.fixture(scope="session")
def schedule_path(tmp_path_factory) -> Path:
    """A one-entry schedule, every slot at probability 0.3 and mid-range magnitudes (``test_train`` has its
    own, of two entries)."""
    from hba_augment.functional._table import NUM_OPS
    from hba_augment.schedule import Schedule

    path = tmp_path_factory.mktemp("schedule") / "half.json"
    Schedule(np.full((1, 2, NUM_OPS), 0.3), mid_magnitudes()[None], name="half").save(path)
    return path
