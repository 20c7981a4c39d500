"""LeNet (Paddle's variant for 1x28x28 inputs: a 3x3 padded first convolution, no activations between the
fully connected layers)."""

from __future__ import annotations

import oarlock
import oarlock.nn as nn


class LeNet(nn.Layer):
    """Two conv-ReLU-maxpool stages, then three Linear layers (num_classes <= 0: the features only)."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.num_classes = num_classes
        self.features = nn.Sequential(
            nn.Conv2D(1, 6, 3, stride=1, padding=1), nn.ReLU(), nn.MaxPool2D(2, 2),
            nn.Conv2D(6, 16, 5, stride=1, padding=0), nn.ReLU(), nn.MaxPool2D(2, 2))
        if num_classes > 0:
            self.fc = nn.Sequential(nn.Linear(400, 120), nn.Linear(120, 84), nn.Linear(84, num_classes))

    def forward(self, inputs):
        x = self.features(inputs)
        if self.num_classes > 0:
            x = self.fc(oarlock.flatten(x, 1))
        return x
