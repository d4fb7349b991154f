"""What every dataset source shares: the in-memory split, the source and split names, the checks at the
door, class selection and resizing (the package's docs: ``hba_augment.datasets``)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from PIL import Image

__all__ = ["DATASETS", "SPLITS", "ImageData", "default_cache_dir"]

DATASETS = ("cifar10", "cifar100", "svhn", "imagefolder")

SPLITS: dict[str, tuple[str, ...]] = {
    "cifar10": ("train", "test"),
    "cifar100": ("train", "test"),
    "svhn": ("train", "test", "extra"),
    "imagefolder": ("train", "test", "val"),
}


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


def default_cache_dir() -> Path:
    """``$HBA_CACHE_DIR`` if set, else ``~/.cache/hba_augment``."""
    env = os.environ.get("HBA_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "hba_augment"


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


def _resize_uint8(images: torch.Tensor, size: int) -> torch.Tensor:
    """Resize ``(N, 3, H, W)`` uint8 with the same PIL filter the ImageFolder decoder uses."""
    if images.shape[-2:] == (size, size):
        return images
    hwc = images.permute(0, 2, 3, 1).numpy()
    out = np.empty((len(hwc), size, size, 3), dtype=np.uint8)
    for i, img in enumerate(hwc):
        out[i] = np.asarray(Image.fromarray(img).resize((size, size), Image.Resampling.BILINEAR))
    return torch.from_numpy(out).permute(0, 3, 1, 2).contiguous()
