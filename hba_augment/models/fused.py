"""Several networks of one WRN architecture trained as one network (horizontal fusion).

A small network leaves most of a large GPU idle: one WRN-40-2 training on 128 images a step is bound by
launching its kernels, and eight such trainings in separate processes reached only 3.7x the steps per
second of one on an H100, the processes taking turns on the GPU rather than sharing it
(``benchmarks/RESULTS.md``, "eight processes share the GPU by turns"). :class:`FusedWRN` holds K networks
as one network K times as wide whose layers never mix them (HFTA, Wang et al., MLSys 2021): every
convolution is grouped by network, batch norm runs over the K x C channels (its statistics per channel,
so per network), and the classifier is one batched matrix product. A step of the K networks then launches
the kernels of one, each K times larger, and every network keeps its own weights, gradients, batch-norm
statistics and (the optimiser being elementwise) SGD update: network ``k`` of the stack computes what
network ``k`` alone computes on its own images, up to the order of floating-point sums
(``tests/test_fused.py``).

Only WRNs: their forward passes mix channels in exactly these layers (convolutions, batch norm, the
classifier). A family that concatenates channels (PyramidNet's zero-padded shortcut) or draws per-batch
coefficients (Shake-Shake) would mix the networks, so it is refused.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from hba_augment.models.wrn import WideResNet

__all__ = ["FusedWRN", "fuses"]


def fuses(model: str) -> bool:
    """Whether networks of the :func:`~hba_augment.models.create_model` name ``model`` can be fused (WRNs)."""
    from hba_augment.models import create_model

    with torch.device("meta"):  # nothing allocated
        return isinstance(create_model(model, 2), WideResNet)


class _GroupedLinear(nn.Module):
    """K linear layers, one per network: features ``(B, K C)`` -> logits ``(K, B, classes)``.

    ``weight`` ``(K, classes, C)`` and ``bias`` ``(K, classes)``: row ``k`` is network ``k``'s ``nn.Linear``."""

    def __init__(self, linears: Sequence[nn.Linear]) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.stack([m.weight.detach() for m in linears]))
        self.bias = nn.Parameter(torch.stack([m.bias.detach() for m in linears]))

    def forward(self, x: Tensor) -> Tensor:
        k, _, c = self.weight.shape
        return torch.baddbmm(self.bias.unsqueeze(1), x.view(len(x), k, c).transpose(0, 1), self.weight.transpose(1, 2))


class FusedWRN(nn.Module):
    """K WRNs of one architecture as one network (see the module docstring).

    Args:
        models: the K networks (:class:`~hba_augment.models.wrn.WideResNet`, same depth, width and classes);
            their weights and batch-norm statistics are copied, not shared.

    Shapes: ``(K, B, C, H, W)`` float, network ``k``'s images at ``k`` -> ``(K, B, classes)`` logits.

    Raises:
        TypeError: a network that is not a ``WideResNet``.
        ValueError: no networks, or networks of different shapes.
    """

    def __init__(self, models: Sequence[nn.Module]) -> None:
        super().__init__()
        if not models:
            raise ValueError("FusedWRN needs at least one network, got none")
        bad = sorted({type(m).__name__ for m in models if not isinstance(m, WideResNet)})
        if bad:
            raise TypeError(f"FusedWRN fuses WideResNets only (other families mix the networks' channels), got {bad}")
        shapes = {tuple((n, tuple(p.shape)) for n, p in m.state_dict().items()) for m in models}
        if len(shapes) != 1:
            raise ValueError("FusedWRN needs networks of one architecture (depth, width, classes)")
        self.members = len(models)
        self.net = copy.deepcopy(models[0])
        by_name = [dict(m.named_modules()) for m in models]
        for name, module in list(self.net.named_modules()):
            peers = [modules[name] for modules in by_name]
            new = self._fused_layer(module, peers)
            if new is not None:
                parent, _, child = name.rpartition(".")
                setattr(self.net.get_submodule(parent), child, new.to(module.weight.device))

    def _fused_layer(self, module: nn.Module, peers: list[nn.Module]) -> nn.Module | None:
        k = self.members
        if isinstance(module, nn.Conv2d):
            conv = nn.Conv2d(k * module.in_channels, k * module.out_channels, module.kernel_size, module.stride,
                             module.padding, module.dilation, groups=k * module.groups, bias=module.bias is not None)
            with torch.no_grad():
                conv.weight.copy_(torch.cat([m.weight for m in peers]))
                if module.bias is not None:
                    conv.bias.copy_(torch.cat([m.bias for m in peers]))
            return conv
        if isinstance(module, nn.BatchNorm2d):
            bn = nn.BatchNorm2d(k * module.num_features, module.eps, module.momentum)
            with torch.no_grad():
                for key in ("weight", "bias", "running_mean", "running_var"):
                    getattr(bn, key).copy_(torch.cat([getattr(m, key) for m in peers]))
                bn.num_batches_tracked.copy_(module.num_batches_tracked)
            return bn
        if isinstance(module, nn.Linear):
            return _GroupedLinear(peers)
        return None

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim != 5 or len(x) != self.members:
            raise ValueError(f"FusedWRN of {self.members} networks takes (K={self.members}, B, C, H, W) images, "
                             f"got shape {tuple(x.shape)}")
        k, b, c, h, w = x.shape
        # Row j of the wide batch holds image j of every network, their channels side by side; one copy,
        # into the memory format the images came in (channels-last when channels are innermost).
        layout = torch.channels_last if x.stride(2) == 1 and c > 1 else torch.contiguous_format
        wide = torch.empty(b, k * c, h, w, dtype=x.dtype, device=x.device, memory_format=layout)
        wide.unflatten(1, (k, c)).copy_(x.transpose(0, 1))
        return self.net(wide)

    def member_view(self, name: str, value: Tensor, i: int) -> Tensor:
        """Network ``i``'s part of ``value``, a tensor shaped like the fused state entry ``name`` (the entry
        itself, or e.g. an optimiser's momentum of that parameter): a view."""
        if not 0 <= i < self.members:
            raise IndexError(f"network {i} of a FusedWRN of {self.members}")
        if isinstance(self.net.get_submodule(name.rpartition(".")[0]), _GroupedLinear):
            return value[i]
        if value.ndim == 0:  # num_batches_tracked: the same count for every network
            return value
        size = len(value) // self.members
        return value[i * size : (i + 1) * size]

    def _views(self, i: int) -> dict[str, Tensor]:
        return {name: self.member_view(name, value, i) for name, value in self.net.state_dict(keep_vars=True).items()}

    def member_state_dict(self, i: int) -> dict[str, Tensor]:
        """Network ``i``'s state dict, as its own ``WideResNet`` would have it (copies)."""
        return {name: value.detach().clone() for name, value in self._views(i).items()}

    def load_member_state_dict(self, i: int, state: Mapping[str, Tensor]) -> None:
        """Set network ``i`` from a ``WideResNet`` state dict of this architecture (every key required)."""
        views = self._views(i)
        missing, unexpected = sorted(set(views) - set(state)), sorted(set(state) - set(views))
        if missing or unexpected:
            raise ValueError(f"the state dict does not fit network {i}: missing {missing}, unexpected {unexpected}")
        with torch.no_grad():
            for name, target in views.items():
                target.copy_(state[name])

    def parameter_names(self) -> list[str]:
        """The names of :meth:`parameters`, in order: the plain network's (``WideResNet.parameters()`` order)."""
        return [name for name, _ in self.net.named_parameters()]

    def member_optimizer_state(self, state: Mapping[str, Any], i: int) -> dict[str, Any]:
        """Network ``i``'s part of ``state``, the ``state_dict()`` of an optimiser over :meth:`parameters` (e.g.
        SGD's momentum): what the same optimiser over network ``i`` alone would hold (tensors copied)."""
        names = self.parameter_names()
        per_param = {j: {key: self.member_view(names[int(j)], value, i).clone()
                         if isinstance(value, Tensor) and value.ndim else value for key, value in entry.items()}
                     for j, entry in state["state"].items()}
        return {**state, "state": per_param}

    def load_member_optimizer_state(self, optimizer: torch.optim.Optimizer, i: int, state: Mapping[str, Any]) -> None:
        """Write network ``i``'s optimiser ``state`` (:meth:`member_optimizer_state`'s form) into ``optimizer``,
        an optimiser over :meth:`parameters`; a per-parameter tensor it lacks yet is made of zeros first."""
        names, params = self.parameter_names(), list(self.parameters())
        with torch.no_grad():
            for j, entry in state["state"].items():
                param = params[int(j)]
                slot = optimizer.state[param]
                for key, value in entry.items():
                    if isinstance(value, Tensor) and value.ndim:
                        full = slot.setdefault(key, torch.zeros_like(param, memory_format=torch.preserve_format))
                        self.member_view(names[int(j)], full, i).copy_(value)
                    else:
                        slot[key] = value
