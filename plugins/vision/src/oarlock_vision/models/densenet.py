"""DenseNet 121/161/169/201/264 as Paddle 3.2 builds it: the legacy nn.BatchNorm with act='relu' before each
convolution (BN-ReLU-Conv), dense blocks registered as db_conv_2.., transitions as tr_conv2_blk.., out."""

from __future__ import annotations

import math

import oarlock
import oarlock.nn as nn
from oarlock.nn import ParamAttr
from oarlock.nn.initializer import Uniform
from oarlock_vision.models.pretrained import load_pretrained

_BASE = "https://paddle-imagenet-models-name.bj.bcebos.com/dygraph/"
MD5 = {121: "db1b239ed80a905290fd8b01d3af08e4", 161: "62158869cb315098bd25ddbfd308a853",
       169: "82cc7c635c3f19098c748850efb2d796", 201: "16ca29565a7712329cf9e36e02caaf58",
       264: "3270ce516b85370bba88cfdd9f60bff4"}
model_urls = {f"densenet{n}": (f"{_BASE}DenseNet{n}_pretrained.pdparams", md5) for n, md5 in MD5.items()}

# layers -> (initial features, growth rate, layers per dense block)
SPEC = {121: (64, 32, [6, 12, 24, 16]), 161: (96, 48, [6, 12, 36, 24]), 169: (64, 32, [6, 12, 32, 32]),
        201: (64, 32, [6, 12, 48, 32]), 264: (64, 32, [6, 12, 64, 48])}


def _conv(num_channels, num_filters, filter_size, stride, pad, groups):
    return nn.Conv2D(num_channels, num_filters, filter_size, stride=stride, padding=pad, groups=groups,
                     weight_attr=ParamAttr(), bias_attr=False)


class BNACConvLayer(nn.Layer):
    """BatchNorm + activation, then a bias-free convolution."""

    def __init__(self, num_channels, num_filters, filter_size, stride=1, pad=0, groups=1, act="relu"):
        super().__init__()
        self._batch_norm = nn.BatchNorm(num_channels, act=act)
        self._conv = _conv(num_channels, num_filters, filter_size, stride, pad, groups)

    def forward(self, input):
        return self._conv(self._batch_norm(input))


class ConvBNLayer(nn.Layer):
    """A bias-free convolution, then BatchNorm + activation."""

    def __init__(self, num_channels, num_filters, filter_size, stride=1, pad=0, groups=1, act="relu"):
        super().__init__()
        self._conv = _conv(num_channels, num_filters, filter_size, stride, pad, groups)
        self._batch_norm = nn.BatchNorm(num_filters, act=act)

    def forward(self, input):
        return self._batch_norm(self._conv(input))


class DenseLayer(nn.Layer):
    """1x1 bottleneck (bn_size * growth_rate) and 3x3 (growth_rate) BN-ReLU-Conv, optional dropout, the output
    concatenated to the input."""

    def __init__(self, num_channels, growth_rate, bn_size, dropout):
        super().__init__()
        self.dropout = dropout
        self.bn_ac_func1 = BNACConvLayer(num_channels, bn_size * growth_rate, 1, pad=0, stride=1)
        self.bn_ac_func2 = BNACConvLayer(bn_size * growth_rate, growth_rate, 3, pad=1, stride=1)
        if dropout:
            self.dropout_func = nn.Dropout(p=dropout, mode="downscale_in_infer")

    def forward(self, input):
        conv = self.bn_ac_func2(self.bn_ac_func1(input))
        if self.dropout:
            conv = self.dropout_func(conv)
        return oarlock.concat([input, conv], axis=1)


class DenseBlock(nn.Layer):
    """num_layers DenseLayers, registered as {name}_1, {name}_2, ..."""

    def __init__(self, num_channels, num_layers, bn_size, growth_rate, dropout, name=None):
        super().__init__()
        self.dropout = dropout
        self.dense_layer_func = [
            self.add_sublayer(f"{name}_{i + 1}", DenseLayer(num_channels + i * growth_rate, growth_rate, bn_size,
                                                            dropout)) for i in range(num_layers)]

    def forward(self, input):
        for layer in self.dense_layer_func:
            input = layer(input)
        return input


class TransitionLayer(nn.Layer):
    """BN-ReLU-1x1 conv to num_output_features, then a 2x2 average pool."""

    def __init__(self, num_channels, num_output_features):
        super().__init__()
        self.conv_ac_func = BNACConvLayer(num_channels, num_output_features, 1, pad=0, stride=1)
        self.pool2d_avg = nn.AvgPool2D(kernel_size=2, stride=2, padding=0)

    def forward(self, input):
        return self.pool2d_avg(self.conv_ac_func(input))


class DenseNet(nn.Layer):
    """DenseNet of `layers` (121, 161, 169, 201, 264)."""

    def __init__(self, layers=121, bn_size=4, dropout=0.0, num_classes=1000, with_pool=True):
        super().__init__()
        if layers not in SPEC:
            raise ValueError(f"DenseNet: supported layers are {sorted(SPEC)} but input layer is {layers!r}")
        self.num_classes, self.with_pool = num_classes, with_pool
        num_init_features, growth_rate, block_config = SPEC[layers]
        self.conv1_func = ConvBNLayer(3, num_init_features, 7, stride=2, pad=3, act="relu")
        self.pool2d_max = nn.MaxPool2D(kernel_size=3, stride=2, padding=1)
        self.block_config = block_config
        self.dense_block_func_list, self.transition_func_list = [], []
        num_features = num_init_features
        for i, num_layers in enumerate(block_config):
            self.dense_block_func_list.append(self.add_sublayer(
                f"db_conv_{i + 2}", DenseBlock(num_features, num_layers, bn_size, growth_rate, dropout,
                                               name=f"conv{i + 2}")))
            num_features += num_layers * growth_rate
            if i != len(block_config) - 1:
                self.transition_func_list.append(self.add_sublayer(
                    f"tr_conv{i + 2}_blk", TransitionLayer(num_features, num_features // 2)))
                num_features //= 2
        self.batch_norm = nn.BatchNorm(num_features, act="relu")
        if with_pool:
            self.pool2d_avg = nn.AdaptiveAvgPool2D(1)
        if num_classes > 0:
            stdv = 1.0 / math.sqrt(num_features * 1.0)
            self.out = nn.Linear(num_features, num_classes, weight_attr=ParamAttr(initializer=Uniform(-stdv, stdv)),
                                 bias_attr=ParamAttr())

    def forward(self, input):
        x = self.pool2d_max(self.conv1_func(input))
        for i, block in enumerate(self.dense_block_func_list):
            x = block(x)
            if i < len(self.transition_func_list):
                x = self.transition_func_list[i](x)
        x = self.batch_norm(x)
        if self.with_pool:
            x = self.pool2d_avg(x)
        if self.num_classes > 0:
            x = self.out(oarlock.flatten(x, start_axis=1, stop_axis=-1))
        return x


def _builder(layers):
    arch = f"densenet{layers}"

    def build(pretrained=False, **kwargs):
        return load_pretrained(lambda: DenseNet(layers=layers, **kwargs), arch, model_urls, pretrained)
    build.__name__ = build.__qualname__ = arch
    build.__doc__ = f"DenseNet-{layers}."
    return build


densenet121, densenet161, densenet169, densenet201, densenet264 = (_builder(n) for n in SPEC)
