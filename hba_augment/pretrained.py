"""Schedules shipped with the package, looked up by name.

The JSON files live in the data package ``hba_augment.pretrained_policies`` (the repository's top-level
``pretrained_policies/`` folder) and are read with :mod:`importlib.resources`, so lookup also works from
a wheel or a zip. A file ``<name>.json`` is the schedule ``<name>``.
"""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING

from .schedule import Schedule

if TYPE_CHECKING:  # importlib.resources.abc is Python 3.11+; the package supports 3.10.
    from importlib.resources.abc import Traversable

__all__ = ["available_policies", "load_pretrained", "pretrained_path"]

_PACKAGE = "hba_augment.pretrained_policies"
_SUFFIX = ".json"


def _policy_dir() -> Traversable:
    return resources.files(_PACKAGE)


def available_policies() -> list[str]:
    """Names of the shipped schedules, sorted (the file names without ``.json``)."""
    return sorted(
        entry.name[: -len(_SUFFIX)]
        for entry in _policy_dir().iterdir()
        if entry.is_file() and entry.name.endswith(_SUFFIX) and not entry.name.startswith(".")
    )


def pretrained_path(name: str) -> Traversable:
    """The resource holding the shipped schedule ``name``.

    Raises:
        ValueError: if no schedule of that name is shipped; the message lists the available names.
    """
    available = available_policies()
    if not isinstance(name, str) or name not in available:
        raise ValueError(f"Unknown policy {name!r}; shipped policies: {available or 'none'}")
    return _policy_dir().joinpath(name + _SUFFIX)


def load_pretrained(name: str) -> Schedule:
    """Load and validate the shipped schedule ``name``.

    Raises:
        ValueError: if the name is unknown (listing the available names) or the file is invalid.
    """
    return Schedule.load(pretrained_path(name))
