"""VGG 11/13/16/19, with or without batch norm (Paddle 3.2's layer layout: features, avgpool, classifier)."""

from __future__ import annotations

import oarlock
import oarlock.nn as nn
from oarlock_vision.models.pretrained import HAPI, load_pretrained

model_urls = {"vgg16": (HAPI + "vgg16.pdparams", "89bbffc0f87d260be9b8cdc169c991c4"),
              "vgg19": (HAPI + "vgg19.pdparams", "23b18bb13d8894f60f54e642be79a0dd")}

# channels of each 3x3 convolution, "M" a 2x2 max pool
cfgs = {
    "A": [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "B": [64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "D": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
    "E": [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M"],
}


class VGG(nn.Layer):
    """`features` (from make_layers), a 7x7 adaptive average pool (with_pool), then the classifier
    (num_classes > 0)."""

    def __init__(self, features, num_classes=1000, with_pool=True):
        super().__init__()
        self.features, self.num_classes, self.with_pool = features, num_classes, with_pool
        if with_pool:
            self.avgpool = nn.AdaptiveAvgPool2D((7, 7))
        if num_classes > 0:
            self.classifier = nn.Sequential(
                nn.Linear(512 * 7 * 7, 4096), nn.ReLU(), nn.Dropout(),
                nn.Linear(4096, 4096), nn.ReLU(), nn.Dropout(), nn.Linear(4096, num_classes))

    def forward(self, x):
        x = self.features(x)
        if self.with_pool:
            x = self.avgpool(x)
        if self.num_classes > 0:
            x = self.classifier(oarlock.flatten(x, 1))
        return x


def make_layers(cfg, batch_norm=False):
    """The convolutional part: Conv2D (+ BatchNorm2D) + ReLU per number in cfg, MaxPool2D per "M"."""
    layers, in_channels = [], 3
    for v in cfg:
        if v == "M":
            layers.append(nn.MaxPool2D(kernel_size=2, stride=2))
            continue
        layers.append(nn.Conv2D(in_channels, v, kernel_size=3, padding=1))
        if batch_norm:
            layers.append(nn.BatchNorm2D(v))
        layers.append(nn.ReLU())
        in_channels = v
    return nn.Sequential(*layers)


def _vgg(arch, cfg, batch_norm, pretrained, **kwargs):
    return load_pretrained(lambda: VGG(make_layers(cfgs[cfg], batch_norm=batch_norm), **kwargs), arch, model_urls,
                           pretrained)


def _builder(depth, cfg):
    def build(pretrained=False, batch_norm=False, **kwargs):
        return _vgg(f"vgg{depth}" + ("_bn" if batch_norm else ""), cfg, batch_norm, pretrained, **kwargs)
    build.__name__ = build.__qualname__ = f"vgg{depth}"
    build.__doc__ = f"VGG {depth} (configuration {cfg}); batch_norm=True adds BatchNorm2D after each convolution."
    return build


vgg11, vgg13, vgg16, vgg19 = (_builder(d, c) for d, c in ((11, "A"), (13, "B"), (16, "D"), (19, "E")))
