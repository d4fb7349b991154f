"""Policy evaluation: train a fresh network with an augmentation policy and measure its test error.

* :mod:`~hba_augment.train.trainer`: ``TrainConfig`` and ``train_and_evaluate`` (paper section 4.2);
* :mod:`~hba_augment.train.cli`: ``hba-augment train``.

It uses the shared parts (:mod:`hba_augment.datasets`, :mod:`hba_augment.models`, the run driver) and
never the search. Names are imported lazily, so ``import hba_augment.train.cli`` (argument parsing)
stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "TrainConfig": "trainer",
    "TrainResult": "trainer",
    "TrainingDivergedError": "trainer",
    "evaluate_model": "trainer",
    "train_and_evaluate": "trainer",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
