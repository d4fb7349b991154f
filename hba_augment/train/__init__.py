"""Policy evaluation: train a fresh network with an augmentation policy and measure its test error.

* :mod:`~hba_augment.train.config`: ``TrainConfig``, the paper's evaluation hyperparameters and policy names;
* :mod:`~hba_augment.train.trainer`: ``train_and_evaluate`` (paper section 4.2);
* :mod:`~hba_augment.train.fused`: ``train_fused``, runs that differ only in their seed as one network;
* :mod:`~hba_augment.train.cli`: ``hba-augment train``.

It uses the shared parts (:mod:`hba_augment.datasets`, :mod:`hba_augment.models`, the run driver) and
never the search. Names are imported lazily, so ``import hba_augment.train.cli`` (argument parsing)
stays cheap.
"""

from __future__ import annotations

from hba_augment._lazy import lazy_exports

_EXPORTS = {
    "TrainConfig": "config",
    "TrainResult": "trainer",
    "TrainingDivergedError": "trainer",
    "evaluate_model": "trainer",
    "train_and_evaluate": "trainer",
    "train_fused": "fused",
    "train_side_by_side": "trainer",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
