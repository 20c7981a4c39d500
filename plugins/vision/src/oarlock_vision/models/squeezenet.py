"""SqueezeNet 1.0 and 1.1 (Paddle 3.2's layout: _conv, fire modules _conv1.._conv8, _conv9 classifier)."""

from __future__ import annotations

import oarlock
import oarlock.nn as nn
import oarlock.nn.functional as F
from oarlock.nn import ParamAttr
from oarlock_vision.models.pretrained import load_pretrained

_BASE = "https://paddle-imagenet-models-name.bj.bcebos.com/dygraph/"
model_urls = {"squeezenet1_0": (_BASE + "SqueezeNet1_0_pretrained.pdparams", "30b95af60a2178f03cf9b66cd77e1db1"),
              "squeezenet1_1": (_BASE + "SqueezeNet1_1_pretrained.pdparams", "a11250d3a1f91d7131fd095ebbf09eee")}

# fire modules: input, squeeze, expand 1x1, expand 3x3 channels (the same in both versions)
FIRES = [(96, 16, 64, 64), (128, 16, 64, 64), (128, 32, 128, 128), (256, 32, 128, 128), (256, 48, 192, 192),
         (384, 48, 192, 192), (384, 64, 256, 256), (512, 64, 256, 256)]
POOL_AFTER = {"1.0": (3, 7), "1.1": (2, 4)}  # max pools after these fire modules (1-based)


class MakeFireConv(nn.Layer):
    """Conv2D then ReLU."""

    def __init__(self, input_channels, output_channels, filter_size, padding=0):
        super().__init__()
        self._conv = nn.Conv2D(input_channels, output_channels, filter_size, padding=padding,
                               weight_attr=ParamAttr(), bias_attr=ParamAttr())

    def forward(self, x):
        return F.relu(self._conv(x))


class MakeFire(nn.Layer):
    """A fire module: squeeze 1x1, then 1x1 and 3x3 expansions concatenated on channels."""

    def __init__(self, input_channels, squeeze_channels, expand1x1_channels, expand3x3_channels):
        super().__init__()
        self._conv = MakeFireConv(input_channels, squeeze_channels, 1)
        self._conv_path1 = MakeFireConv(squeeze_channels, expand1x1_channels, 1)
        self._conv_path2 = MakeFireConv(squeeze_channels, expand3x3_channels, 3, padding=1)

    def forward(self, inputs):
        x = self._conv(inputs)
        return oarlock.concat([self._conv_path1(x), self._conv_path2(x)], axis=1)


class SqueezeNet(nn.Layer):
    """SqueezeNet of `version` '1.0' or '1.1'. The classifier is a 1x1 convolution (_conv9, built even when
    num_classes <= 0 as Paddle does); with_pool averages it to [N, num_classes]."""

    def __init__(self, version, num_classes=1000, with_pool=True):
        super().__init__()
        if version not in POOL_AFTER:
            raise ValueError(f"SqueezeNet: supported versions are {list(POOL_AFTER)} but input version is "
                             f"{version!r}")
        self.version, self.num_classes, self.with_pool = version, num_classes, with_pool
        if version == "1.0":
            self._conv = nn.Conv2D(3, 96, 7, stride=2, weight_attr=ParamAttr(), bias_attr=ParamAttr())
        else:
            self._conv = nn.Conv2D(3, 64, 3, stride=2, padding=1, weight_attr=ParamAttr(), bias_attr=ParamAttr())
        self._pool = nn.MaxPool2D(kernel_size=3, stride=2, padding=0)
        first = 96 if version == "1.0" else 64
        for i, (cin, squeeze, e1, e3) in enumerate(FIRES, 1):
            setattr(self, f"_conv{i}", MakeFire(first if i == 1 else cin, squeeze, e1, e3))
        self._drop = nn.Dropout(p=0.5, mode="downscale_in_infer")
        self._conv9 = nn.Conv2D(512, num_classes, 1, weight_attr=ParamAttr(), bias_attr=ParamAttr())
        self._avg_pool = nn.AdaptiveAvgPool2D(1)

    def forward(self, inputs):
        x = self._pool(F.relu(self._conv(inputs)))
        for i in range(1, 9):
            x = getattr(self, f"_conv{i}")(x)
            if i in POOL_AFTER[self.version]:
                x = self._pool(x)
        if self.num_classes > 0:
            x = self._conv9(self._drop(x))
        if self.with_pool:
            x = oarlock.squeeze(self._avg_pool(F.relu(x)), axis=[2, 3])
        return x


def squeezenet1_0(pretrained=False, **kwargs):
    """SqueezeNet 1.0."""
    return load_pretrained(lambda: SqueezeNet("1.0", **kwargs), "squeezenet1_0", model_urls, pretrained)


def squeezenet1_1(pretrained=False, **kwargs):
    """SqueezeNet 1.1 (fewer computations, the same accuracy)."""
    return load_pretrained(lambda: SqueezeNet("1.1", **kwargs), "squeezenet1_1", model_urls, pretrained)
