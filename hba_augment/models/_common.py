"""Pieces the CIFAR-style residual networks (WRN, Shake-Shake, PyramidNet) share."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["check_num_classes", "classify", "conv_bn_stem", "init_weights"]


def check_num_classes(num_classes: int) -> None:
    """``ValueError`` for fewer than one class."""
    if num_classes < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")


def conv_bn_stem(in_channels: int, out_channels: int = 16) -> nn.Sequential:
    """A 3x3 convolution (no bias) and batch norm."""
    return nn.Sequential(nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=False), nn.BatchNorm2d(out_channels))


def init_weights(model: nn.Module) -> None:
    """He-normal (fan-out) convolutions, unit/zero batch norm, zero linear biases, in ``model.modules()`` order."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.zeros_(m.bias)


def classify(features: Tensor, fc: nn.Linear) -> Tensor:
    """ReLU, global average pooling and the linear classifier: ``(B, C, H, W)`` -> ``(B, num_classes)``."""
    return fc(F.adaptive_avg_pool2d(F.relu(features), 1).flatten(1))
