"""ShuffleNetV2 (scales 0.25 to 2.0, ReLU or Swish), Paddle 3.2's layout: _conv1, blocks named "2_1" ..
"4_4", _last_conv, _fc."""

from __future__ import annotations

import oarlock
import oarlock.nn as nn
from oarlock_vision.models.pretrained import HAPI, load_pretrained
from oarlock_vision.ops import ConvNormActivation

MD5 = {"shufflenet_v2_x0_25": "1e509b4c140eeb096bb16e214796d03b",
       "shufflenet_v2_x0_33": "3d7b3ab0eaa5c0927ff1026d31b729bd",
       "shufflenet_v2_x0_5": "5e5cee182a7793c4e4c73949b1a71bd4",
       "shufflenet_v2_x1_0": "122d42478b9e81eb49f8a9ede327b1a4",
       "shufflenet_v2_x1_5": "faced5827380d73531d0ee027c67826d",
       "shufflenet_v2_x2_0": "cd3dddcd8305e7bcd8ad14d1c69a5784",
       "shufflenet_v2_swish": "adde0aa3b023e5b0c94a68be1c394b84"}
model_urls = {arch: (f"{HAPI}{arch}.pdparams", md5) for arch, md5 in MD5.items()}

STAGE_OUT_CHANNELS = {0.25: [-1, 24, 24, 48, 96, 512], 0.33: [-1, 24, 32, 64, 128, 512],
                      0.5: [-1, 24, 48, 96, 192, 1024], 1.0: [-1, 24, 116, 232, 464, 1024],
                      1.5: [-1, 24, 176, 352, 704, 1024], 2.0: [-1, 24, 224, 488, 976, 2048]}
STAGE_REPEATS = [4, 8, 4]


def create_activation_layer(act):
    """The activation class for 'relu', 'swish' or None."""
    layers = {"relu": nn.ReLU, "swish": nn.Swish, None: None}
    if act not in layers:
        raise RuntimeError(f"ShuffleNetV2: the activation function is not supported: {act!r} (use 'relu', 'swish' "
                           f"or None)")
    return layers[act]


def channel_shuffle(x, groups):
    """Interleave the channels of `groups` groups: [N, g * c, H, W] -> [N, c * g, H, W]."""
    batch_size, num_channels, height, width = x.shape[0:4]
    x = oarlock.reshape(x, shape=[batch_size, groups, num_channels // groups, height, width])
    x = oarlock.transpose(x, perm=[0, 2, 1, 3, 4])
    return oarlock.reshape(x, shape=[batch_size, num_channels, height, width])


def _branch(layer, prefix, in_channels, out_channels, stride, activation_layer, depthwise_first):
    """Set the conv layers of one branch on `layer`: (dw 3x3, linear 1x1) or (pw 1x1, dw 3x3, linear 1x1)."""
    mid = out_channels // 2
    if depthwise_first:
        specs = [("_conv_dw" + prefix, in_channels, in_channels, 3, stride, in_channels, None),
                 ("_conv_linear" + prefix, in_channels, mid, 1, 1, 1, activation_layer)]
    else:
        specs = [("_conv_pw" + prefix, in_channels, mid, 1, 1, 1, activation_layer),
                 ("_conv_dw" + prefix, mid, mid, 3, stride, mid, None),
                 ("_conv_linear" + prefix, mid, mid, 1, 1, 1, activation_layer)]
    for name, cin, cout, kernel, s, groups, act in specs:
        setattr(layer, name, ConvNormActivation(cin, cout, kernel_size=kernel, stride=s, padding=(kernel - 1) // 2,
                                                groups=groups, activation_layer=act))
    return [getattr(layer, spec[0]) for spec in specs]


class InvertedResidual(nn.Layer):
    """Half the channels pass through, the other half go through pw-dw-linear; then a channel shuffle."""

    def __init__(self, in_channels, out_channels, stride, activation_layer=nn.ReLU):
        super().__init__()
        self._branch = _branch(self, "", in_channels // 2, out_channels, stride, activation_layer, False)

    def forward(self, inputs):
        half = inputs.shape[1] // 2
        x1, x2 = oarlock.split(inputs, num_or_sections=[half, half], axis=1)
        for conv in self._branch:
            x2 = conv(x2)
        return channel_shuffle(oarlock.concat([x1, x2], axis=1), 2)


class InvertedResidualDS(nn.Layer):
    """The downsampling unit: two strided branches (dw-linear and pw-dw-linear) concatenated and shuffled."""

    def __init__(self, in_channels, out_channels, stride, activation_layer=nn.ReLU):
        super().__init__()
        self._branch1 = _branch(self, "_1", in_channels, out_channels, stride, activation_layer, True)
        self._branch2 = _branch(self, "_2", in_channels, out_channels, stride, activation_layer, False)

    def forward(self, inputs):
        x1, x2 = inputs, inputs
        for conv in self._branch1:
            x1 = conv(x1)
        for conv in self._branch2:
            x2 = conv(x2)
        return channel_shuffle(oarlock.concat([x1, x2], axis=1), 2)


class ShuffleNetV2(nn.Layer):
    """ShuffleNetV2 with channel `scale` (0.25, 0.33, 0.5, 1.0, 1.5, 2.0) and activation 'relu' or 'swish'."""

    def __init__(self, scale=1.0, act="relu", num_classes=1000, with_pool=True):
        super().__init__()
        if scale not in STAGE_OUT_CHANNELS:
            raise NotImplementedError(f"ShuffleNetV2: this scale size:[{scale}] is not implemented! (supported: "
                                      f"{sorted(STAGE_OUT_CHANNELS)})")
        self.scale, self.num_classes, self.with_pool = scale, num_classes, with_pool
        channels = STAGE_OUT_CHANNELS[scale]
        activation_layer = create_activation_layer(act)
        self._conv1 = ConvNormActivation(3, channels[1], kernel_size=3, stride=2, padding=1,
                                         activation_layer=activation_layer)
        self._max_pool = nn.MaxPool2D(kernel_size=3, stride=2, padding=1)
        self._block_list = []
        for stage, repeats in enumerate(STAGE_REPEATS):
            for i in range(repeats):
                block = (InvertedResidualDS(channels[stage + 1], channels[stage + 2], 2, activation_layer) if i == 0
                         else InvertedResidual(channels[stage + 2], channels[stage + 2], 1, activation_layer))
                self._block_list.append(self.add_sublayer(f"{stage + 2}_{i + 1}", block))
        self._last_conv = ConvNormActivation(channels[-2], channels[-1], kernel_size=1, stride=1, padding=0,
                                             activation_layer=activation_layer)
        if with_pool:
            self._pool2d_avg = nn.AdaptiveAvgPool2D(1)
        if num_classes > 0:
            self._out_c = channels[-1]
            self._fc = nn.Linear(channels[-1], num_classes)

    def forward(self, inputs):
        x = self._max_pool(self._conv1(inputs))
        for block in self._block_list:
            x = block(x)
        x = self._last_conv(x)
        if self.with_pool:
            x = self._pool2d_avg(x)
        if self.num_classes > 0:
            x = self._fc(oarlock.flatten(x, start_axis=1, stop_axis=-1))
        return x


def _builder(arch, scale, act="relu"):
    def build(pretrained=False, **kwargs):
        return load_pretrained(lambda: ShuffleNetV2(scale=scale, act=act, **kwargs), arch, model_urls,
                               pretrained)
    build.__name__ = build.__qualname__ = arch
    build.__doc__ = f"ShuffleNetV2 with scale {scale} and {act} activations."
    return build


shufflenet_v2_x0_25 = _builder("shufflenet_v2_x0_25", 0.25)
shufflenet_v2_x0_33 = _builder("shufflenet_v2_x0_33", 0.33)
shufflenet_v2_x0_5 = _builder("shufflenet_v2_x0_5", 0.5)
shufflenet_v2_x1_0 = _builder("shufflenet_v2_x1_0", 1.0)
shufflenet_v2_x1_5 = _builder("shufflenet_v2_x1_5", 1.5)
shufflenet_v2_x2_0 = _builder("shufflenet_v2_x2_0", 2.0)
shufflenet_v2_swish = _builder("shufflenet_v2_swish", 1.0, act="swish")
