"""Turn an ordinary network into a hypernetwork by swapping chosen layers for hyper-layers.

The weight-sharing strategies of the paper (section 3.4) name the layers that get a hyper-layer; every
other layer is shared by the whole population:

* ``"conv+bn"``: every ``nn.Conv2d`` and every ``nn.BatchNorm2d``;
* ``"conv"`` / ``"bn"``: every ``nn.Conv2d`` / every ``nn.BatchNorm2d``;
* ``"first-conv"`` / ``"first-bn"``: only the first one in module order (``model.named_modules()``);
  ``"first-bn"`` is the paper's choice and the default;
* ``"all"``: every ``nn.Conv2d``, ``nn.BatchNorm2d`` and ``nn.Linear`` (STN's full hypernetwork);
* ``"none"``: no hyper-layer (a plain network that ignores ``hparams``; useful as a baseline).

How ``hparams`` reach the layers: :class:`HyperModel` publishes them in a :mod:`contextvars` variable for
the duration of ``model(x)`` and every hyper-layer called without an explicit ``hparams`` reads it, so any
``forward`` (``nn.Sequential``, residual blocks, functional code) works unchanged. The variable is private
to the calling thread (and asyncio task) and is restored on exit, so concurrent calls from several threads
and nested calls are safe. A hyper-layer called outside any ``HyperModel`` call raises ``ValueError``.
"""

from __future__ import annotations

import copy

from torch import Tensor, nn

from hba_augment.search.hyper import HyperBatchNorm2d, HyperConv2d, HyperLayer, HyperLinear, hparams_context

__all__ = ["STRATEGIES", "HyperModel", "hyperize"]

#: Strategy name -> (layer types that get a hyper-layer, only the first one?).
_STRATEGY_TABLE: dict[str, tuple[tuple[type[nn.Module], ...], bool]] = {
    "conv+bn": ((nn.Conv2d, nn.BatchNorm2d), False),
    "conv": ((nn.Conv2d,), False),
    "bn": ((nn.BatchNorm2d,), False),
    "first-conv": ((nn.Conv2d,), True),
    "first-bn": ((nn.BatchNorm2d,), True),
    "all": ((nn.Conv2d, nn.BatchNorm2d, nn.Linear), False),
    "none": ((), False),
}
STRATEGIES: tuple[str, ...] = tuple(_STRATEGY_TABLE)

_HYPER_OF: tuple[tuple[type[nn.Module], type[HyperLayer]], ...] = (
    (nn.Conv2d, HyperConv2d),
    (nn.BatchNorm2d, HyperBatchNorm2d),
    (nn.Linear, HyperLinear),
)


class HyperModel(nn.Module):
    """A network with hyper-layers, called as ``hm(x, hparams)``.

    Args:
        model: the network, whose hyper-layers (if any) read ``hparams`` from the call context.
        num_hparams: ``n``, the length of ``lambda``.
        strategy: the strategy the hyper-layers were chosen with (informational).

    Shapes: ``x`` as ``model`` expects (batch first, ``B`` examples); ``hparams`` ``(B, n)`` (one per
    example) or ``(n,)`` (shared) -> whatever ``model`` returns.
    """

    def __init__(self, model: nn.Module, num_hparams: int, strategy: str = "custom") -> None:
        super().__init__()
        self.model = model
        self.num_hparams = num_hparams
        self.strategy = strategy

    @property
    def hyper_layer_names(self) -> list[str]:
        """Qualified names (inside ``self.model``) of the hyper-layers, in module order."""
        return [name for name, m in self.model.named_modules() if isinstance(m, HyperLayer)]

    def hyper_parameters(self) -> list[nn.Parameter]:
        """The ``phi_U`` and ``phi_V`` parameters of all hyper-layers (``phi_0`` are the usual weights)."""
        return [p for m in self.model.modules() if isinstance(m, HyperLayer)
                for name, p in m.named_parameters(recurse=False) if name.endswith(("_u", "_v"))]

    def forward(self, x: Tensor, hparams: Tensor) -> Tensor:
        n = self.num_hparams
        if not isinstance(hparams, Tensor) or not hparams.is_floating_point():
            raise ValueError(f"hparams must be a floating-point tensor, got {hparams!r:.80}")
        ok = (hparams.dim() == 1 and hparams.shape[0] == n) or (
            hparams.dim() == 2 and hparams.shape[1] == n and hparams.shape[0] == x.shape[0])
        if not ok:
            raise ValueError(f"hparams must have shape ({n},) or (B, {n}) with B = {x.shape[0]}, "
                             f"got {tuple(hparams.shape)}")
        with hparams_context(hparams):
            return self.model(x)

    def extra_repr(self) -> str:
        return f"num_hparams={self.num_hparams}, strategy={self.strategy!r}"


def _select(model: nn.Module, strategy: str) -> list[nn.Module]:
    types, first_only = _STRATEGY_TABLE[strategy]
    chosen: list[nn.Module] = []
    for _, m in model.named_modules():
        if isinstance(m, types) and not isinstance(m, HyperLayer):
            if first_only:
                return [m]
            chosen.append(m)
    return chosen


def hyperize(model: nn.Module, num_hparams: int, strategy: str = "first-bn", *, inplace: bool = False) -> HyperModel:
    """Wrap ``model`` as a :class:`HyperModel` whose layers named by ``strategy`` are hyper-layers.

    Each chosen layer is replaced by ``Hyper*.from_module(layer, num_hparams)``, which keeps its weights as
    ``phi_0``, so at initialisation ``hyperize(model, n)(x, hparams)`` equals ``model(x)`` for any ``hparams``.
    A module that appears under several names (shared) is replaced everywhere by the same hyper-layer.

    Args:
        model: any ``nn.Module`` built from standard layers (subclasses of ``nn.Conv2d``, ``nn.BatchNorm2d``,
            ``nn.Linear`` count as those layers).
        num_hparams: ``n``, the length of ``lambda`` (54 for the HBA search space).
        strategy: one of :data:`STRATEGIES`.
        inplace: modify ``model`` itself instead of a deep copy.

    Returns:
        The :class:`HyperModel`.

    Raises:
        ValueError: for an unknown strategy, ``num_hparams < 1``, or a strategy other than ``"none"``
            that finds no layer to replace.
    """
    if strategy not in _STRATEGY_TABLE:
        raise ValueError(f"Unknown strategy {strategy!r}; expected one of {list(STRATEGIES)}")
    if isinstance(num_hparams, bool) or not isinstance(num_hparams, int) or num_hparams < 1:
        raise ValueError(f"num_hparams must be a positive int, got {num_hparams!r}")
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be an nn.Module, got {type(model).__name__}")
    if not inplace:
        model = copy.deepcopy(model)
    chosen = _select(model, strategy)
    if strategy != "none" and not chosen:
        kinds = ", ".join(t.__name__ for t in _STRATEGY_TABLE[strategy][0])
        raise ValueError(f"strategy {strategy!r} found no layer of type {kinds} in {type(model).__name__}")
    replacement: dict[int, nn.Module] = {}
    for m in chosen:
        for base, hyper in _HYPER_OF:
            if isinstance(m, base):
                replacement[id(m)] = hyper.from_module(m, num_hparams)
                break
    if id(model) in replacement:
        model = replacement[id(model)]
    else:
        # Walk every parent (not only the first path named_modules reports) so shared modules are
        # replaced under all their names.
        for parent in list(model.modules()):
            for child_name, child in list(parent._modules.items()):
                if child is not None and id(child) in replacement:
                    parent._modules[child_name] = replacement[id(child)]
    return HyperModel(model, num_hparams, strategy)
