"""hba_augment: Hypernetwork-Based Augmentation (Chen & Chang, ICCV 2021) for PyTorch.

Layers, each importing only those below it:

- :mod:`hba_augment.functional`: pure batched op kernels and PBA's sampling template.
- :class:`Schedule` and :mod:`hba_augment.pretrained`: learned epoch-dependent policies and the shipped ones.
- :class:`HBAPolicy`: the torchvision-compatible transform.
- Imported on demand, never by the above: :mod:`hba_augment.search` (the hypernetwork search) and
  :mod:`hba_augment.train` (policy evaluation), over the parts they share: :mod:`hba_augment.datasets`,
  :mod:`hba_augment.models` and the run driver (``_runner``, ``_distributed``).

The public names are imported on first use (PEP 562), so that ``import hba_augment`` and the
``hba-augment`` command's ``--help`` / ``--version`` do not pay for importing torch (about 5 s on a busy
machine); ``from hba_augment import HBAPolicy`` works as usual.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:  # what the lazy names resolve to, for type checkers and IDEs
    from . import functional
    from .policy import HBAPolicy
    from .pretrained import available_policies, load_pretrained
    from .schedule import Schedule

__all__ = ["HBAPolicy", "Schedule", "__version__", "available_policies", "functional", "load_pretrained"]

# name -> (module, attribute); attribute None means the module itself.
_LAZY: dict[str, tuple[str, str | None]] = {
    "functional": (".functional", None),
    "HBAPolicy": (".policy", "HBAPolicy"),
    "Schedule": (".schedule", "Schedule"),
    "available_policies": (".pretrained", "available_policies"),
    "load_pretrained": (".pretrained", "load_pretrained"),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module_name, attribute = _LAZY[name]
    module = importlib.import_module(module_name, __name__)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
