"""hba_augment: Hypernetwork-Based Augmentation (Chen & Chang, ICCV 2021) for PyTorch.

Layers, each importing only those below it:

- :mod:`hba_augment.functional`: pure batched op kernels and PBA's sampling template.
- :class:`Schedule` and :mod:`hba_augment.pretrained`: learned epoch-dependent policies and the shipped ones.
- :class:`HBAPolicy`: the torchvision-compatible transform.
- :mod:`hba_augment.search` (imported on demand, never by the above): the hypernetwork search.
"""

from . import functional
from ._version import __version__
from .policy import HBAPolicy
from .pretrained import available_policies, load_pretrained
from .schedule import Schedule

__all__ = ["HBAPolicy", "Schedule", "__version__", "available_policies", "functional", "load_pretrained"]
