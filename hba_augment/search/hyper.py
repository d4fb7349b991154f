"""Hyper-layers: layers whose weights are a rank-1 linear function of the hyperparameters (the contract, section 6).

For a layer with weight ``W`` (``c_out`` rows) and hyperparameters ``lambda`` (``n`` values), a hyper-layer
holds ``phi_0`` and ``phi_U`` shaped like ``W`` and ``phi_V`` of shape ``(c_out, n)`` and uses

    W(lambda) = phi_0 + diag(phi_V @ lambda) @ phi_U

(Chen & Chang 2021, appendix C; the STN layers of MacKay et al. 2019). Because the ``lambda``-dependent part
only scales whole output channels, ``layer(x_i; W(lambda_i))`` equals
``layer(x_i; phi_0) + (phi_V @ lambda_i) * layer(x_i; phi_U)`` channel-wise, so a batch with one ``lambda_i``
per example costs one call of the underlying op with ``2 * c_out`` output channels, never materialising a
weight per example. The bias has the same form with its own ``phi_0``, ``phi_U`` (``c_out``) and ``phi_V``.

Each layer is called as ``layer(x, hparams)`` with ``hparams`` of shape ``(B, n)`` (one row per example of
``x``) or ``(n,)`` (shared by the batch). Inside a :class:`~hba_augment.search.HyperModel` the
``hparams`` argument may be omitted: the layer then reads the value that the enclosing ``HyperModel`` call
published (see :func:`current_hparams`).

Initialisation: ``phi_V = 0``, so a fresh hyper-layer (and one made with ``from_module``) computes exactly
the plain layer with weights ``phi_0`` for every ``lambda``; ``phi_U`` is drawn like the plain layer's
weights (convolution/linear) or set to ones (batch norm) so that ``phi_V`` receives a gradient from the
first step on.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "HyperBatchNorm2d",
    "HyperConv2d",
    "HyperLayer",
    "HyperLinear",
    "current_hparams",
    "hparams_context",
]

# The hyperparameters of the innermost running HyperModel call. A ContextVar is per thread (and per
# asyncio task), so concurrent calls in different threads do not see each other's values, and the
# token-based reset makes nested calls restore the outer value.
_CURRENT_HPARAMS: contextvars.ContextVar[Tensor | None] = contextvars.ContextVar("hba_hparams", default=None)


@contextlib.contextmanager
def hparams_context(hparams: Tensor) -> Iterator[None]:
    """Publish ``hparams`` to every hyper-layer called without an explicit ``hparams`` inside the block."""
    token = _CURRENT_HPARAMS.set(hparams)
    try:
        yield
    finally:
        _CURRENT_HPARAMS.reset(token)


def current_hparams() -> Tensor | None:
    """The ``hparams`` published by the innermost active :func:`hparams_context` in this thread, or ``None``."""
    return _CURRENT_HPARAMS.get()


class HyperLayer(nn.Module):
    """Base class: validation of ``hparams`` and the ``lambda -> per-channel scale`` map."""

    num_hparams: int

    def _resolve(self, x: Tensor, hparams: Tensor | None) -> Tensor:
        if hparams is None:
            hparams = current_hparams()
            if hparams is None:
                raise ValueError(
                    f"{type(self).__name__} needs hparams: call it as layer(x, hparams) or inside a HyperModel"
                )
        if not isinstance(hparams, Tensor) or not hparams.is_floating_point():
            raise ValueError(f"hparams must be a floating-point tensor, got {hparams!r:.80}")
        n = self.num_hparams
        if hparams.dim() == 1:
            if hparams.shape[0] != n:
                raise ValueError(f"hparams must have shape ({n},) or (B, {n}), got {tuple(hparams.shape)}")
        elif hparams.dim() == 2:
            if hparams.shape[1] != n or hparams.shape[0] != x.shape[0]:
                raise ValueError(
                    f"hparams must have shape ({n},) or (B, {n}) with B = {x.shape[0]} (the batch size of x), "
                    f"got {tuple(hparams.shape)}"
                )
        else:
            raise ValueError(f"hparams must have shape ({n},) or (B, {n}), got {tuple(hparams.shape)}")
        return hparams.to(x.dtype) if hparams.dtype != x.dtype else hparams

    @staticmethod
    def _scale(hparams: Tensor, v: Tensor) -> Tensor:
        """``phi_V @ lambda`` for every example: shape ``(c_out,)`` or ``(B, c_out)``."""
        return F.linear(hparams, v)

    @staticmethod
    def _check_num_hparams(num_hparams: int) -> None:
        if num_hparams < 1:
            raise ValueError(f"num_hparams must be a positive int, got {num_hparams}")

    def _rank_one_factors(self, ref: nn.Conv2d | nn.Linear, fan_in: int) -> None:
        """The parameters of a layer whose weights are ``phi_0 + (phi_V lambda) phi_U`` per output channel:
        ``weight`` and ``bias`` (``phi_0``) copied from ``ref``, ``weight_u`` and ``bias_u`` (``phi_U``) drawn as
        ``ref``'s own default initialisation, ``weight_v`` and ``bias_v`` (``phi_V``, ``(out, n)``) zero, so that
        the layer starts as ``ref`` for every ``lambda``. Registered and drawn in that order, weight first."""
        for name, ref_param in (("weight", ref.weight), ("bias", ref.bias)):
            if ref_param is None:
                for suffix in ("", "_u", "_v"):
                    self.register_parameter(name + suffix, None)
                continue
            setattr(self, name, nn.Parameter(ref_param.detach().clone()))
            setattr(self, name + "_u", nn.Parameter(torch.empty_like(ref_param)))
            setattr(self, name + "_v", nn.Parameter(ref_param.new_zeros(ref_param.shape[0], self.num_hparams)))
            _uniform_(getattr(self, name + "_u").data, fan_in)

    def _copy_phi_0(self, module: nn.Conv2d | nn.Linear) -> HyperLayer:
        """Copy ``module``'s weight and bias into ``phi_0``; returns the layer."""
        with torch.no_grad():
            self.weight.copy_(module.weight)
            if module.bias is not None:
                self.bias.copy_(module.bias)
        return self


def _uniform_(t: Tensor, fan_in: int) -> None:
    # nn.Conv2d / nn.Linear default: kaiming_uniform_(a=sqrt(5)) == U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    nn.init.uniform_(t, -bound, bound)


class HyperConv2d(HyperLayer):
    """2-D convolution whose filters depend on the hyperparameters (rank-1 per output channel).

    Args:
        in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, padding_mode: as
            :class:`torch.nn.Conv2d`.
        num_hparams: ``n``, the length of ``lambda``.

    Parameters: ``weight`` (``phi_0``), ``weight_u`` (``phi_U``), ``weight_v`` (``phi_V``, ``(out, n)``), and
    with ``bias=True`` also ``bias``, ``bias_u``, ``bias_v``.

    Shapes: ``x`` ``(B, C_in, H, W)``, ``hparams`` ``(B, n)`` or ``(n,)`` -> ``(B, C_out, H', W')``.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int],
        num_hparams: int,
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, int] | str = 0,
        dilation: int | tuple[int, int] = 1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        # Reuse nn.Conv2d's argument checking and normalisation (tuples, 'same' padding, padding_mode).
        ref = nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                        padding_mode, device=device, dtype=dtype)
        self._check_num_hparams(num_hparams)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride, self.padding = ref.kernel_size, ref.stride, ref.padding
        self.dilation, self.groups, self.padding_mode = ref.dilation, groups, padding_mode
        self._reversed_padding_repeated_twice = ref._reversed_padding_repeated_twice
        self.num_hparams = num_hparams
        self._rank_one_factors(ref, fan_in=ref.weight[0].numel())

    @classmethod
    def from_module(cls, module: nn.Conv2d, num_hparams: int) -> HyperConv2d:
        """A hyper-layer whose ``phi_0`` is a copy of ``module``'s weights (equal to it at initialisation)."""
        if not isinstance(module, nn.Conv2d):
            raise ValueError(f"expected an nn.Conv2d, got {type(module).__name__}")
        w = module.weight
        layer = cls(module.in_channels, module.out_channels, module.kernel_size, num_hparams, module.stride,
                    module.padding, module.dilation, module.groups, module.bias is not None, module.padding_mode,
                    device=w.device, dtype=w.dtype)
        return layer._copy_phi_0(module)

    def _conv(self, x: Tensor, weight: Tensor, bias: Tensor | None, groups: int) -> Tensor:
        if self.padding_mode != "zeros":
            x = F.pad(x, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            return F.conv2d(x, weight, bias, self.stride, 0, self.dilation, groups)
        return F.conv2d(x, weight, bias, self.stride, self.padding, self.dilation, groups)

    def forward(self, x: Tensor, hparams: Tensor | None = None) -> Tensor:
        hparams = self._resolve(x, hparams)
        scale = self._scale(hparams, self.weight_v)
        if hparams.dim() == 1:
            # One lambda for the whole batch: fold the scale into the filters (one conv of c_out channels).
            weight = self.weight + scale[:, None, None, None] * self.weight_u
            bias = None if self.bias is None else self.bias + self._scale(hparams, self.bias_v) * self.bias_u
            return self._conv(x, weight, bias, self.groups)
        # Per-example lambda: one conv with [phi_0; phi_U] stacked per group along the output channels
        # (phi_0's bias rides along), then the per-example scale and bias terms.
        g, out = self.groups, self.out_channels
        w0 = self.weight.reshape(g, out // g, *self.weight.shape[1:])
        wu = self.weight_u.reshape(g, out // g, *self.weight.shape[1:])
        weight = torch.cat([w0, wu], dim=1).reshape(2 * out, *self.weight.shape[1:])
        bias = None
        if self.bias is not None:
            b0 = self.bias.reshape(g, out // g)
            bias = torch.cat([b0, torch.zeros_like(b0)], dim=1).reshape(2 * out)
        both = self._conv(x, weight, bias, g).unflatten(1, (g, 2, out // g))
        y = both[:, :, 0].flatten(1, 2) + scale[:, :, None, None] * both[:, :, 1].flatten(1, 2)
        if self.bias is not None:
            y = y + (self._scale(hparams, self.bias_v) * self.bias_u)[:, :, None, None]
        return y

    def extra_repr(self) -> str:
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"num_hparams={self.num_hparams}, stride={self.stride}")
        if self.padding != (0, 0):
            s += f", padding={self.padding}"
        if self.dilation != (1, 1):
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class HyperLinear(HyperLayer):
    """Linear layer whose weight rows depend on the hyperparameters (rank-1 per output feature).

    Shapes: ``x`` ``(B, *, in_features)``, ``hparams`` ``(B, n)`` or ``(n,)`` -> ``(B, *, out_features)``.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        num_hparams: int,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self._check_num_hparams(num_hparams)
        ref = nn.Linear(in_features, out_features, bias, device=device, dtype=dtype)
        self.in_features, self.out_features, self.num_hparams = in_features, out_features, num_hparams
        self._rank_one_factors(ref, fan_in=in_features)

    @classmethod
    def from_module(cls, module: nn.Linear, num_hparams: int) -> HyperLinear:
        """A hyper-layer whose ``phi_0`` is a copy of ``module``'s weights (equal to it at initialisation)."""
        if not isinstance(module, nn.Linear):
            raise ValueError(f"expected an nn.Linear, got {type(module).__name__}")
        w = module.weight
        layer = cls(module.in_features, module.out_features, num_hparams, module.bias is not None,
                    device=w.device, dtype=w.dtype)
        return layer._copy_phi_0(module)

    def forward(self, x: Tensor, hparams: Tensor | None = None) -> Tensor:
        hparams = self._resolve(x, hparams)
        scale = self._scale(hparams, self.weight_v)
        if hparams.dim() == 1:
            bias = None if self.bias is None else self.bias + self._scale(hparams, self.bias_v) * self.bias_u
            return F.linear(x, self.weight + scale[:, None] * self.weight_u, bias)
        bias = None if self.bias is None else torch.cat([self.bias, torch.zeros_like(self.bias)])
        both = F.linear(x, torch.cat([self.weight, self.weight_u], dim=0), bias)
        y0, yu = both.split(self.out_features, dim=-1)
        # (B, out) -> (B, 1, ..., 1, out) to broadcast over any middle dimensions of x.
        shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (self.out_features,)
        y = y0 + scale.reshape(shape) * yu
        if self.bias is not None:
            y = y + (self._scale(hparams, self.bias_v) * self.bias_u).reshape(shape)
        return y

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"num_hparams={self.num_hparams}, bias={self.bias is not None}")


class HyperBatchNorm2d(HyperLayer):
    """Batch normalisation whose affine parameters depend on the hyperparameters.

    Normalises exactly like :class:`torch.nn.BatchNorm2d` (batch statistics in training mode, running
    statistics in eval mode, the same running-statistics update), then applies a per-example affine map
    ``gamma_i = weight + (weight_v @ lambda_i) * weight_u``, ``beta_i = bias + (bias_v @ lambda_i) * bias_u``
    (``phi_0 = [weight; bias]``, ``phi_U = [weight_u; bias_u]``, ``phi_V = [weight_v; bias_v]``).

    Shapes: ``x`` ``(B, C, H, W)``, ``hparams`` ``(B, n)`` or ``(n,)`` -> ``(B, C, H, W)``.
    """

    def __init__(
        self,
        num_features: int,
        num_hparams: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        track_running_stats: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self._check_num_hparams(num_hparams)
        if num_features < 1:
            raise ValueError(f"num_features must be a positive int, got {num_features}")
        kw = {"device": device, "dtype": dtype}
        self.num_features, self.num_hparams = num_features, num_hparams
        self.eps, self.momentum, self.track_running_stats = eps, momentum, track_running_stats
        self.weight = nn.Parameter(torch.ones(num_features, **kw))
        self.bias = nn.Parameter(torch.zeros(num_features, **kw))
        self.weight_u = nn.Parameter(torch.ones(num_features, **kw))
        self.bias_u = nn.Parameter(torch.ones(num_features, **kw))
        self.weight_v = nn.Parameter(torch.zeros(num_features, num_hparams, **kw))
        self.bias_v = nn.Parameter(torch.zeros(num_features, num_hparams, **kw))
        if track_running_stats:
            self.register_buffer("running_mean", torch.zeros(num_features, **kw))
            self.register_buffer("running_var", torch.ones(num_features, **kw))
            self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long, device=device))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    @classmethod
    def from_module(cls, module: nn.BatchNorm2d, num_hparams: int) -> HyperBatchNorm2d:
        """A hyper-layer with ``module``'s affine parameters as ``phi_0`` and a copy of its running statistics."""
        if not isinstance(module, nn.BatchNorm2d):
            raise ValueError(f"expected an nn.BatchNorm2d, got {type(module).__name__}")
        ref = module.weight if module.weight is not None else module.running_mean
        kw = {} if ref is None else {"device": ref.device, "dtype": ref.dtype}
        layer = cls(module.num_features, num_hparams, module.eps, module.momentum, module.track_running_stats, **kw)
        layer.train(module.training)
        with torch.no_grad():
            if module.affine:
                layer.weight.copy_(module.weight)
                layer.bias.copy_(module.bias)
            if module.track_running_stats:
                layer.running_mean.copy_(module.running_mean)
                layer.running_var.copy_(module.running_var)
                layer.num_batches_tracked.copy_(module.num_batches_tracked)
        return layer

    def forward(self, x: Tensor, hparams: Tensor | None = None) -> Tensor:
        if x.dim() != 4:
            raise ValueError(f"expected a 4-D input (B, C, H, W), got shape {tuple(x.shape)}")
        hparams = self._resolve(x, hparams)
        # Same bookkeeping as torch.nn.modules.batchnorm._BatchNorm.forward.
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        use_batch_stats = self.training or (self.running_mean is None and self.running_var is None)
        track = not self.training or self.track_running_stats
        xhat = F.batch_norm(x, self.running_mean if track else None, self.running_var if track else None,
                            None, None, use_batch_stats, factor, self.eps)
        gamma = self.weight + self._scale(hparams, self.weight_v) * self.weight_u
        beta = self.bias + self._scale(hparams, self.bias_v) * self.bias_u
        if hparams.dim() == 1:
            return xhat * gamma[:, None, None] + beta[:, None, None]
        return torch.addcmul(beta[:, :, None, None], xhat, gamma[:, :, None, None])

    def extra_repr(self) -> str:
        return (f"{self.num_features}, num_hparams={self.num_hparams}, eps={self.eps}, momentum={self.momentum}, "
                f"track_running_stats={self.track_running_stats}")
