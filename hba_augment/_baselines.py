"""The baseline augmentation of each protocol, shared by the search's and the evaluation's presets.

Only the standard library: ``hba-augment search --help`` prints the presets built from it, and a help
must not wait for torch to import.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BASELINES"]

#: The baseline augmentation of each protocol (paper): CIFAR's flip + pad-4 crop + Cutout 16; SVHN's
#: standardisation only + Cutout 20; reduced ImageNet at 32x32 (whose full-size baseline does not fit
#: such small images): CIFAR's flip + crop and no Cutout.
BASELINES: dict[str, dict[str, Any]] = {
    "cifar10": {"flip": True, "crop_padding": 4, "cutout": 16},
    "svhn": {"flip": False, "crop_padding": 0, "cutout": 20},
    "imagenet": {"flip": True, "crop_padding": 4, "cutout": 0},
}
