"""Model registry for the search and policy evaluation.

``create_model("wrn-40-2", num_classes=10)``. A model family registers a name pattern (a regular
expression whose groups are passed to its factory) and a few example names for :func:`available_models`.
To add a family, write a module here and call :func:`register_model` at the bottom of this file.
:class:`hba_augment.models.fused.FusedWRN` trains several WRNs as one network (``hba-augment train --fuse``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import NamedTuple

from torch import nn

__all__ = ["available_models", "create_model", "register_model"]


class _Family(NamedTuple):
    pattern: re.Pattern[str]
    factory: Callable[..., nn.Module]
    examples: tuple[str, ...]
    syntax: str


_FAMILIES: dict[str, _Family] = {}


def register_model(family: str, pattern: str, factory: Callable[..., nn.Module], examples: tuple[str, ...],
                   syntax: str) -> None:
    """Register a model family.

    Args:
        family: a short family name, e.g. ``"wrn"``.
        pattern: a regular expression that must match the whole model name; its groups (strings) are passed
            to ``factory`` before the keyword ``num_classes``.
        factory: ``factory(*groups, num_classes=...) -> nn.Module``.
        examples: concrete names listed by :func:`available_models`.
        syntax: how to write a name, for error messages, e.g. ``"wrn-<depth>-<width>"``.
    """
    if family in _FAMILIES:
        raise ValueError(f"model family {family!r} is already registered")
    _FAMILIES[family] = _Family(re.compile(pattern), factory, tuple(examples), syntax)


def available_models() -> list[str]:
    """Example names of every registered family (any name matching a family's syntax also works)."""
    return [name for fam in _FAMILIES.values() for name in fam.examples]


def create_model(name: str, num_classes: int) -> nn.Module:
    """Build the model called ``name`` with ``num_classes`` outputs.

    Raises:
        ValueError: for an unknown name (the message lists the accepted syntaxes and examples) or bad
            architecture parameters.
    """
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"num_classes must be a positive int, got {num_classes!r}")
    key = name.strip().lower() if isinstance(name, str) else name
    for fam in _FAMILIES.values():
        match = fam.pattern.fullmatch(key) if isinstance(key, str) else None
        if match:
            return fam.factory(*match.groups(), num_classes=num_classes)
    syntaxes = ", ".join(fam.syntax for fam in _FAMILIES.values())
    raise ValueError(f"Unknown model {name!r}; expected one of the forms {syntaxes} (e.g. {available_models()})")


def _wrn(depth: str, width: str, *, num_classes: int) -> nn.Module:
    from hba_augment.models.wrn import wide_resnet

    return wide_resnet(int(depth), int(width), num_classes)


register_model("wrn", r"wrn-(\d+)-(\d+)", _wrn, ("wrn-10-1", "wrn-16-1", "wrn-28-10", "wrn-40-2"),
               "wrn-<depth>-<width>")


def _shake_shake(depth: str, width: str, *, num_classes: int) -> nn.Module:
    from hba_augment.models.shake_shake import shake_shake

    return shake_shake(int(depth), int(width), num_classes)


def _pyramidnet(depth: str, alpha: str, *, num_classes: int) -> nn.Module:
    from hba_augment.models.pyramidnet import pyramidnet

    return pyramidnet(int(depth), int(alpha), num_classes)


def _resnet(depth: str, *, num_classes: int) -> nn.Module:
    from hba_augment.models.resnet import resnet

    return resnet(int(depth), num_classes)


def _alexnet_stn(*, num_classes: int) -> nn.Module:
    from hba_augment.models.alexnet import alexnet_stn

    return alexnet_stn(num_classes)


register_model("shake-shake", r"shake-shake-(\d+)-2x(\d+)d", _shake_shake,
               ("shake-shake-26-2x32d", "shake-shake-26-2x96d", "shake-shake-26-2x112d"),
               "shake-shake-<depth>-2x<width>d")
register_model("pyramidnet", r"pyramidnet-(\d+)-(\d+)", _pyramidnet, ("pyramidnet-272-200",),
               "pyramidnet-<depth>-<alpha> (bottleneck, ShakeDrop)")
register_model("resnet", r"resnet-(\d+)", _resnet, ("resnet-50",), "resnet-<18|34|50|101|152>")
register_model("alexnet-stn", r"alexnet-stn", _alexnet_stn, ("alexnet-stn",), "alexnet-stn")
