"""Lazy attributes of a package (PEP 562), so that importing it, and a CLI's ``--help``, skip torch."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, namespace: dict[str, Any], exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of ``package``.

    Args:
        package: the package's ``__name__``.
        namespace: its ``globals()``; a name, once looked up, is stored there, so later lookups are plain.
        exports: public name -> submodule (relative to ``package``) that defines it; a name equal to its
            submodule is the submodule itself.

    Returns:
        ``(__getattr__, __dir__)``, to be assigned at the package's top level.
    """

    def getattr_(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        loaded = importlib.import_module(f"{package}.{module}")
        value = loaded if name == module else getattr(loaded, name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return getattr_, dir_
