"""The CIFAR-10 AlexNet of Self-Tuning Networks (MacKay et al. 2019), used in HBA's section 4.3.

HBA section 4.3 follows STN's setting: an AlexNet on CIFAR-10 with 15 tuned hyperparameters, 7 for
augmentation and 8 dropout rates. This is the network of STN's public PyTorch code (``AlexNet`` of its
``hypermodels``): five 3x3 convolutions (padding 1) with 64, 192, 384, 256, 256 channels, the first with
stride 2, each followed by ReLU; 2x2 max pooling after the 1st, 2nd and 5th; then fully connected
layers ``256*2*2 -> 4096 -> 4096 -> num_classes`` with ReLU. The 8 dropout sites of STN are the input,
the output of each of the 5 convolutional stages (channel-wise dropout) and the inputs of the first two
fully connected layers; here they are fixed rates, all 0 by default (plain training). Without hyper-layers, about 23.3M parameters for 10 classes. Input must be 32x32.

Note: this is not the smaller cuda-convnet/TensorFlow-tutorial "CIFAR AlexNet" (two 5x5 convolutions,
fc 384 and 192); STN's code, which HBA's comparison reuses, builds the network above.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["AlexNetSTN", "alexnet_stn"]


class AlexNetSTN(nn.Module):
    """STN's CIFAR AlexNet.

    Args:
        num_classes: number of outputs.
        input_dropout: dropout rate on the input pixels.
        conv_dropout: channel dropout rate after each convolutional stage.
        fc_dropout: dropout rate on the inputs of the first two fully connected layers.
        in_channels: input channels (3 for RGB).

    Shapes: ``(B, in_channels, 32, 32)`` float -> ``(B, num_classes)`` logits.
    """

    filters = (64, 192, 384, 256, 256)
    strides = (2, 1, 1, 1, 1)
    pool_after = (0, 1, 4)

    def __init__(self, num_classes: int, input_dropout: float = 0.0, conv_dropout: float = 0.0,
                 fc_dropout: float = 0.0, in_channels: int = 3) -> None:
        super().__init__()
        if num_classes < 1:
            raise ValueError(f"num_classes must be >= 1, got {num_classes}")
        for name, rate in (("input_dropout", input_dropout), ("conv_dropout", conv_dropout),
                           ("fc_dropout", fc_dropout)):
            if not 0.0 <= rate < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {rate}")
        chans = (in_channels, *self.filters)
        self.convs = nn.ModuleList(
            nn.Conv2d(chans[i], chans[i + 1], 3, stride=self.strides[i], padding=1) for i in range(5)
        )
        self.input_dropout, self.conv_dropout, self.fc_dropout = input_dropout, conv_dropout, fc_dropout
        self.fc1 = nn.Linear(self.filters[-1] * 2 * 2, 4096)
        self.fc2 = nn.Linear(4096, 4096)
        self.fc3 = nn.Linear(4096, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[-2:] != (32, 32):
            raise ValueError(f"AlexNetSTN expects 32x32 images, got {tuple(x.shape[-2:])}")
        x = F.dropout(x, self.input_dropout, self.training)
        for i, conv in enumerate(self.convs):
            x = F.relu(conv(x))
            if i in self.pool_after:
                x = F.max_pool2d(x, 2)
            x = F.dropout2d(x, self.conv_dropout, self.training)
        x = F.dropout(x.flatten(1), self.fc_dropout, self.training)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, self.fc_dropout, self.training)
        x = F.relu(self.fc2(x))
        return self.fc3(x)


def alexnet_stn(num_classes: int) -> AlexNetSTN:
    """STN's CIFAR AlexNet with ``num_classes`` outputs (no dropout: plain training)."""
    return AlexNetSTN(num_classes)
