"""InceptionV3 as Paddle 3.2 builds it: inception_stem, then inception_block_list (3 A, 1 B, 4 C, 1 D, 2 E
blocks of conv-BN-ReLU branches), avg_pool, dropout, fc. Each block lists its branches as
(attribute, in, out, kernel, stride, padding) rows, built in that order (the state-dict order)."""

from __future__ import annotations

import math

import oarlock
import oarlock.nn as nn
from oarlock.nn import ParamAttr
from oarlock.nn.initializer import Uniform
from oarlock_vision.models.pretrained import HAPI, load_pretrained
from oarlock_vision.ops import ConvNormActivation

model_urls = {"inception_v3": (HAPI + "inception_v3.pdparams", "649a4547c3243e8b59c656f41fe330b8")}


def _build(layer, rows):
    """conv-BN-ReLU blocks from (name, in, out, kernel, stride, padding) rows; "avgpool"/"maxpool" rows add
    the branch pool."""
    for name, *spec in rows:
        if name == "avgpool":
            layer.branch_pool = nn.AvgPool2D(kernel_size=3, stride=1, padding=1, exclusive=False)
        elif name == "maxpool":
            layer.branch_pool = nn.MaxPool2D(kernel_size=3, stride=2)
        else:
            cin, cout, kernel, stride, padding = spec
            setattr(layer, name, ConvNormActivation(cin, cout, kernel_size=kernel, stride=stride, padding=padding,
                                                    activation_layer=nn.ReLU))


def _chain(layer, x, *names):
    for name in names:
        x = getattr(layer, name)(x)
    return x


class InceptionStem(nn.Layer):
    """Five conv-BN-ReLU layers and two max pools: 3x299x299 -> 192x35x35."""

    def __init__(self):
        super().__init__()
        _build(self, [("conv_1a_3x3", 3, 32, 3, 2, 0), ("conv_2a_3x3", 32, 32, 3, 1, 0),
                      ("conv_2b_3x3", 32, 64, 3, 1, 1)])
        self.max_pool = nn.MaxPool2D(kernel_size=3, stride=2, padding=0)
        _build(self, [("conv_3b_1x1", 64, 80, 1, 1, 0), ("conv_4a_3x3", 80, 192, 3, 1, 0)])

    def forward(self, x):
        x = self.max_pool(_chain(self, x, "conv_1a_3x3", "conv_2a_3x3", "conv_2b_3x3"))
        return self.max_pool(_chain(self, x, "conv_3b_1x1", "conv_4a_3x3"))


class InceptionA(nn.Layer):
    """1x1, 1x1-5x5, 1x1-3x3-3x3 and avgpool-1x1 branches."""

    def __init__(self, num_channels, pool_features):
        super().__init__()
        c = num_channels
        _build(self, [("branch1x1", c, 64, 1, 1, 0), ("branch5x5_1", c, 48, 1, 1, 0), ("branch5x5_2", 48, 64, 5, 1, 2),
                      ("branch3x3dbl_1", c, 64, 1, 1, 0), ("branch3x3dbl_2", 64, 96, 3, 1, 1),
                      ("branch3x3dbl_3", 96, 96, 3, 1, 1), ("avgpool",),
                      ("branch_pool_conv", c, pool_features, 1, 1, 0)])

    def forward(self, x):
        return oarlock.concat([self.branch1x1(x), _chain(self, x, "branch5x5_1", "branch5x5_2"),
                               _chain(self, x, "branch3x3dbl_1", "branch3x3dbl_2", "branch3x3dbl_3"),
                               _chain(self, x, "branch_pool", "branch_pool_conv")], axis=1)


class InceptionB(nn.Layer):
    """Strided 3x3, 1x1-3x3-strided 3x3 and max-pool branches (halves the size)."""

    def __init__(self, num_channels):
        super().__init__()
        c = num_channels
        _build(self, [("branch3x3", c, 384, 3, 2, 0), ("branch3x3dbl_1", c, 64, 1, 1, 0),
                      ("branch3x3dbl_2", 64, 96, 3, 1, 1), ("branch3x3dbl_3", 96, 96, 3, 2, 0), ("maxpool",)])

    def forward(self, x):
        return oarlock.concat([self.branch3x3(x),
                               _chain(self, x, "branch3x3dbl_1", "branch3x3dbl_2", "branch3x3dbl_3"),
                               self.branch_pool(x)], axis=1)


class InceptionC(nn.Layer):
    """1x1, factorised 7x7 (1x7, 7x1), double factorised 7x7 and avgpool-1x1 branches."""

    def __init__(self, num_channels, channels_7x7):
        super().__init__()
        c, c7 = num_channels, channels_7x7
        _build(self, [("branch1x1", c, 192, 1, 1, 0), ("branch7x7_1", c, c7, 1, 1, 0),
                      ("branch7x7_2", c7, c7, (1, 7), 1, (0, 3)), ("branch7x7_3", c7, 192, (7, 1), 1, (3, 0)),
                      ("branch7x7dbl_1", c, c7, 1, 1, 0), ("branch7x7dbl_2", c7, c7, (7, 1), 1, (3, 0)),
                      ("branch7x7dbl_3", c7, c7, (1, 7), 1, (0, 3)), ("branch7x7dbl_4", c7, c7, (7, 1), 1, (3, 0)),
                      ("branch7x7dbl_5", c7, 192, (1, 7), 1, (0, 3)), ("avgpool",),
                      ("branch_pool_conv", c, 192, 1, 1, 0)])

    def forward(self, x):
        double = [f"branch7x7dbl_{i}" for i in range(1, 6)]
        return oarlock.concat([self.branch1x1(x), _chain(self, x, "branch7x7_1", "branch7x7_2", "branch7x7_3"),
                               _chain(self, x, *double), _chain(self, x, "branch_pool", "branch_pool_conv")], axis=1)


class InceptionD(nn.Layer):
    """1x1-strided 3x3, 1x1-1x7-7x1-strided 3x3 and max-pool branches (halves the size)."""

    def __init__(self, num_channels):
        super().__init__()
        c = num_channels
        _build(self, [("branch3x3_1", c, 192, 1, 1, 0), ("branch3x3_2", 192, 320, 3, 2, 0),
                      ("branch7x7x3_1", c, 192, 1, 1, 0), ("branch7x7x3_2", 192, 192, (1, 7), 1, (0, 3)),
                      ("branch7x7x3_3", 192, 192, (7, 1), 1, (3, 0)), ("branch7x7x3_4", 192, 192, 3, 2, 0),
                      ("maxpool",)])

    def forward(self, x):
        return oarlock.concat([_chain(self, x, "branch3x3_1", "branch3x3_2"),
                               _chain(self, x, *(f"branch7x7x3_{i}" for i in range(1, 5))),
                               self.branch_pool(x)], axis=1)


class InceptionE(nn.Layer):
    """1x1, 1x1-(1x3 | 3x1), 1x1-3x3-(1x3 | 3x1) and avgpool-1x1 branches."""

    def __init__(self, num_channels):
        super().__init__()
        c = num_channels
        _build(self, [("branch1x1", c, 320, 1, 1, 0), ("branch3x3_1", c, 384, 1, 1, 0),
                      ("branch3x3_2a", 384, 384, (1, 3), 1, (0, 1)), ("branch3x3_2b", 384, 384, (3, 1), 1, (1, 0)),
                      ("branch3x3dbl_1", c, 448, 1, 1, 0), ("branch3x3dbl_2", 448, 384, 3, 1, 1),
                      ("branch3x3dbl_3a", 384, 384, (1, 3), 1, (0, 1)),
                      ("branch3x3dbl_3b", 384, 384, (3, 1), 1, (1, 0)), ("avgpool",),
                      ("branch_pool_conv", c, 192, 1, 1, 0)])

    def forward(self, x):
        b3 = self.branch3x3_1(x)
        d3 = _chain(self, x, "branch3x3dbl_1", "branch3x3dbl_2")
        return oarlock.concat([self.branch1x1(x),
                               oarlock.concat([self.branch3x3_2a(b3), self.branch3x3_2b(b3)], axis=1),
                               oarlock.concat([self.branch3x3dbl_3a(d3), self.branch3x3dbl_3b(d3)], axis=1),
                               _chain(self, x, "branch_pool", "branch_pool_conv")], axis=1)


class InceptionV3(nn.Layer):
    """InceptionV3 (inputs of 3x299x299 for the ImageNet weights; the 2048-wide features feed fc)."""

    def __init__(self, num_classes=1000, with_pool=True):
        super().__init__()
        self.num_classes, self.with_pool = num_classes, with_pool
        self.layers_config = {"inception_a": [[192, 256, 288], [32, 64, 64]], "inception_b": [288],
                              "inception_c": [[768, 768, 768, 768], [128, 160, 160, 192]], "inception_d": [768],
                              "inception_e": [1280, 2048]}
        cfg = self.layers_config
        self.inception_stem = InceptionStem()
        blocks = [InceptionA(c, p) for c, p in zip(*cfg["inception_a"])]
        blocks += [InceptionB(c) for c in cfg["inception_b"]]
        blocks += [InceptionC(c, c7) for c, c7 in zip(*cfg["inception_c"])]
        blocks += [InceptionD(c) for c in cfg["inception_d"]]
        blocks += [InceptionE(c) for c in cfg["inception_e"]]
        self.inception_block_list = nn.LayerList(blocks)
        if with_pool:
            self.avg_pool = nn.AdaptiveAvgPool2D(1)
        if num_classes > 0:
            self.dropout = nn.Dropout(p=0.2, mode="downscale_in_infer")
            stdv = 1.0 / math.sqrt(2048 * 1.0)
            self.fc = nn.Linear(2048, num_classes, weight_attr=ParamAttr(initializer=Uniform(-stdv, stdv)),
                                bias_attr=ParamAttr())

    def forward(self, x):
        x = self.inception_stem(x)
        for block in self.inception_block_list:
            x = block(x)
        if self.with_pool:
            x = self.avg_pool(x)
        if self.num_classes > 0:
            x = self.fc(self.dropout(oarlock.reshape(x, shape=[-1, 2048])))
        return x


def inception_v3(pretrained=False, **kwargs):
    """InceptionV3."""
    return load_pretrained(lambda: InceptionV3(**kwargs), "inception_v3", model_urls, pretrained)
