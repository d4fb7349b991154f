"""``load_dataset``: one entry point for every source."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from hba_augment.datasets._common import (
    ImageData,
    _check_image_size,
    _check_name,
    _check_split,
    _resize_uint8,
    _select_classes,
    default_cache_dir,
)
from hba_augment.datasets._imagefolder import _load_imagefolder
from hba_augment.datasets._official import _CIFAR, _archive_hint, _load_cifar, _load_svhn
from hba_augment.datasets._official import download as _download  # load_dataset's flag shadows the name

__all__ = ["load_dataset"]


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
