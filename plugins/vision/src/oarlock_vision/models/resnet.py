"""ResNet 18/34/50/101/152, ResNeXt (groups x width) and wide ResNet, with Paddle 3.2's layout (conv1, bn1,
layer1..layer4 of BasicBlock/BottleneckBlock, avgpool, fc)."""

from __future__ import annotations

import oarlock
import oarlock.nn as nn
from oarlock_vision.models.pretrained import HAPI, load_pretrained

ARCHS = ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "resnext50_32x4d", "resnext50_64x4d",
         "resnext101_32x4d", "resnext101_64x4d", "resnext152_32x4d", "resnext152_64x4d", "wide_resnet50_2",
         "wide_resnet101_2")
MD5 = ("cf548f46534aa3560945be4b95cd11c4", "8d2275cf8706028345f78ac0e1d31969", "ca6f485ee1ab0492d38f323885b0ad80",
       "02f35f034ca3858e1e54d4036443c92d", "7ad16a2f1e7333859ff986138630fd7a", "dc47483169be7d6f018fcbb7baf8775d",
       "063d4b483e12b06388529450ad7576db", "967b090039f9de2c8d06fe994fb9095f", "98e04e7ca616a066699230d769d03008",
       "18ff0beee21f2efc99c4b31786107121", "77c4af00ca42c405fa7f841841959379", "0282f804d73debdab289bd9fea3fa6dc",
       "d4360a2d23657f059216f5d5a1a9ac93")
model_urls = {arch: (f"{HAPI}{arch}.pdparams", md5) for arch, md5 in zip(ARCHS, MD5)}

LAYERS = {18: [2, 2, 2, 2], 34: [3, 4, 6, 3], 50: [3, 4, 6, 3], 101: [3, 4, 23, 3], 152: [3, 8, 36, 3]}


class BasicBlock(nn.Layer):
    """Two 3x3 conv-BN stages and the shortcut (downsample when given)."""

    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None, groups=1, base_width=64, dilation=1,
                 norm_layer=None):
        super().__init__()
        norm_layer = norm_layer or nn.BatchNorm2D
        if dilation > 1:
            raise NotImplementedError(f"BasicBlock: dilation > 1 is not supported, got dilation={dilation}")
        self.conv1 = nn.Conv2D(inplanes, planes, 3, padding=1, stride=stride, bias_attr=False)
        self.bn1 = norm_layer(planes)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2D(planes, planes, 3, padding=1, bias_attr=False)
        self.bn2 = norm_layer(planes)
        self.downsample, self.stride = downsample, stride

    def forward(self, x):
        out = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(out + identity)


class BottleneckBlock(nn.Layer):
    """1x1 reduce, 3x3 (grouped for ResNeXt), 1x1 expand (x4), each with BN, and the shortcut."""

    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None, groups=1, base_width=64, dilation=1,
                 norm_layer=None):
        super().__init__()
        norm_layer = norm_layer or nn.BatchNorm2D
        width = int(planes * (base_width / 64.0)) * groups
        self.conv1 = nn.Conv2D(inplanes, width, 1, bias_attr=False)
        self.bn1 = norm_layer(width)
        self.conv2 = nn.Conv2D(width, width, 3, padding=dilation, stride=stride, groups=groups, dilation=dilation,
                               bias_attr=False)
        self.bn2 = norm_layer(width)
        self.conv3 = nn.Conv2D(width, planes * self.expansion, 1, bias_attr=False)
        self.bn3 = norm_layer(planes * self.expansion)
        self.relu = nn.ReLU()
        self.downsample, self.stride = downsample, stride

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(out + identity)


class ResNet(nn.Layer):
    """ResNet of `depth` (18, 34, 50, 101, 152) built from `block`; width is the bottleneck's base width
    (ResNeXt: 4 with groups 32/64; wide ResNet: 128)."""

    def __init__(self, block, depth=50, width=64, num_classes=1000, with_pool=True, groups=1):
        super().__init__()
        if depth not in LAYERS:
            raise ValueError(f"ResNet: depth must be one of {sorted(LAYERS)}, got {depth!r}")
        layers = LAYERS[depth]
        self.groups, self.base_width, self.num_classes, self.with_pool = groups, width, num_classes, with_pool
        self._norm_layer = nn.BatchNorm2D
        self.inplanes, self.dilation = 64, 1
        self.conv1 = nn.Conv2D(3, self.inplanes, kernel_size=7, stride=2, padding=3, bias_attr=False)
        self.bn1 = self._norm_layer(self.inplanes)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2D(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], stride=2)
        self.layer3 = self._make_layer(block, 256, layers[2], stride=2)
        self.layer4 = self._make_layer(block, 512, layers[3], stride=2)
        if with_pool:
            self.avgpool = nn.AdaptiveAvgPool2D((1, 1))
        if num_classes > 0:
            self.fc = nn.Linear(512 * block.expansion, num_classes)

    def _make_layer(self, block, planes, blocks, stride=1, dilate=False):
        previous_dilation = self.dilation
        if dilate:
            self.dilation *= stride
            stride = 1
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                nn.Conv2D(self.inplanes, planes * block.expansion, 1, stride=stride, bias_attr=False),
                self._norm_layer(planes * block.expansion))
        layers = [block(self.inplanes, planes, stride, downsample, self.groups, self.base_width, previous_dilation,
                        self._norm_layer)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes, groups=self.groups, base_width=self.base_width,
                         norm_layer=self._norm_layer) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        if self.with_pool:
            x = self.avgpool(x)
        if self.num_classes > 0:
            x = self.fc(oarlock.flatten(x, 1))
        return x


def _resnet(arch, block, depth, pretrained, **kwargs):
    return load_pretrained(lambda: ResNet(block, depth, **kwargs), arch, model_urls, pretrained)


def _builder(arch, depth, groups=None, width=None):
    block = BasicBlock if depth < 50 else BottleneckBlock

    def build(pretrained=False, **kwargs):
        if groups is not None:
            kwargs["groups"] = groups
        if width is not None:
            kwargs["width"] = width
        return _resnet(arch, block, depth, pretrained, **kwargs)
    build.__name__ = build.__qualname__ = arch
    build.__doc__ = f"{arch}: ResNet-{depth} of {block.__name__}s" + (
        f", groups={groups}" if groups else "") + (f", width={width}" if width else "") + "."
    return build


resnet18, resnet34, resnet50, resnet101, resnet152 = (_builder(f"resnet{d}", d) for d in (18, 34, 50, 101, 152))
resnext50_32x4d = _builder("resnext50_32x4d", 50, 32, 4)
resnext50_64x4d = _builder("resnext50_64x4d", 50, 64, 4)
resnext101_32x4d = _builder("resnext101_32x4d", 101, 32, 4)
resnext101_64x4d = _builder("resnext101_64x4d", 101, 64, 4)
resnext152_32x4d = _builder("resnext152_32x4d", 152, 32, 4)
resnext152_64x4d = _builder("resnext152_64x4d", 152, 64, 4)
wide_resnet50_2 = _builder("wide_resnet50_2", 50, width=128)
wide_resnet101_2 = _builder("wide_resnet101_2", 101, width=128)
