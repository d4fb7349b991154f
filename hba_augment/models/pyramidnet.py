"""PyramidNet with ShakeDrop (Han et al. 2017; Yamada et al. 2018) for 32x32 images.

The "PyramidNet+ShakeDrop" of AutoAugment, PBA and HBA (AutoAugment's ``pyramid_net.py``): a 3x3 stem
conv with 16 channels and BN, then three stages of ``n`` bottleneck blocks, ``depth = 9n + 2`` (272:
``n = 30``). The bottleneck width grows by ``alpha / (3n)`` per block, from 16 to ``16 + alpha`` (rounded),
and each block outputs 4x its width. A block is BN-conv1x1-BN-ReLU-conv3x3(stride)-BN-ReLU-conv1x1-BN;
the shortcut is identity, 2x2 average pooling where the stride is 2, and zero channels appended where the
width grows. Head: BN-ReLU, global average pooling, linear.

ShakeDrop on each residual branch ``F(x)``: block ``l`` of ``L`` keeps ``F`` with probability
``p_l = 1 - 0.5 * l / L`` (linear decay to a final drop probability of 0.5). In training, per image,
``b ~ Bernoulli(p_l)``, ``a ~ U(-1, 1)``, ``c ~ U(0, 1)``; the forward pass uses ``(b + a - b a) F(x)`` and the
backward pass the gradient of ``(b + c - b c) F(x)``. In eval mode ``F`` is scaled by its expectation
``p_l``. PyramidNet-272 (alpha 200) with ShakeDrop has 26.0M parameters (published).
The random draws come from torch's default generator of the input's device.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hba_augment.models._common import check_num_classes, classify, conv_bn_stem, init_weights

__all__ = ["PyramidNet", "pyramidnet", "shake_drop"]


class _ShakeDrop(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, forward_scale: Tensor, backward_scale: Tensor) -> Tensor:
        ctx.save_for_backward(backward_scale)
        return x * forward_scale

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        (backward_scale,) = ctx.saved_tensors
        return grad * backward_scale, None, None


def shake_drop(x: Tensor, keep_prob: float, training: bool, alpha_range: tuple[float, float] = (-1.0, 1.0),
               beta_range: tuple[float, float] = (0.0, 1.0)) -> Tensor:
    """ShakeDrop of a residual branch ``x`` ``(B, C, H, W)`` with keep probability ``keep_prob``.

    Training: one gate ``b``, forward ``a`` and backward ``c`` per image; eval: ``x * E[b + a - b a]``.
    """
    if not training:
        mean_alpha = 0.5 * (alpha_range[0] + alpha_range[1])
        return x * (keep_prob + mean_alpha - keep_prob * mean_alpha)
    shape = (x.shape[0], 1, 1, 1)
    gate = torch.rand(shape, device=x.device) < keep_prob
    a = torch.empty(shape, device=x.device, dtype=x.dtype).uniform_(*alpha_range)
    c = torch.empty(shape, device=x.device, dtype=x.dtype).uniform_(*beta_range)
    one = torch.ones((), device=x.device, dtype=x.dtype)
    # b + a - b a with b in {0, 1}, written as a selection so that kept images are scaled by exactly 1.
    return _ShakeDrop.apply(x, torch.where(gate, one, a), torch.where(gate, one, c))


class Bottleneck(nn.Module):
    """PyramidNet bottleneck (no ReLU after the first and last BN) with ShakeDrop."""

    expansion = 4

    def __init__(self, in_planes: int, planes: int, stride: int, keep_prob: float) -> None:
        super().__init__()
        out_planes = planes * self.expansion
        self.branch = nn.Sequential(
            nn.BatchNorm2d(in_planes),
            nn.Conv2d(in_planes, planes, 1, bias=False),
            nn.BatchNorm2d(planes),
            nn.ReLU(inplace=True),
            nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False),
            nn.BatchNorm2d(planes),
            nn.ReLU(inplace=True),
            nn.Conv2d(planes, out_planes, 1, bias=False),
            nn.BatchNorm2d(out_planes),
        )
        self.stride = stride
        self.extra_channels = out_planes - in_planes
        self.keep_prob = keep_prob
        if self.extra_channels < 0:
            raise ValueError(f"PyramidNet block cannot shrink channels ({in_planes} -> {out_planes})")

    def forward(self, x: Tensor) -> Tensor:
        y = shake_drop(self.branch(x), self.keep_prob, self.training)
        shortcut = F.avg_pool2d(x, 2, ceil_mode=True) if self.stride > 1 else x
        if self.extra_channels:
            shortcut = F.pad(shortcut, (0, 0, 0, 0, 0, self.extra_channels))
        return y + shortcut

    def extra_repr(self) -> str:
        return f"stride={self.stride}, keep_prob={self.keep_prob:.4f}"


class PyramidNet(nn.Module):
    """Bottleneck PyramidNet-``depth`` with widening factor ``alpha`` and ShakeDrop, for small images.

    Args:
        depth: ``9n + 2`` with ``n >= 1`` (272 in the paper).
        alpha: total growth of the bottleneck width (200 in the paper).
        num_classes: number of outputs.
        final_drop_prob: ShakeDrop drop probability of the last block (0.5); it decays linearly to the
            first block.
        in_channels: input channels (3 for RGB).

    Shapes: ``(B, in_channels, H, W)`` float -> ``(B, num_classes)`` logits.
    """

    def __init__(self, depth: int, alpha: int, num_classes: int, final_drop_prob: float = 0.5,
                 in_channels: int = 3) -> None:
        super().__init__()
        if depth < 11 or (depth - 2) % 9:
            raise ValueError(f"bottleneck PyramidNet depth must be 9n+2 with n >= 1 (11, 20, 110, 272, ...), "
                             f"got {depth}")
        if alpha < 0:
            raise ValueError(f"PyramidNet alpha must be >= 0, got {alpha}")
        if not 0.0 <= final_drop_prob < 1.0:
            raise ValueError(f"final_drop_prob must be in [0, 1), got {final_drop_prob}")
        check_num_classes(num_classes)
        n = (depth - 2) // 9
        total = 3 * n
        self.depth, self.alpha = depth, alpha
        self.stem = conv_bn_stem(in_channels, 16)
        width, in_planes, layer = 16.0, 16, 0
        stages = []
        for stride in (1, 2, 2):
            blocks = []
            for i in range(n):
                layer += 1
                width += alpha / total
                planes = round(width)
                keep = 1.0 - final_drop_prob * layer / total
                blocks.append(Bottleneck(in_planes, planes, stride if i == 0 else 1, keep))
                in_planes = planes * Bottleneck.expansion
            stages.append(nn.Sequential(*blocks))
        self.stage1, self.stage2, self.stage3 = stages
        self.bn = nn.BatchNorm2d(in_planes)
        self.fc = nn.Linear(in_planes, num_classes)
        init_weights(self)

    def forward(self, x: Tensor) -> Tensor:
        x = self.stage3(self.stage2(self.stage1(self.stem(x))))
        return classify(self.bn(x), self.fc)


def pyramidnet(depth: int, alpha: int, num_classes: int) -> PyramidNet:
    """Bottleneck PyramidNet-``depth`` (widening ``alpha``) with ShakeDrop and ``num_classes`` outputs."""
    return PyramidNet(depth, alpha, num_classes)
