"""The official CIFAR-10/100 and SVHN files: where they come from, how they are fetched and checked, how
they are read."""

from __future__ import annotations

import hashlib
import os
import pickle
import tarfile
import tempfile
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from hba_augment._cli_common import option
from hba_augment._io import atomic_open
from hba_augment.datasets._common import ImageData, _check_name, _check_split

__all__ = ["RESOURCES", "Resource", "download"]

_DOWNLOAD_CHUNK = 1 << 20


class Resource(NamedTuple):
    """One downloadable file: where it lives and its md5 (as torchvision lists it)."""

    url: str
    filename: str
    md5: str


_CIFAR10_ARCHIVE = Resource(
    "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
    "cifar-10-python.tar.gz",
    "c58f30108f718f92721af3b95e74349a",
)
_CIFAR100_ARCHIVE = Resource(
    "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
    "cifar-100-python.tar.gz",
    "eb9058c3a382ffc7106e4002c42a8d85",
)

# Official URLs and checksums, copied from torchvision/datasets/{cifar,svhn}.py (torchvision 0.29).
# One archive holds both CIFAR splits.
RESOURCES: dict[str, dict[str, Resource]] = {
    "cifar10": {"train": _CIFAR10_ARCHIVE, "test": _CIFAR10_ARCHIVE},
    "cifar100": {"train": _CIFAR100_ARCHIVE, "test": _CIFAR100_ARCHIVE},
    "svhn": {
        "train": Resource(
            "http://ufldl.stanford.edu/housenumbers/train_32x32.mat",
            "train_32x32.mat",
            "e26dedcc434d2e4c54c9b2d4a06d8373",
        ),
        "test": Resource(
            "http://ufldl.stanford.edu/housenumbers/test_32x32.mat",
            "test_32x32.mat",
            "eb5a983be6a315427106f1b164d9cef3",
        ),
        "extra": Resource(
            "http://ufldl.stanford.edu/housenumbers/extra_32x32.mat",
            "extra_32x32.mat",
            "a93ce644f1a588dc4d68dda5feec44a7",
        ),
    },
}


class _CifarLayout(NamedTuple):
    folder: str
    train: tuple[str, ...]
    test: tuple[str, ...]
    meta: str
    names_key: str
    labels_key: str


_CIFAR: dict[str, _CifarLayout] = {
    "cifar10": _CifarLayout(
        "cifar-10-batches-py",
        tuple(f"data_batch_{i}" for i in range(1, 6)),
        ("test_batch",),
        "batches.meta",
        "label_names",
        "labels",
    ),
    "cifar100": _CifarLayout(
        "cifar-100-python", ("train",), ("test",), "meta", "fine_label_names", "fine_labels"
    ),
}


def download(
    name: str,
    data_dir: str | os.PathLike,
    split: str = "train",
    *,
    timeout: float = 60.0,
    progress: bool = True,
) -> Path:
    """Fetch an official dataset file into ``data_dir`` unless it is already there.

    The file is streamed to a temporary file next to its destination, its md5 checked against
    ``RESOURCES``, and only then moved into place (``os.replace``); CIFAR archives are then
    extracted into a temporary folder and renamed into place, so an interrupted or corrupt download
    never leaves a partial dataset behind. Files already present are trusted and not fetched again.

    Args:
        name: ``"cifar10"``, ``"cifar100"`` or ``"svhn"``.
        data_dir: destination root (created if missing).
        split: which SVHN file to fetch; CIFAR's one archive holds both splits.
        timeout: socket timeout in seconds.
        progress: show a tqdm progress bar.

    Returns:
        The dataset folder (CIFAR) or ``.mat`` file (SVHN).

    Raises:
        ValueError: ``imagefolder`` (no official download), unknown name or split, or a checksum
            mismatch (nothing is kept then).
        OSError: network errors (``urllib.error.URLError`` and friends).
    """
    name = _check_name(name)
    split = _check_split(name, split)
    if name not in RESOURCES:
        raise ValueError(
            f"dataset {name!r} has no official download; download is available for {sorted(RESOURCES)}"
        )
    data_dir = Path(data_dir).expanduser()
    res = RESOURCES[name][split]
    if name in _CIFAR:
        layout = _CIFAR[name]
        target = data_dir / layout.folder
        if _cifar_complete(target, layout):
            return target
        if data_dir.name == layout.folder and _cifar_complete(data_dir, layout):
            return data_dir
        data_dir.mkdir(parents=True, exist_ok=True)
        archive = data_dir / res.filename
        if not (archive.is_file() and _md5(archive) == res.md5):
            _fetch(res, archive, timeout=timeout, progress=progress)
        _extract_folder(archive, data_dir, layout.folder)
        return target
    target = data_dir / res.filename
    if not target.is_file():
        data_dir.mkdir(parents=True, exist_ok=True)
        _fetch(res, target, timeout=timeout, progress=progress)
    return target


# Reading the files.


_ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz")


def _archive_hint(name: str, path: Path) -> str:
    """What to do with an archive given as the ``data_dir`` of a CIFAR/SVHN dataset."""
    if any(path.name == res.filename for res in RESOURCES.get(name, {}).values()):
        return (f"; for the official archive, pass the folder holding it ({path.parent}) with "
                f"{option('download', True)}: it is checked and extracted there, not fetched again")
    if not path.name.lower().endswith(_ARCHIVE_SUFFIXES):
        return ""
    return ("; an archive of an image-folder tree (one folder per class) is read with "
            f"{option('dataset', 'imagefolder')}")


def _cifar_folder(name: str, data_dir: Path) -> Path:
    layout = _CIFAR[name]
    for cand in (data_dir / layout.folder, data_dir):
        if (cand / layout.meta).is_file():
            return cand
    raise FileNotFoundError(
        f"{name}: no {layout.folder}/{layout.meta} under {data_dir}; pass {option('download', True)} to "
        f"fetch the official archive ({RESOURCES[name]['train'].url})"
    )


def _cifar_complete(folder: Path, layout: _CifarLayout) -> bool:
    return all((folder / f).is_file() for f in (*layout.train, *layout.test, layout.meta))


def _unpickle(path: Path) -> dict:
    # The official files are Python 2 pickles; encoding="bytes" keeps numpy arrays intact. Keys come
    # back as bytes (or str for re-pickled copies), so normalise them to str.
    with open(path, "rb") as f:
        obj = pickle.load(f, encoding="bytes")
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: expected a pickled dict, got {type(obj).__name__}")
    return {k.decode("latin1") if isinstance(k, bytes) else str(k): v for k, v in obj.items()}


def _load_cifar(name: str, data_dir: Path, split: str) -> ImageData:
    layout = _CIFAR[name]
    folder = _cifar_folder(name, data_dir)
    meta = _unpickle(folder / layout.meta)
    if layout.names_key not in meta:
        raise ValueError(f"{folder / layout.meta}: no {layout.names_key!r} entry (keys {sorted(meta)})")
    classes = [c.decode("latin1") if isinstance(c, bytes) else str(c) for c in meta[layout.names_key]]
    images, labels = [], []
    for fname in layout.train if split == "train" else layout.test:
        path = folder / fname
        if not path.is_file():
            raise FileNotFoundError(f"{name}: missing batch file {path}")
        batch = _unpickle(path)
        if "data" not in batch or layout.labels_key not in batch:
            raise ValueError(f"{path}: expected keys 'data' and {layout.labels_key!r}, got {sorted(batch)}")
        data = np.asarray(batch["data"], dtype=np.uint8)
        lab = np.asarray(batch[layout.labels_key], dtype=np.int64).reshape(-1)
        if data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or len(lab) != len(data):
            raise ValueError(
                f"{path}: expected data (N, 3072) and N labels, got data {data.shape} and {len(lab)} labels"
            )
        images.append(data.reshape(-1, 3, 32, 32))
        labels.append(lab)
    lab = np.concatenate(labels)
    if lab.size and (lab.min() < 0 or lab.max() >= len(classes)):
        raise ValueError(f"{name}: labels outside [0, {len(classes)}) in {folder}")
    return ImageData(torch.from_numpy(np.concatenate(images)), torch.from_numpy(lab), classes)


def _load_svhn(data_dir: Path, split: str) -> ImageData:
    import scipy.io  # optional dependency (extra "search")

    path = data_dir / RESOURCES["svhn"][split].filename
    if not path.is_file():
        raise FileNotFoundError(
            f"svhn: no {path}; pass {option('download', True)} to fetch it ({RESOURCES['svhn'][split].url})"
        )
    mat = scipy.io.loadmat(path)
    x, y = mat.get("X"), mat.get("y")
    if x is None or y is None or x.ndim != 4 or x.shape[2] != 3 or y.size != x.shape[3]:
        raise ValueError(f"{path}: expected X (H, W, 3, N) and y (N, 1) as in the official files")
    # X is H x W x C x N; torchvision reads it the same way.
    images = np.ascontiguousarray(np.transpose(x, (3, 2, 0, 1)).astype(np.uint8, copy=False))
    labels = y.astype(np.int64).reshape(-1)
    labels[labels == 10] = 0
    if labels.size and (labels.min() < 0 or labels.max() > 9):
        raise ValueError(f"{path}: labels outside 1..10")
    return ImageData(torch.from_numpy(images), torch.from_numpy(labels), [str(d) for d in range(10)])


# Fetching and extracting.


def _md5(path: Path) -> str:
    h = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_DOWNLOAD_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _fetch(res: Resource, dest: Path, *, timeout: float, progress: bool) -> None:
    """Stream ``res.url`` to ``dest`` through a temporary file; md5-verified, then os.replace."""
    from tqdm.auto import tqdm

    h = hashlib.md5(usedforsecurity=False)
    request = urllib.request.Request(res.url, headers={"User-Agent": "hba-augment"})
    # An exception inside the block (a bad checksum included) discards the temporary file.
    with atomic_open(dest) as out, urllib.request.urlopen(request, timeout=timeout) as resp:
        total = resp.headers.get("Content-Length")
        with tqdm(
            total=int(total) if total else None,
            unit="B",
            unit_scale=True,
            desc=res.filename,
            disable=not progress,
        ) as bar:
            for chunk in _iter_chunks(resp.read):
                out.write(chunk)
                h.update(chunk)
                bar.update(len(chunk))
        digest = h.hexdigest()
        if digest != res.md5:
            raise ValueError(
                f"checksum mismatch for {res.url}: expected md5 {res.md5}, got {digest}; the file was discarded"
            )


def _iter_chunks(read: Callable[[int], bytes]) -> Iterator[bytes]:
    while chunk := read(_DOWNLOAD_CHUNK):
        yield chunk


def _extract_folder(archive: Path, data_dir: Path, folder: str) -> None:
    """Extract ``folder/`` from ``archive`` into ``data_dir`` via a temporary folder and a rename."""
    target = data_dir / folder
    if target.exists():
        raise FileExistsError(
            f"{target} exists but is incomplete; remove it to extract a fresh copy from {archive}"
        )
    tmp = Path(tempfile.mkdtemp(dir=data_dir, prefix=f".{folder}.", suffix=".extract"))
    try:
        with tarfile.open(archive, "r:*") as tf:
            members = [m for m in tf.getmembers() if m.name == folder or m.name.startswith(folder + "/")]
            if not members:
                raise ValueError(f"{archive}: no {folder}/ inside")
            for m in members:
                # Refuse anything that could land outside tmp or is not a plain file or folder.
                if not (m.isfile() or m.isdir()) or m.name.startswith("/") or ".." in m.name.split("/"):
                    raise ValueError(f"{archive}: refusing to extract member {m.name!r}")
            if hasattr(tarfile, "data_filter"):
                tf.extractall(tmp, members=members, filter="data")
            else:  # Python < 3.10.12 / 3.11.4: members were checked above
                tf.extractall(tmp, members=members)
        os.replace(tmp / folder, target)
    finally:
        _rmtree(tmp)


def _rmtree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
