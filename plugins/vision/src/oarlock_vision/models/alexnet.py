"""AlexNet as Paddle 3.2 builds it (attribute names _conv1.._conv5, _fc6.._fc8; every weight and bias drawn
from Uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)))."""

from __future__ import annotations

import math

import oarlock
import oarlock.nn as nn
import oarlock.nn.functional as F
from oarlock.nn import ParamAttr
from oarlock.nn.initializer import Uniform
from oarlock_vision.models.pretrained import load_pretrained

model_urls = {"alexnet": ("https://paddle-imagenet-models-name.bj.bcebos.com/dygraph/AlexNet_pretrained.pdparams",
                          "7f0f9f737132e02732d75a1459d98a43")}


def _uniform(fan_in):
    """weight_attr and bias_attr drawing from +-1/sqrt(fan_in)."""
    stdv = 1.0 / math.sqrt(fan_in)
    return {"weight_attr": ParamAttr(initializer=Uniform(-stdv, stdv)),
            "bias_attr": ParamAttr(initializer=Uniform(-stdv, stdv))}


class ConvPoolLayer(nn.Layer):
    """Conv2D, ReLU when act == 'relu', then a 3x3 stride-2 max pool."""

    def __init__(self, input_channels, output_channels, filter_size, stride, padding, stdv, groups=1, act=None):
        super().__init__()
        self.relu = nn.ReLU() if act == "relu" else None
        self._conv = nn.Conv2D(input_channels, output_channels, filter_size, stride=stride, padding=padding,
                               groups=groups, weight_attr=ParamAttr(initializer=Uniform(-stdv, stdv)),
                               bias_attr=ParamAttr(initializer=Uniform(-stdv, stdv)))
        self._pool = nn.MaxPool2D(kernel_size=3, stride=2, padding=0)

    def forward(self, inputs):
        x = self._conv(inputs)
        if self.relu is not None:
            x = self.relu(x)
        return self._pool(x)


class AlexNet(nn.Layer):
    """Five convolutions (three pooled), then two 4096-wide Linear layers with dropout and the classifier."""

    def __init__(self, num_classes=1000):
        super().__init__()
        self.num_classes = num_classes
        self._conv1 = ConvPoolLayer(3, 64, 11, 4, 2, 1.0 / math.sqrt(3 * 11 * 11), act="relu")
        self._conv2 = ConvPoolLayer(64, 192, 5, 1, 2, 1.0 / math.sqrt(64 * 5 * 5), act="relu")
        self._conv3 = nn.Conv2D(192, 384, 3, stride=1, padding=1, **_uniform(192 * 3 * 3))
        self._conv4 = nn.Conv2D(384, 256, 3, stride=1, padding=1, **_uniform(384 * 3 * 3))
        self._conv5 = ConvPoolLayer(256, 256, 3, 1, 1, 1.0 / math.sqrt(256 * 3 * 3), act="relu")
        if num_classes > 0:
            fan_in = 256 * 6 * 6
            self._drop1 = nn.Dropout(p=0.5, mode="downscale_in_infer")
            self._fc6 = nn.Linear(fan_in, 4096, **_uniform(fan_in))
            self._drop2 = nn.Dropout(p=0.5, mode="downscale_in_infer")
            self._fc7 = nn.Linear(4096, 4096, **_uniform(fan_in))
            self._fc8 = nn.Linear(4096, num_classes, **_uniform(fan_in))

    def forward(self, inputs):
        x = self._conv2(self._conv1(inputs))
        x = self._conv5(F.relu(self._conv4(F.relu(self._conv3(x)))))
        if self.num_classes > 0:
            x = self._drop1(oarlock.flatten(x, start_axis=1, stop_axis=-1))
            x = self._drop2(F.relu(self._fc6(x)))
            x = self._fc8(F.relu(self._fc7(x)))
        return x


def alexnet(pretrained=False, **kwargs):
    """AlexNet; pretrained=True loads Paddle's ImageNet weights (or give the path of a weights file)."""
    return load_pretrained(lambda: AlexNet(**kwargs), "alexnet", model_urls, pretrained)
