"""The paper's search settings per protocol, without importing torch.

:mod:`~hba_augment.search.loop` uses them; ``hba-augment search --help`` prints them, and a help or an
argument error must not wait seconds for torch to import.
"""

from __future__ import annotations

from typing import Any

from hba_augment._baselines import BASELINES

__all__ = ["BASELINES", "DEFAULT_PRESET", "PRESETS"]

#: The paper's search settings (appendix table "Hyperparameters for policy search") plus the baseline
#: augmentation of each protocol. The paper searches on Reduced CIFAR-10 and has no CIFAR-100 row:
#: ``cifar10`` is also used for CIFAR-100.
PRESETS: dict[str, dict[str, Any]] = {
    "cifar10": {
        "epochs": 200, "train_size": 4000, "val_size": 10000, "lr": 0.05, "lr_schedule": "cosine",
        "lr_milestones": (), "wd": 0.005, "hparam_lr": 0.03, **BASELINES["cifar10"],
    },
    "svhn": {
        "epochs": 160, "train_size": 4000, "val_size": 10000, "lr": 0.01, "lr_schedule": "cosine",
        "lr_milestones": (), "wd": 0.01, "hparam_lr": 0.02, **BASELINES["svhn"],
    },
    # Reduced ImageNet: 120 classes at 32x32.
    "imagenet": {
        "epochs": 270, "train_size": 6000, "val_size": 10000, "lr": 0.1, "lr_schedule": "step",
        "lr_milestones": (90, 180, 240), "wd": 0.001, "hparam_lr": 0.007, **BASELINES["imagenet"],
        "image_size": 32, "classes": 120,
    },
}
#: Preset used for each dataset when none is named.
DEFAULT_PRESET = {"cifar10": "cifar10", "cifar100": "cifar10", "svhn": "svhn", "imagefolder": "imagenet"}
