"""Lazy attributes of a package (PEP 562), so that importing it, and a CLI's ``--help``, skip torch."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str,
    namespace: dict[str, Any],
    exports: Mapping[str, str],
    submodules: Collection[str] = (),
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of ``package``.

    A public name must not be the name of a submodule other than itself: importing a submodule binds its
    name in the package (Python's import system does so), which would hide the export of the same name
    for every later ``from package import name``. Hence a name defined in a submodule of its own name is
    refused here, and ``tests/test_architecture.py`` checks every exported name in a fresh interpreter.

    Args:
        package: the package's ``__name__``.
        namespace: its ``globals()``; a name, once looked up, is stored there, so later lookups are plain.
        exports: public name -> submodule (relative to ``package``) that defines it.
        submodules: public names that are submodules themselves (``"functional"``).

    Returns:
        ``(__getattr__, __dir__)``, to be assigned at the package's top level.

    Raises:
        ValueError: a name of ``exports`` equal to its submodule's name, or listed in ``submodules`` too.
    """
    shadowed = sorted(name for name, module in exports.items() if name == module or name in submodules)
    if shadowed:
        raise ValueError(
            f"{package}: the exported names {shadowed} are also submodule names; importing the submodule "
            "would hide the export. Give the submodule a private name (a leading underscore)."
        )

    def getattr_(name: str) -> Any:
        if name in submodules:
            value = importlib.import_module(f"{package}.{name}")
        elif name in exports:
            value = getattr(importlib.import_module(f"{package}.{exports[name]}"), name)
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted(set(namespace) | set(exports) | set(submodules))

    return getattr_, dir_
