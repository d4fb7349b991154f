"""Shake-Shake ResNets (Gastaldi 2017) for 32x32 images, as used by AutoAugment, PBA and HBA.

The architecture of the AutoAugment/PBA ``shake_shake.py`` (and Gastaldi's Torch code): a 3x3 stem conv
with 16 channels and BN, three stages of ``n`` residual blocks with ``w``, ``2w``, ``4w`` channels (strides
1, 2, 2), ReLU, global average pooling and a linear classifier; ``depth = 6n + 2`` (26: ``n = 4``).

A block adds two branches, each ReLU-conv3x3-BN-ReLU-conv3x3-BN, mixed per image as
``alpha * b1 + (1 - alpha) * b2`` with ``alpha ~ U(0, 1)`` in the forward pass and an independent
``beta ~ U(0, 1)`` in the backward pass ("Shake-Shake-Image"); in eval mode both are 0.5. Where the
shape changes, the shortcut is ReLU, then two 1x1-conv paths on the stride-2 subsampled input (the
second shifted by one pixel) of ``out / 2`` channels each, concatenated, then BN.

Published parameter counts (CIFAR-10): 2x32d 2.9M, 2x96d 26.2M, 2x112d 35.8M.
The random ``alpha``/``beta`` come from torch's default generator of the input's device.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hba_augment.models._common import check_num_classes, classify, conv_bn_stem, init_weights

__all__ = ["ShakeShakeResNet", "shake_shake", "shake_shake_mix"]


class _ShakeShakeMix(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x1: Tensor, x2: Tensor, alpha: Tensor, beta: Tensor) -> Tensor:
        ctx.save_for_backward(beta)
        return torch.lerp(x2, x1, alpha)  # alpha * x1 + (1 - alpha) * x2

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor, None, None]:
        (beta,) = ctx.saved_tensors
        g1 = grad * beta
        return g1, grad - g1, None, None


def shake_shake_mix(x1: Tensor, x2: Tensor, alpha: Tensor, beta: Tensor) -> Tensor:
    """``alpha * x1 + (1 - alpha) * x2`` whose gradient is that of ``beta * x1 + (1 - beta) * x2``.

    Args:
        x1, x2: branch outputs ``(B, C, H, W)``.
        alpha, beta: mixing weights broadcastable to ``x1`` (``(B, 1, 1, 1)`` for one per image).
    """
    return _ShakeShakeMix.apply(x1, x2, alpha.to(x1.dtype), beta.to(x1.dtype))


class _Branch(nn.Sequential):
    def __init__(self, in_planes: int, out_planes: int, stride: int) -> None:
        super().__init__(
            nn.ReLU(inplace=False),
            nn.Conv2d(in_planes, out_planes, 3, stride=stride, padding=1, bias=False),
            nn.BatchNorm2d(out_planes),
            nn.ReLU(inplace=True),
            nn.Conv2d(out_planes, out_planes, 3, stride=1, padding=1, bias=False),
            nn.BatchNorm2d(out_planes),
        )


class _Shortcut(nn.Module):
    """Gastaldi's shortcut for a change of shape: two shifted 1x1 paths of half the channels each."""

    def __init__(self, in_planes: int, out_planes: int, stride: int) -> None:
        super().__init__()
        if out_planes % 2:
            raise ValueError(f"Shake-Shake shortcut needs an even number of channels, got {out_planes}")
        self.stride = stride
        self.conv1 = nn.Conv2d(in_planes, out_planes // 2, 1, bias=False)
        self.conv2 = nn.Conv2d(in_planes, out_planes // 2, 1, bias=False)
        self.bn = nn.BatchNorm2d(out_planes)

    def forward(self, x: Tensor) -> Tensor:
        x = F.relu(x)
        s = self.stride
        a = F.avg_pool2d(x, 1, s) if s > 1 else x
        # The second path sees the image shifted by one pixel (zero padded at the bottom/right).
        b = F.pad(x[:, :, 1:, 1:], (0, 1, 0, 1))
        b = F.avg_pool2d(b, 1, s) if s > 1 else b
        return self.bn(torch.cat([self.conv1(a), self.conv2(b)], dim=1))


class ShakeShakeBlock(nn.Module):
    """Residual block with two shaken branches."""

    def __init__(self, in_planes: int, out_planes: int, stride: int) -> None:
        super().__init__()
        self.branch1 = _Branch(in_planes, out_planes, stride)
        self.branch2 = _Branch(in_planes, out_planes, stride)
        self.shortcut = None if in_planes == out_planes and stride == 1 else _Shortcut(in_planes, out_planes, stride)

    def forward(self, x: Tensor) -> Tensor:
        b1, b2 = self.branch1(x), self.branch2(x)
        if self.training:
            shape = (x.shape[0], 1, 1, 1)
            alpha = torch.rand(shape, device=x.device)
            beta = torch.rand(shape, device=x.device)
            y = shake_shake_mix(b1, b2, alpha, beta)
        else:
            y = 0.5 * (b1 + b2)
        return y + (x if self.shortcut is None else self.shortcut(x))


class ShakeShakeResNet(nn.Module):
    """Shake-Shake-``depth`` 2x``width``d for small (e.g. 32x32) images.

    Args:
        depth: ``6n + 2`` with ``n >= 1`` (26 in the paper).
        width: channels of the first stage (32, 96 or 112 in the paper).
        num_classes: number of outputs.
        in_channels: input channels (3 for RGB).

    Shapes: ``(B, in_channels, H, W)`` float -> ``(B, num_classes)`` logits.
    """

    def __init__(self, depth: int, width: int, num_classes: int, in_channels: int = 3) -> None:
        super().__init__()
        if depth < 8 or (depth - 2) % 6:
            raise ValueError(f"Shake-Shake depth must be 6n+2 with n >= 1 (8, 14, 20, 26, ...), got {depth}")
        if width < 1:
            raise ValueError(f"Shake-Shake width must be >= 1, got {width}")
        check_num_classes(num_classes)
        n = (depth - 2) // 6
        self.depth, self.width = depth, width
        self.stem = conv_bn_stem(in_channels, 16)
        stages, in_planes = [], 16
        for s, stride in enumerate((1, 2, 2)):
            out_planes = width * 2**s
            blocks = []
            for i in range(n):
                blocks.append(ShakeShakeBlock(in_planes, out_planes, stride if i == 0 else 1))
                in_planes = out_planes
            stages.append(nn.Sequential(*blocks))
        self.stage1, self.stage2, self.stage3 = stages
        self.fc = nn.Linear(in_planes, num_classes)
        init_weights(self)

    def forward(self, x: Tensor) -> Tensor:
        x = self.stage3(self.stage2(self.stage1(self.stem(x))))
        return classify(x, self.fc)


def shake_shake(depth: int, width: int, num_classes: int) -> ShakeShakeResNet:
    """Shake-Shake-``depth`` 2x``width``d with ``num_classes`` outputs."""
    return ShakeShakeResNet(depth, width, num_classes)
