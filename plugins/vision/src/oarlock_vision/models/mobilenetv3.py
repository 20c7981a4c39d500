"""MobileNetV3 small and large (Paddle 3.2's layout: conv, blocks, lastconv, avgpool, classifier; BatchNorm with
epsilon 0.001 and momentum 0.99; squeeze-excitation with Hardsigmoid)."""

from __future__ import annotations

from functools import partial

import oarlock
import oarlock.nn as nn
from oarlock_vision.models._utils import _make_divisible
from oarlock_vision.models.pretrained import HAPI, load_pretrained
from oarlock_vision.ops import ConvNormActivation

model_urls = {
    "mobilenet_v3_small_x1.0": (HAPI + "mobilenet_v3_small_x1.0.pdparams", "34fe0e7c1f8b00b2b056ad6788d0590c"),
    "mobilenet_v3_large_x1.0": (HAPI + "mobilenet_v3_large_x1.0.pdparams", "118db5792b4e183b925d8e8e334db3df"),
}

# in, kernel, expanded, out, squeeze-excitation, activation, stride
SMALL = [(16, 3, 16, 16, True, "relu", 2), (16, 3, 72, 24, False, "relu", 2), (24, 3, 88, 24, False, "relu", 1),
         (24, 5, 96, 40, True, "hardswish", 2), (40, 5, 240, 40, True, "hardswish", 1),
         (40, 5, 240, 40, True, "hardswish", 1), (40, 5, 120, 48, True, "hardswish", 1),
         (48, 5, 144, 48, True, "hardswish", 1), (48, 5, 288, 96, True, "hardswish", 2),
         (96, 5, 576, 96, True, "hardswish", 1), (96, 5, 576, 96, True, "hardswish", 1)]
LARGE = [(16, 3, 16, 16, False, "relu", 1), (16, 3, 64, 24, False, "relu", 2), (24, 3, 72, 24, False, "relu", 1),
         (24, 5, 72, 40, True, "relu", 2), (40, 5, 120, 40, True, "relu", 1), (40, 5, 120, 40, True, "relu", 1),
         (40, 3, 240, 80, False, "hardswish", 2), (80, 3, 200, 80, False, "hardswish", 1),
         (80, 3, 184, 80, False, "hardswish", 1), (80, 3, 184, 80, False, "hardswish", 1),
         (80, 3, 480, 112, True, "hardswish", 1), (112, 3, 672, 112, True, "hardswish", 1),
         (112, 5, 672, 160, True, "hardswish", 2), (160, 5, 960, 160, True, "hardswish", 1),
         (160, 5, 960, 160, True, "hardswish", 1)]


class SqueezeExcitation(nn.Layer):
    """input * scale_activation(fc2(activation(fc1(avgpool(input))))), fc1/fc2 being 1x1 convolutions."""

    def __init__(self, input_channels, squeeze_channels, activation=nn.ReLU, scale_activation=nn.Sigmoid):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2D(1)
        self.fc1 = nn.Conv2D(input_channels, squeeze_channels, 1)
        self.fc2 = nn.Conv2D(squeeze_channels, input_channels, 1)
        self.activation = activation()
        self.scale_activation = scale_activation()

    def _scale(self, input):
        return self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(input)))))

    def forward(self, input):
        return self._scale(input) * input


class InvertedResidualConfig:
    """One block's settings, channels scaled and rounded to multiples of 8."""

    ACTIVATIONS = {None: None, "relu": nn.ReLU, "hardswish": nn.Hardswish}

    def __init__(self, in_channels, kernel, expanded_channels, out_channels, use_se, activation, stride, scale=1.0):
        if activation not in self.ACTIVATIONS:
            raise RuntimeError(f"InvertedResidualConfig: the activation function is not supported: {activation!r} "
                               f"(use 'relu', 'hardswish' or None)")
        self.in_channels = self.adjust_channels(in_channels, scale=scale)
        self.kernel = kernel
        self.expanded_channels = self.adjust_channels(expanded_channels, scale=scale)
        self.out_channels = self.adjust_channels(out_channels, scale=scale)
        self.use_se, self.activation_layer, self.stride = use_se, self.ACTIVATIONS[activation], stride

    @staticmethod
    def adjust_channels(channels, scale=1.0):
        return _make_divisible(channels * scale, 8)


class InvertedResidual(nn.Layer):
    """Optional 1x1 expansion, depthwise conv, optional squeeze-excitation, 1x1 linear projection, residual
    when shapes allow."""

    def __init__(self, in_channels, expanded_channels, out_channels, filter_size, stride, use_se, activation_layer,
                 norm_layer):
        super().__init__()
        self.use_res_connect = stride == 1 and in_channels == out_channels
        self.use_se = use_se
        self.expand = in_channels != expanded_channels
        if self.expand:
            self.expand_conv = ConvNormActivation(in_channels, expanded_channels, kernel_size=1, stride=1, padding=0,
                                                  norm_layer=norm_layer, activation_layer=activation_layer)
        self.bottleneck_conv = ConvNormActivation(expanded_channels, expanded_channels, kernel_size=filter_size,
                                                  stride=stride, padding=(filter_size - 1) // 2,
                                                  groups=expanded_channels, norm_layer=norm_layer,
                                                  activation_layer=activation_layer)
        if use_se:
            self.mid_se = SqueezeExcitation(expanded_channels, _make_divisible(expanded_channels // 4),
                                            scale_activation=nn.Hardsigmoid)
        self.linear_conv = ConvNormActivation(expanded_channels, out_channels, kernel_size=1, stride=1, padding=0,
                                              norm_layer=norm_layer, activation_layer=None)

    def forward(self, x):
        identity = x
        if self.expand:
            x = self.expand_conv(x)
        x = self.bottleneck_conv(x)
        if self.use_se:
            x = self.mid_se(x)
        x = self.linear_conv(x)
        return oarlock.add(identity, x) if self.use_res_connect else x


class MobileNetV3(nn.Layer):
    """The network from a list of InvertedResidualConfig and the classifier's hidden width last_channel."""

    def __init__(self, config, last_channel, scale=1.0, num_classes=1000, with_pool=True):
        super().__init__()
        self.config, self.scale, self.last_channel = config, scale, last_channel
        self.num_classes, self.with_pool = num_classes, with_pool
        self.firstconv_in_channels = config[0].in_channels
        self.lastconv_in_channels = config[-1].in_channels
        self.lastconv_out_channels = self.lastconv_in_channels * 6
        norm_layer = partial(nn.BatchNorm2D, epsilon=0.001, momentum=0.99)
        self.conv = ConvNormActivation(3, self.firstconv_in_channels, kernel_size=3, stride=2, padding=1, groups=1,
                                       activation_layer=nn.Hardswish, norm_layer=norm_layer)
        self.blocks = nn.Sequential(*[
            InvertedResidual(cfg.in_channels, cfg.expanded_channels, cfg.out_channels, cfg.kernel, cfg.stride,
                             cfg.use_se, cfg.activation_layer, norm_layer) for cfg in config])
        self.lastconv = ConvNormActivation(self.lastconv_in_channels, self.lastconv_out_channels, kernel_size=1,
                                           stride=1, padding=0, groups=1, norm_layer=norm_layer,
                                           activation_layer=nn.Hardswish)
        if with_pool:
            self.avgpool = nn.AdaptiveAvgPool2D(1)
        if num_classes > 0:
            self.classifier = nn.Sequential(
                nn.Linear(self.lastconv_out_channels, last_channel), nn.Hardswish(), nn.Dropout(p=0.2),
                nn.Linear(last_channel, num_classes))

    def forward(self, x):
        x = self.lastconv(self.blocks(self.conv(x)))
        if self.with_pool:
            x = self.avgpool(x)
        if self.num_classes > 0:
            x = self.classifier(oarlock.flatten(x, 1))
        return x


class MobileNetV3Small(MobileNetV3):
    """MobileNetV3-Small with width multiplier `scale`."""

    def __init__(self, scale=1.0, num_classes=1000, with_pool=True):
        super().__init__([InvertedResidualConfig(*row, scale) for row in SMALL], _make_divisible(1024 * scale, 8),
                         scale=scale, num_classes=num_classes, with_pool=with_pool)


class MobileNetV3Large(MobileNetV3):
    """MobileNetV3-Large with width multiplier `scale`."""

    def __init__(self, scale=1.0, num_classes=1000, with_pool=True):
        super().__init__([InvertedResidualConfig(*row, scale) for row in LARGE], _make_divisible(1280 * scale, 8),
                         scale=scale, num_classes=num_classes, with_pool=with_pool)


def mobilenet_v3_small(pretrained=False, scale=1.0, **kwargs):
    """MobileNetV3-Small; Paddle publishes weights for scale 1.0."""
    return load_pretrained(lambda: MobileNetV3Small(scale=scale, **kwargs), f"mobilenet_v3_small_x{scale}",
                           model_urls, pretrained)


def mobilenet_v3_large(pretrained=False, scale=1.0, **kwargs):
    """MobileNetV3-Large; Paddle publishes weights for scale 1.0."""
    return load_pretrained(lambda: MobileNetV3Large(scale=scale, **kwargs), f"mobilenet_v3_large_x{scale}",
                           model_urls, pretrained)
