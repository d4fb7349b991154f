"""hba_augment: Hypernetwork-Based Augmentation (Chen & Chang, ICCV 2021) for PyTorch.

Layers, each importing only those below it:

- :mod:`hba_augment.functional`: pure batched op kernels and PBA's sampling template.
- :class:`Schedule` and :mod:`hba_augment.pretrained`: learned epoch-dependent policies and the shipped ones.
- :class:`HBAPolicy`: the torchvision-compatible transform.
- Imported on demand, never by the above: :mod:`hba_augment.search` (the hypernetwork search) and
  :mod:`hba_augment.train` (policy evaluation), over the parts they share: :mod:`hba_augment.datasets`,
  :mod:`hba_augment.models` and the run driver (``_runner``, ``_distributed``).

What the package promises is written down in ``docs/contract.md`` (the README links it); comments cite
its sections as "the contract, section N".

The public names are imported on first use (PEP 562), so that ``import hba_augment`` and the
``hba-augment`` command's ``--help`` / ``--version`` do not pay for importing torch (about 5 s on a busy
machine); ``from hba_augment import HBAPolicy`` works as usual.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports
from ._version import __version__

if TYPE_CHECKING:  # what the lazy names resolve to, for type checkers and IDEs
    from . import functional
    from .policy import HBAPolicy
    from .pretrained import available_policies, load_pretrained
    from .schedule import Schedule

__all__ = ["HBAPolicy", "Schedule", "__version__", "available_policies", "functional", "load_pretrained"]

# name -> submodule that defines it; "functional" is a submodule itself.
_LAZY = {
    "HBAPolicy": "policy",
    "Schedule": "schedule",
    "available_policies": "pretrained",
    "load_pretrained": "pretrained",
}
__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY, submodules=("functional",))
