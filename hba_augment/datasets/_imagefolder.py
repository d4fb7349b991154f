"""ImageFolder trees, as directories or tar archives: scanning, decoding and the decoded-array cache."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import zipfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from PIL import Image

from hba_augment._io import atomic_open
from hba_augment.datasets._common import ImageData, _resolve_classes

__all__ = ["IMG_EXTENSIONS"]

# torchvision's ImageFolder extensions, matched case-insensitively.
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")

# Bumped whenever the decoded arrays for the same request would change (decoder, resize, layout).
_CACHE_VERSION = 1
_DECODE_CHUNK = 512

_SPLIT_DIRS = ("train", "test", "val")
_SPLIT_FALLBACK = {"train": ("train",), "test": ("test", "val"), "val": ("val", "test")}


def _is_image(name: str) -> bool:
    return name.lower().endswith(IMG_EXTENSIONS)


def _is_archive(path: Path) -> bool:
    return path.is_file() and tarfile.is_tarfile(path)


def _decode_image(data: bytes, image_size: int | None) -> np.ndarray:
    """One encoded image -> ``(H, W, 3)`` uint8, converted to RGB and optionally resized."""
    with Image.open(io.BytesIO(data)) as im:
        rgb = im.convert("RGB")
    if image_size is not None and rgb.size != (image_size, image_size):
        rgb = rgb.resize((image_size, image_size), Image.Resampling.BILINEAR)
    return np.asarray(rgb)


def _decode_all(
    blobs: Sequence[bytes | Path], names: Sequence[str], image_size: int | None, workers: int
) -> np.ndarray:
    """Decode every blob (bytes, or a path to read) into one ``(N, H, W, 3)`` uint8 array."""

    def get(i: int) -> bytes:
        b = blobs[i]
        return b.read_bytes() if isinstance(b, Path) else b

    n = len(blobs)
    if n == 0:
        s = image_size or 0
        return np.empty((0, s, s, 3), dtype=np.uint8)
    first = _decode_image(get(0), image_size)
    out = np.empty((n, *first.shape), dtype=np.uint8)
    out[0] = first

    def run(start: int, stop: int) -> None:
        for i in range(start, stop):
            img = _decode_image(get(i), image_size)
            if img.shape != first.shape:
                raise ValueError(
                    f"images differ in size ({names[0]} is {first.shape[1]}x{first.shape[0]}, {names[i]} is "
                    f"{img.shape[1]}x{img.shape[0]}); pass image_size to resize them"
                )
            out[i] = img

    chunks = [(s, min(s + _DECODE_CHUNK, n)) for s in range(1, n, _DECODE_CHUNK)]
    if workers <= 1 or len(chunks) <= 1:
        for start, stop in chunks:
            run(start, stop)
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for fut in [pool.submit(run, start, stop) for start, stop in chunks]:
                fut.result()
    return out


class _Tree(NamedTuple):
    """An ImageFolder tree's listing: class order and, per split folder, its (class, item) pairs."""

    class_order: list[str]
    splits: dict[str, list[tuple[str, str]]]  # split dir -> [(class, relative name)]
    blobs: dict[str, bytes | Path]  # relative name -> encoded bytes or file path


def _split_dir(tree_splits: Sequence[str], split: str, where: object) -> str:
    for cand in _SPLIT_FALLBACK[split]:
        if cand in tree_splits:
            return cand
    raise FileNotFoundError(
        f"{where}: no {' or '.join(_SPLIT_FALLBACK[split])}/ folder (found {sorted(tree_splits)})"
    )


def _class_order(wnids: str | None, class_dirs: set[str], where: object) -> list[str]:
    if wnids is None:
        return sorted(class_dirs)
    order = [line.strip() for line in wnids.splitlines() if line.strip()]
    missing = sorted(class_dirs - set(order))
    if missing:
        raise ValueError(f"{where}: class folders {missing[:5]} are not listed in wnids.txt")
    return order


def _scan_directory(root: Path, split: str) -> _Tree:
    if not any((root / s).is_dir() for s in _SPLIT_DIRS):
        subdirs = [p for p in root.iterdir() if p.is_dir() and any((p / s).is_dir() for s in _SPLIT_DIRS)]
        if len(subdirs) != 1:
            raise FileNotFoundError(
                f"{root}: not an ImageFolder root (no train/, test/ or val/ folder, here or in a single subfolder)"
            )
        root = subdirs[0]
    present = [s for s in _SPLIT_DIRS if (root / s).is_dir()]
    class_dirs = {p.name for s in present for p in (root / s).iterdir() if p.is_dir()}
    wnids = (root / "wnids.txt").read_text() if (root / "wnids.txt").is_file() else None
    order = _class_order(wnids, class_dirs, root)
    chosen = _split_dir(present, split, root)
    items, blobs = [], {}
    for cls_dir in sorted(p for p in (root / chosen).iterdir() if p.is_dir()):
        for dirpath, _, files in os.walk(cls_dir, followlinks=True):
            for f in files:
                if _is_image(f):
                    path = Path(dirpath) / f
                    rel = path.relative_to(root).as_posix()
                    items.append((cls_dir.name, rel))
                    blobs[rel] = path
    return _Tree(order, {chosen: items}, blobs)


def _scan_archive(path: Path, split: str) -> _Tree:
    # One streaming pass: the split folder and the class list are only known once every member has
    # been seen, so keep the bytes of every image that could belong to the requested split.
    wanted = _SPLIT_FALLBACK[split]
    roots: set[tuple[str, ...]] = set()
    class_dirs: set[str] = set()
    split_items: dict[str, list[tuple[str, str]]] = {}
    blobs: dict[str, bytes] = {}
    texts: dict[tuple[str, ...], str] = {}
    with tarfile.open(path, "r|*") as tf:
        for member in tf:
            parts = tuple(p for p in member.name.split("/") if p not in ("", "."))
            if member.isfile() and parts and parts[-1] == "wnids.txt":
                f = tf.extractfile(member)
                texts[parts[:-1]] = f.read().decode() if f is not None else ""
                continue
            if not (member.isfile() and _is_image(parts[-1] if parts else "")):
                continue
            at = next((i for i in range(len(parts) - 2) if parts[i] in _SPLIT_DIRS), None)
            if at is None:
                continue
            root, split_dir, cls = parts[:at], parts[at], parts[at + 1]
            roots.add(root)
            class_dirs.add(cls)
            split_items.setdefault(split_dir, [])
            if split_dir in wanted:
                f = tf.extractfile(member)
                if f is None:
                    continue
                rel = "/".join(parts[at:])
                blobs[rel] = f.read()
                split_items[split_dir].append((cls, rel))
    if not roots:
        raise FileNotFoundError(
            f"{path}: no ImageFolder tree (train/, test/ or val/ with class folders) inside"
        )
    if len(roots) > 1:
        raise ValueError(
            f"{path}: holds more than one ImageFolder tree: {sorted('/'.join(r) or '.' for r in roots)}"
        )
    root = roots.pop()
    order = _class_order(texts.get(root), class_dirs, path)
    chosen = _split_dir(list(split_items), split, path)
    items = sorted(split_items[chosen], key=lambda item: item[1])
    return _Tree(order, {chosen: items}, {rel: blobs[rel] for _, rel in items})


def _source_key(path: Path, split: str, image_size: int | None, classes: object) -> tuple[str, str]:
    """(cache-file stem, digest) for a request; the source is identified by its path, size and mtime."""
    if isinstance(classes, (int, np.integer)) or classes is None:
        cls_key: object = None if classes is None else int(classes)
    else:
        cls_key = [str(c) for c in classes]
    if path.is_file():
        st = path.stat()
        fingerprint: object = [st.st_size, st.st_mtime_ns]
    else:
        # A directory's mtime misses changes deeper down, so fingerprint every file's size and mtime.
        h = hashlib.sha256()
        for dirpath, dirnames, files in os.walk(path, followlinks=True):
            dirnames.sort()
            for f in sorted(files):
                st = os.stat(os.path.join(dirpath, f))
                h.update(
                    f"{os.path.relpath(os.path.join(dirpath, f), path)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode()
                )
        fingerprint = h.hexdigest()
    request = {
        "version": _CACHE_VERSION,
        "source": str(path.resolve()),
        "fingerprint": fingerprint,
        "split": split,
        "image_size": image_size,
        "classes": cls_key,
    }
    digest = hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()[:20]
    stem = path.name.split(".")[0] or "data"
    size = "orig" if image_size is None else str(image_size)
    return f"{stem}-{split}-{size}-{digest}", digest


def _read_cache(file: Path) -> ImageData | None:
    try:
        with np.load(file, allow_pickle=False) as z:
            images, labels, classes = z["images"], z["labels"], [str(c) for c in z["classes"]]
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None  # missing or unreadable: rebuild it
    return ImageData(torch.from_numpy(images), torch.from_numpy(labels), classes)


def _write_cache(file: Path, data: ImageData) -> None:
    file.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(file) as f:
        np.savez(
            f,
            images=data.images.numpy(),
            labels=data.labels.numpy(),
            classes=np.array(data.classes, dtype=str),
        )


def _load_imagefolder(
    path: Path,
    split: str,
    *,
    image_size: int | None,
    classes: int | Sequence[str] | None,
    cache_dir: Path,
    cache: bool,
    workers: int,
) -> ImageData:
    if not path.exists():
        raise FileNotFoundError(f"imagefolder: {path} does not exist")
    archive = _is_archive(path)
    if not archive and not path.is_dir():
        raise ValueError(f"imagefolder: {path} is neither a directory nor a tar archive")
    cache_file = None
    if cache:
        stem, _ = _source_key(path, split, image_size, classes)
        cache_file = cache_dir / "arrays" / f"{stem}.npz"
        hit = _read_cache(cache_file)
        if hit is not None:
            return hit

    tree = _scan_archive(path, split) if archive else _scan_directory(path, split)
    names = _resolve_classes(tree.class_order, classes)
    label_of = {c: i for i, c in enumerate(names)}
    ((_, items),) = tree.splits.items()
    # Label order first, then file name, so every load of a request gives the same row order.
    items = sorted((item for item in items if item[0] in label_of), key=lambda it: (label_of[it[0]], it[1]))
    hwc = _decode_all([tree.blobs[rel] for _, rel in items], [rel for _, rel in items], image_size, workers)
    data = ImageData(
        torch.from_numpy(hwc).permute(0, 3, 1, 2).contiguous(),
        torch.tensor([label_of[c] for c, _ in items], dtype=torch.int64),
        names,
    )
    if cache_file is not None:
        _write_cache(cache_file, data)
    return data
