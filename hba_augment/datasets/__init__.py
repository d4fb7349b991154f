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

from hba_augment.datasets._common import DATASETS, SPLITS, ImageData, default_cache_dir
from hba_augment.datasets._imagefolder import IMG_EXTENSIONS
from hba_augment.datasets._load import load_dataset
from hba_augment.datasets._official import RESOURCES, Resource, download
from hba_augment.datasets._splits import balanced_split, reduced_split

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
