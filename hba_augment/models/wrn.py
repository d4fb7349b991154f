"""Wide residual networks (Zagoruyko & Komodakis 2016), as used by AutoAugment, PBA and HBA.

The CIFAR variant of the AutoAugment/PBA code: a 3x3 stem with 16 channels, three groups of ``n`` pre-activation
basic blocks (BN-ReLU-conv3x3-BN-ReLU-conv3x3) with ``16k``, ``32k``, ``64k`` channels and strides 1, 2, 2,
a 1x1 projection shortcut where the shape changes, then BN-ReLU, global average pooling and a linear
classifier. ``depth = 6n + 4``; no dropout. WRN-40-2 has about 2.2M parameters, WRN-28-10 about 36.5M.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from hba_augment.models._common import check_num_classes, classify, init_weights

__all__ = ["BasicBlock", "WideResNet", "wide_resnet"]


class BasicBlock(nn.Module):
    """Pre-activation basic block; when the shape changes, the shortcut starts after the first BN-ReLU."""

    def __init__(self, in_planes: int, out_planes: int, stride: int) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.conv1 = nn.Conv2d(in_planes, out_planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_planes)
        self.conv2 = nn.Conv2d(out_planes, out_planes, 3, stride=1, padding=1, bias=False)
        self.equal_in_out = in_planes == out_planes and stride == 1
        self.shortcut = None if self.equal_in_out else nn.Conv2d(in_planes, out_planes, 1, stride=stride, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        o = F.relu(self.bn1(x))
        y = self.conv2(F.relu(self.bn2(self.conv1(o))))
        return y + (x if self.shortcut is None else self.shortcut(o))


class WideResNet(nn.Module):
    """WRN-``depth``-``width`` for small (e.g. 32x32) images.

    Args:
        depth: total depth, ``6n + 4`` with ``n >= 1``.
        width: widening factor ``k >= 1``.
        num_classes: number of outputs.
        in_channels: input channels (3 for RGB).

    Shapes: ``(B, in_channels, H, W)`` float -> ``(B, num_classes)`` logits.
    """

    def __init__(self, depth: int, width: int, num_classes: int, in_channels: int = 3) -> None:
        super().__init__()
        if depth < 10 or (depth - 4) % 6:
            raise ValueError(f"WideResNet depth must be 6n+4 with n >= 1 (10, 16, 22, 28, 40, ...), got {depth}")
        if width < 1:
            raise ValueError(f"WideResNet width must be >= 1, got {width}")
        check_num_classes(num_classes)
        n = (depth - 4) // 6
        channels = [16, 16 * width, 32 * width, 64 * width]
        self.depth, self.width = depth, width
        self.conv1 = nn.Conv2d(in_channels, channels[0], 3, padding=1, bias=False)
        groups = []
        for g, stride in enumerate((1, 2, 2)):
            blocks = [BasicBlock(channels[g] if i == 0 else channels[g + 1], channels[g + 1], stride if i == 0 else 1)
                      for i in range(n)]
            groups.append(nn.Sequential(*blocks))
        self.block1, self.block2, self.block3 = groups
        self.bn = nn.BatchNorm2d(channels[3])
        self.fc = nn.Linear(channels[3], num_classes)
        init_weights(self)

    def forward(self, x: Tensor) -> Tensor:
        x = self.block3(self.block2(self.block1(self.conv1(x))))
        return classify(self.bn(x), self.fc)


def wide_resnet(depth: int, width: int, num_classes: int) -> WideResNet:
    """WRN-``depth``-``width`` with ``num_classes`` outputs."""
    return WideResNet(depth, width, num_classes)
