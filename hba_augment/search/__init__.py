"""The hypernetwork search that learns HBA schedules (paper section 3, SPEC section 6).

* :mod:`~hba_augment.search.hyper`: hyper-layers ``HyperConv2d``, ``HyperLinear``, ``HyperBatchNorm2d``;
* :mod:`~hba_augment.search.hyperize`: ``hyperize(model, num_hparams, strategy)`` -> ``HyperModel``;
* :mod:`~hba_augment.search.hparams`: the 54 hyperparameters and their map to a policy;
* :mod:`~hba_augment.search.loop`: ``SearchConfig`` and ``run_search`` (Algorithm 2);
* :mod:`~hba_augment.search.plot`: ``plot_schedule``; :mod:`~hba_augment.search.cli`: ``hba-augment search``.

It uses the parts it shares with policy evaluation (:mod:`hba_augment.datasets`,
:mod:`hba_augment.models`, the run driver :mod:`hba_augment._runner`) and never imports
:mod:`hba_augment.train`. Names are imported lazily, so ``import hba_augment.search.cli`` (argument parsing) stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "HyperBatchNorm2d": "hyper",
    "HyperConv2d": "hyper",
    "HyperLinear": "hyper",
    "HyperModel": "hyperize",
    "STRATEGIES": "hyperize",
    "hyperize": "hyperize",
    "NUM_HPARAMS": "hparams",
    "hparams_to_policy": "hparams",
    "init_hparams": "hparams",
    "policy_to_hparams": "hparams",
    "SearchConfig": "loop",
    "SearchDivergedError": "loop",
    "SearchResult": "loop",
    "run_search": "loop",
    "plot_schedule": "plot",
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
