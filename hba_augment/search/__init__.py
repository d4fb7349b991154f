"""The hypernetwork search that learns HBA schedules (paper section 3, the contract, section 6).

* :mod:`~hba_augment.search.hyper`: hyper-layers ``HyperConv2d``, ``HyperLinear``, ``HyperBatchNorm2d``;
* ``hyperize(model, num_hparams, strategy)`` -> ``HyperModel`` (module ``_hyperize``: private, so that it
  cannot shadow the function of the same name);
* :mod:`~hba_augment.search.hparams`: the 54 hyperparameters and their map to a policy;
* :mod:`~hba_augment.search.config`: ``SearchConfig``, a search's settings from the paper's presets;
* :mod:`~hba_augment.search.loop`: ``run_search`` (Algorithm 2);
* :mod:`~hba_augment.search.population`: ``PopulationConfig`` and ``run_population_search`` (PBA's population
  search in HBA's policy space, ``--objective population``), built on :mod:`~hba_augment.search.pbt`
  (``explore``, ``truncation_selection``, ``lineage``);
* :mod:`~hba_augment.search.plot`: ``plot_schedule``; :mod:`~hba_augment.search.cli`: ``hba-augment search``.

It uses the parts it shares with policy evaluation (:mod:`hba_augment.datasets`,
:mod:`hba_augment.models`, the run driver :mod:`hba_augment._runner`) and never imports
:mod:`hba_augment.train`. Names are imported lazily, so ``import hba_augment.search.cli`` (argument parsing) stays cheap.
"""

from __future__ import annotations

from hba_augment._lazy import lazy_exports

_EXPORTS = {
    "HyperBatchNorm2d": "hyper",
    "HyperConv2d": "hyper",
    "HyperLinear": "hyper",
    "HyperModel": "_hyperize",
    "STRATEGIES": "_hyperize",
    "hyperize": "_hyperize",
    "NUM_HPARAMS": "hparams",
    "hparams_to_policy": "hparams",
    "init_hparams": "hparams",
    "policy_to_hparams": "hparams",
    "SearchConfig": "config",
    "SearchDivergedError": "loop",
    "SearchResult": "loop",
    "run_search": "loop",
    "plot_schedule": "plot",
    "PopulationConfig": "population",
    "run_population_search": "population",
    "explore": "pbt",
    "lineage": "pbt",
    "truncation_selection": "pbt",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
