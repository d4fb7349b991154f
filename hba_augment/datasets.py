"""Image datasets for the search and policy evaluation, loaded whole into memory as uint8 tensors.

Supported sources (``DATASETS``):

* ``"cifar10"`` / ``"cifar100"``: the official python-pickle layout under torchvision's root
  convention (``data_dir/cifar-10-batches-py/`` or ``data_dir/cifar-100-python/``; CIFAR-100 uses the
  fine labels). Whatever rows the batch files hold are loaded, so partial copies work.
* ``"svhn"``: the official ``{train,test,extra}_32x32.mat`` files in ``data_dir``; label 10 (digit 0)
  becomes 0, as in torchvision.
* ``"imagefolder"``: an ImageFolder tree with ``train/`` and ``test/`` or ``val/`` split folders, each
  holding one folder per class, given either as a directory or as a ``.tar``/``.tar.gz`` archive that
  contains one such tree. Class order is ``wnids.txt`` (next to the split folders) when present, else
  the sorted class-folder names of all splits, so every split of a tree shares one label mapping.
  Archives are read as a stream (nothing is extracted) and the decoded arrays are cached as ``.npz``
  in the cache directory, keyed by the source's size and mtime and by the request, so a second load
  skips decoding.

Images come back as ``(N, 3, H, W)`` uint8 (grayscale and other modes are converted to RGB). Resizing
(``image_size``) uses PIL's BILINEAR filter, which is antialiased when downscaling (the filter support
grows with the scale factor), on every source.

Reduced protocols are built from :func:`load_dataset` and :func:`balanced_split` (or
:func:`reduced_split`), e.g. Reduced CIFAR-10 = 4,000 train / 10,000 val drawn from the train split.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import tarfile
import tempfile
import urllib.request
import zipfile
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from PIL import Image

from hba_augment._cli_common import option
from hba_augment._io import atomic_open

__all__ = [
    "DATASETS",
    "IMG_EXTENSIONS",
    "RESOURCES",
    "SPLITS",
    "ImageData",
    "Resource",
    "balanced_split",
    "default_cache_dir",
    "download",
    "load_dataset",
    "reduced_split",
]

DATASETS = ("cifar10", "cifar100", "svhn", "imagefolder")

SPLITS: dict[str, tuple[str, ...]] = {
    "cifar10": ("train", "test"),
    "cifar100": ("train", "test"),
    "svhn": ("train", "test", "extra"),
    "imagefolder": ("train", "test", "val"),
}

# torchvision's ImageFolder extensions, matched case-insensitively.
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")

# Bumped whenever the decoded arrays for the same request would change (decoder, resize, layout).
_CACHE_VERSION = 1
_DOWNLOAD_CHUNK = 1 << 20
_DECODE_CHUNK = 512


class ImageData(NamedTuple):
    """A whole dataset split in memory.

    Attributes:
        images: uint8 tensor of shape ``(N, 3, H, W)``.
        labels: int64 tensor of shape ``(N,)`` with values in ``[0, len(classes))``.
        classes: class names in label order.
    """

    images: torch.Tensor
    labels: torch.Tensor
    classes: list[str]

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def subset(self, indices: torch.Tensor | Sequence[int]) -> ImageData:
        """The rows ``indices`` (any 1-D integer index), with the same class list."""
        idx = torch.as_tensor(indices, dtype=torch.int64)
        return ImageData(self.images[idx], self.labels[idx], list(self.classes))


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


# --------------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------------


def default_cache_dir() -> Path:
    """``$HBA_CACHE_DIR`` if set, else ``~/.cache/hba_augment``."""
    env = os.environ.get("HBA_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "hba_augment"


def load_dataset(
    name: str,
    data_dir: str | os.PathLike,
    split: str = "train",
    *,
    image_size: int | None = None,
    classes: int | Sequence[str] | None = None,
    download: bool = False,
    cache_dir: str | os.PathLike | None = None,
    cache: bool = True,
    workers: int = 2,
) -> ImageData:
    """Load a whole dataset split into memory.

    Args:
        name: one of ``DATASETS``.
        data_dir: for CIFAR, the root holding ``cifar-10-batches-py/`` / ``cifar-100-python/`` (that
            folder itself is accepted too); for SVHN, the folder holding the ``.mat`` files; for
            ``imagefolder``, the tree's root directory (or a directory whose only subfolder is the
            root) or a ``.tar``/``.tar.gz`` archive containing one tree.
        split: one of ``SPLITS[name]``. For ``imagefolder``, ``"test"`` falls back to ``val/`` when
            the tree has no ``test/`` folder, and ``"val"`` to ``test/``.
        image_size: resize every image to ``image_size x image_size`` (PIL BILINEAR, antialiased).
            ``None`` keeps the original size (ImageFolder images must then all share one size).
        classes: ``None`` for all classes, an int ``k`` for the first ``k`` classes in class order,
            or a sequence of class names (their order defines the new labels). Labels are re-indexed
            to ``0..len(classes) - 1``.
        download: fetch the official files into ``data_dir`` first when they are missing (CIFAR,
            SVHN; see :func:`download`).
        cache_dir: where ``imagefolder`` keeps decoded arrays (default :func:`default_cache_dir`).
        cache: read and write that cache (``imagefolder`` only).
        workers: decoding threads for ``imagefolder`` (``<= 1`` decodes in the calling thread).

    Returns:
        ImageData with ``images`` uint8 ``(N, 3, H, W)``, ``labels`` int64 ``(N,)`` and ``classes``.

    Raises:
        ValueError: unknown ``name``/``split``/class, bad ``image_size``, malformed files.
        FileNotFoundError: the files are not in ``data_dir`` (and ``download`` is False).
    """
    name = _check_name(name)
    split = _check_split(name, split)
    image_size = _check_image_size(image_size)
    data_dir = Path(data_dir).expanduser()
    if name != "imagefolder" and data_dir.is_file():
        raise ValueError(f"{name}: data_dir {data_dir} is a file; {name} reads a folder{_archive_hint(name, data_dir)}")
    if download:
        _download(name, data_dir, split)
    if name in _CIFAR:
        data = _load_cifar(name, data_dir, split)
    elif name == "svhn":
        data = _load_svhn(data_dir, split)
    else:
        return _load_imagefolder(
            data_dir,
            split,
            image_size=image_size,
            classes=classes,
            cache_dir=Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir(),
            cache=cache,
            workers=workers,
        )
    data = _select_classes(data, classes)
    if image_size is not None:
        data = data._replace(images=_resize_uint8(data.images, image_size))
    return data


def balanced_split(labels: torch.Tensor, sizes: Sequence[int], *, seed: int) -> list[torch.Tensor]:
    """Draw disjoint, class-balanced index sets.

    Set ``k`` takes ``sizes[k]`` indices spread over the classes present in ``labels`` as equally as
    the images left after sets ``0..k-1`` allow: classes with too few images left give all they have
    and the others share the rest, differing by at most one. Which classes get the extra one is drawn
    at random, as are the images within each class; all randomness comes from
    ``torch.Generator().manual_seed(seed)``, so the result depends only on ``labels``, ``sizes`` and
    ``seed``.

    Args:
        labels: integer tensor of shape ``(N,)``.
        sizes: non-negative set sizes; their sum must not exceed ``N``.
        seed: seed of the generator.

    Returns:
        One sorted int64 index tensor per size (on the CPU).

    Raises:
        ValueError: ``labels`` not 1-D integer, a negative size, or ``sum(sizes) > N``.
    """
    labels = torch.as_tensor(labels)
    if (
        labels.ndim != 1
        or labels.dtype.is_floating_point
        or labels.dtype.is_complex
        or labels.dtype == torch.bool
    ):
        raise ValueError(
            f"labels must be a 1-D integer tensor, got dtype {labels.dtype} and shape {tuple(labels.shape)}"
        )
    sizes = [int(s) for s in sizes]
    if any(s < 0 for s in sizes):
        raise ValueError(f"sizes must be non-negative, got {sizes}")
    n = labels.numel()
    if sum(sizes) > n:
        raise ValueError(f"sizes {sizes} need {sum(sizes)} images but labels hold only {n}")

    labels = labels.cpu()
    generator = torch.Generator().manual_seed(int(seed))
    uniq = torch.unique(labels)
    pools = []
    for c in uniq:
        members = torch.nonzero(labels == c).flatten()
        pools.append(members[torch.randperm(members.numel(), generator=generator)])
    tie_break = torch.randperm(len(pools), generator=generator).tolist()
    used = [0] * len(pools)
    out = []
    for size in sizes:
        avail = [p.numel() - u for p, u in zip(pools, used, strict=True)]
        quota = _water_fill(avail, size, tie_break)
        parts = []
        for c, q in enumerate(quota):
            parts.append(pools[c][used[c] : used[c] + q])
            used[c] += q
        idx = torch.cat(parts) if parts else torch.empty(0, dtype=torch.int64)
        out.append(torch.sort(idx).values)
    return out


def reduced_split(data: ImageData, train_size: int, val_size: int, seed: int) -> tuple[ImageData, ImageData]:
    """Class-balanced, disjoint train and validation subsets of ``data`` (see :func:`balanced_split`).

    Reduced CIFAR-10: ``reduced_split(load_dataset("cifar10", root), 4000, 10000, seed)``. Reduced
    ImageNet: the train split of Tiny ImageNet with ``classes=120, image_size=32``, then
    ``reduced_split(data, 6000, 10000, seed)`` (50 train per class, validation from the rest).
    """
    train_idx, val_idx = balanced_split(data.labels, (train_size, val_size), seed=seed)
    return data.subset(train_idx), data.subset(val_idx)


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


# load_dataset's ``download`` flag shadows the function inside it.
_download = download


# --------------------------------------------------------------------------------------------------
# Validation helpers
# --------------------------------------------------------------------------------------------------


def _check_name(name: str) -> str:
    key = str(name).lower()
    if key not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; expected one of {DATASETS}")
    return key


def _check_split(name: str, split: str) -> str:
    if split not in SPLITS[name]:
        raise ValueError(f"unknown split {split!r} for {name}; expected one of {SPLITS[name]}")
    return split


def _check_image_size(image_size: int | None) -> int | None:
    if image_size is None:
        return None
    if isinstance(image_size, bool) or not isinstance(image_size, (int, np.integer)) or image_size < 1:
        raise ValueError(f"image_size must be a positive int or None, got {image_size!r}")
    return int(image_size)


def _resolve_classes(all_classes: list[str], classes: int | Sequence[str] | None) -> list[str]:
    """The selected class names in their new label order."""
    if classes is None:
        return list(all_classes)
    if isinstance(classes, (int, np.integer)) and not isinstance(classes, bool):
        if not 1 <= classes <= len(all_classes):
            raise ValueError(f"classes={classes} is out of range; the dataset has {len(all_classes)} classes")
        return list(all_classes[: int(classes)])
    if isinstance(classes, (str, bytes)) or not isinstance(classes, Sequence):
        raise ValueError(f"classes must be None, an int or a sequence of class names, got {classes!r}")
    names = [str(c) for c in classes]
    known = set(all_classes)
    unknown = [c for c in names if c not in known]
    if unknown:
        raise ValueError(f"unknown classes {unknown}; the dataset has {all_classes}")
    if len(set(names)) != len(names) or not names:
        raise ValueError(f"classes must be a non-empty list of distinct names, got {names}")
    return names


def _select_classes(data: ImageData, classes: int | Sequence[str] | None) -> ImageData:
    if classes is None:
        return data
    names = _resolve_classes(data.classes, classes)
    lookup = torch.full((len(data.classes),), -1, dtype=torch.int64)
    for new, cls in enumerate(names):
        lookup[data.classes.index(cls)] = new
    new_labels = lookup[data.labels]
    keep = torch.nonzero(new_labels >= 0).flatten()
    return ImageData(data.images[keep], new_labels[keep], names)


def _water_fill(avail: Sequence[int], total: int, tie_break: Sequence[int]) -> list[int]:
    """Split ``total`` over classes with ``avail`` images left, as equally as they allow.

    Classes are served from the fewest images left up (``tie_break`` ranks equal ones), each taking
    ``ceil(left / classes_left)`` or all it has; since later classes have at least as many images,
    every class that is not emptied ends within one of the others.
    """
    order = sorted(range(len(avail)), key=lambda c: (avail[c], tie_break[c]))
    quota = [0] * len(avail)
    left = total
    for j, c in enumerate(order):
        take = min(avail[c], -(-left // (len(order) - j)))
        quota[c] = take
        left -= take
    if left:  # unreachable while total <= sum(avail), which balanced_split checks
        raise AssertionError(f"could not place {left} of {total}")
    return quota


def _resize_uint8(images: torch.Tensor, size: int) -> torch.Tensor:
    """Resize ``(N, 3, H, W)`` uint8 with the same PIL filter the ImageFolder decoder uses."""
    if images.shape[-2:] == (size, size):
        return images
    hwc = images.permute(0, 2, 3, 1).numpy()
    out = np.empty((len(hwc), size, size, 3), dtype=np.uint8)
    for i, img in enumerate(hwc):
        out[i] = np.asarray(Image.fromarray(img).resize((size, size), Image.Resampling.BILINEAR))
    return torch.from_numpy(out).permute(0, 3, 1, 2).contiguous()


# --------------------------------------------------------------------------------------------------
# CIFAR and SVHN
# --------------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------------
# ImageFolder trees (directories or tar archives)
# --------------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------------
# Download helpers
# --------------------------------------------------------------------------------------------------


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
