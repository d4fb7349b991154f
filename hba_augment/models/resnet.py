"""ResNet-18/34/50/101/152 (He et al. 2016): torchvision's ImageNet architectures, randomly initialised.

``torchvision.models.resnet50(weights=None, num_classes=...)`` and its siblings, unchanged: the 7x7
stride-2 stem and the 3x3 stride-2 max pool stay, so a 32x32 input reaches the last stage as a 1x1
feature map (it still runs, through the adaptive average pooling; for the paper's ImageNet protocol the
images are 224x224). ResNet-50 with 1000 classes has 25.6M parameters.
"""

from __future__ import annotations

from torch import nn

__all__ = ["DEPTHS", "resnet"]

#: Supported depths (torchvision's constructors).
DEPTHS = (18, 34, 50, 101, 152)


def resnet(depth: int, num_classes: int) -> nn.Module:
    """torchvision's ResNet-``depth`` (``weights=None``) with ``num_classes`` outputs."""
    if depth not in DEPTHS:
        raise ValueError(f"ResNet depth must be one of {DEPTHS}, got {depth}")
    if num_classes < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")
    import torchvision

    return getattr(torchvision.models, f"resnet{depth}")(weights=None, num_classes=num_classes)
