"""Normalisation layers: LayerNorm, RMSNorm, BatchNorm1D/2D/3D (torch-style aliases BatchNorm1d/2d/3d) and
GroupNorm, with Paddle's constructor signatures, parameter layouts and state-dict keys: LayerNorm's
weight and bias are flat [prod(normalized_shape)]; BatchNorm keeps its running statistics as the
buffers `_mean` and `_variance`. Scales start at one, shifts at zero; weight_attr/bias_attr=False
leaves the parameter out.
"""

from __future__ import annotations

import math
import numbers

import oarlock
from oarlock import Tensor
from oarlock.nn import functional as F
from oarlock_nn.layers.base import Layer
from oarlock_nn.layers.common import check_input, check_positive, rank_text
from oarlock_nn.layers.initializer import Constant


def _shape(layer, normalized_shape):
    shape = [normalized_shape] if isinstance(normalized_shape, numbers.Integral) else normalized_shape
    if not isinstance(shape, (list, tuple)) or not shape or not all(
            isinstance(n, numbers.Integral) and not isinstance(n, bool) and n > 0 for n in shape):
        raise ValueError(f"{type(layer).__name__}: normalized_shape must be a positive int or a non-empty list of "
                         f"positive ints, got {normalized_shape!r}")
    return [int(n) for n in shape]


def _check_trailing(layer, x, shape):
    k = len(shape)
    if isinstance(x, Tensor) and x.shape[len(x.shape) - k:] == shape:
        return
    check_input(layer, x, f"an input of shape [*, {', '.join(map(str, shape))}] (normalized_shape={shape})",
                sizes={i - k: n for i, n in enumerate(shape)})


def _scale(layer, attr, size):
    return layer.create_parameter([size], attr=attr, default_initializer=Constant(1.0))


def _shift(layer, attr, size):
    return layer.create_parameter([size], attr=attr, is_bias=True)


class LayerNorm(Layer):
    """Normalise over the trailing normalized_shape dims, then scale and shift (weight ones, bias zeros,
    both flat [prod(normalized_shape)] like Paddle's)."""

    def __init__(self, normalized_shape, epsilon=1e-05, weight_attr=None, bias_attr=None, name=None, *,
                 elementwise_affine=True, bias=True):
        super().__init__()
        self._normalized_shape = _shape(self, normalized_shape)
        self._epsilon, self._weight_attr, self._bias_attr, self._name = epsilon, weight_attr, bias_attr, name
        size = math.prod(self._normalized_shape)
        self.weight = _scale(self, weight_attr if elementwise_affine else False, size)
        self.bias = _shift(self, bias_attr if elementwise_affine and bias else False, size)

    def forward(self, x):
        _check_trailing(self, x, self._normalized_shape)
        return F.layer_norm(x, self._normalized_shape, self.weight, self.bias, self._epsilon)

    def extra_repr(self):
        return f"normalized_shape={self._normalized_shape}, epsilon={self._epsilon}"


class RMSNorm(Layer):
    """x / sqrt(mean(x^2) + epsilon) over the trailing normalized_shape dims, times weight (ones, flat).
    Paddle 3.2 has no layer for it; this follows torch.nn.RMSNorm, whose `eps` is also accepted (eps=None
    there meaning the machine epsilon)."""

    _UNSET = object()

    def __init__(self, normalized_shape, epsilon=1e-06, weight_attr=None, name=None, *, eps=_UNSET,
                 elementwise_affine=True):
        super().__init__()
        self._normalized_shape = _shape(self, normalized_shape)
        self._epsilon = epsilon if eps is self._UNSET else eps
        self._weight_attr, self._name = weight_attr, name
        self.weight = _scale(self, weight_attr if elementwise_affine else False, math.prod(self._normalized_shape))

    def forward(self, x):
        _check_trailing(self, x, self._normalized_shape)
        return F.rms_norm(x, self._normalized_shape, self.weight, self._epsilon)

    def extra_repr(self):
        return f"normalized_shape={self._normalized_shape}, epsilon={self._epsilon}"


class _BatchNormBase(Layer):
    """Per-channel normalisation: batch statistics in training (updating `_mean` and `_variance` with
    running = momentum * running + (1 - momentum) * batch), the running ones in eval; use_global_stats
    True/False forces one or the other. Subclasses give the data formats and the ranks they accept."""

    formats: dict = {}  # data_format -> input ranks

    def __init__(self, num_features, momentum=0.9, epsilon=1e-05, weight_attr=None, bias_attr=None,
                 data_format=None, use_global_stats=None, name=None):
        super().__init__()
        data_format = data_format or next(iter(self.formats))
        if data_format not in self.formats:
            raise ValueError(f"{type(self).__name__}: data_format must be one of "
                             f"{', '.join(map(repr, self.formats))}, got {data_format!r}")
        self._num_features = check_positive(self, "num_features", num_features)
        self._momentum, self._epsilon, self._data_format = momentum, epsilon, data_format
        self._use_global_stats, self._weight_attr, self._bias_attr, self._name = (use_global_stats, weight_attr,
                                                                                  bias_attr, name)
        self.weight = _scale(self, weight_attr, num_features)
        self.bias = _shift(self, bias_attr, num_features)
        self.register_buffer("_mean", oarlock.zeros([num_features], dtype=self._dtype))
        self.register_buffer("_variance", oarlock.ones([num_features], dtype=self._dtype))

    def forward(self, x):
        ranks = self.formats[self._data_format]
        channel = -1 if self._data_format[-1] == "C" and len(self._data_format) > 2 else 1
        check_input(self, x, lambda: f"a {rank_text(ranks)} {self._data_format} input with {self._num_features} "
                                     f"channels (num_features) on axis {channel}",
                    ranks=ranks, sizes={channel: self._num_features})
        return F.batch_norm(x, self._mean, self._variance, self.weight, self.bias, training=self.training,
                            momentum=self._momentum, epsilon=self._epsilon, data_format=self._data_format,
                            use_global_stats=self._use_global_stats)

    def extra_repr(self):
        text = f"num_features={self._num_features}, momentum={self._momentum}, epsilon={self._epsilon}"
        return text if self._data_format == next(iter(self.formats)) else f"{text}, data_format={self._data_format}"


class BatchNorm1D(_BatchNormBase):
    """Batch normalisation of [N, C] or [N, C, L] inputs (NCL; NLC puts the channels last)."""

    formats = {"NCL": (2, 3), "NC": (2, 3), "NLC": (2, 3)}


class BatchNorm2D(_BatchNormBase):
    """Batch normalisation of [N, C, H, W] inputs (or NHWC)."""

    formats = {"NCHW": (4,), "NHWC": (4,)}


class BatchNorm3D(_BatchNormBase):
    """Batch normalisation of [N, C, D, H, W] inputs (or NDHWC)."""

    formats = {"NCDHW": (5,), "NDHWC": (5,)}


class GroupNorm(Layer):
    """Normalise each group of num_channels // num_groups channels of each sample, then scale and shift
    per channel (weight ones, bias zeros, shape [num_channels])."""

    formats = ("NCL", "NCHW", "NCDHW", "NLC", "NHWC", "NDHWC")

    def __init__(self, num_groups, num_channels, epsilon=1e-05, weight_attr=None, bias_attr=None,
                 data_format="NCHW", name=None):
        super().__init__()
        self._num_groups = check_positive(self, "num_groups", num_groups)
        self._num_channels = check_positive(self, "num_channels", num_channels)
        if num_channels % num_groups:
            raise ValueError(f"GroupNorm: num_channels ({num_channels}) must be divisible by num_groups "
                             f"({num_groups})")
        if data_format not in self.formats:
            raise ValueError(f"GroupNorm: data_format must be one of {', '.join(map(repr, self.formats))}, "
                             f"got {data_format!r}")
        self._epsilon, self._data_format, self._weight_attr, self._bias_attr, self._name = (
            epsilon, data_format, weight_attr, bias_attr, name)
        self.weight = _scale(self, weight_attr, num_channels)
        self.bias = _shift(self, bias_attr, num_channels)

    def forward(self, x):
        channel = -1 if self._data_format[-1] == "C" else 1
        check_input(self, x, lambda: f"a 2-D to 5-D input with {self._num_channels} channels (num_channels) "
                                     f"on axis {channel}", ranks=(2, 3, 4, 5), sizes={channel: self._num_channels})
        return F.group_norm(x, self._num_groups, self._epsilon, self.weight, self.bias, self._data_format)

    def extra_repr(self):
        return f"num_groups={self._num_groups}, num_channels={self._num_channels}, epsilon={self._epsilon}"


EXPORTS = {"oarlock.nn": [LayerNorm, RMSNorm, BatchNorm1D, BatchNorm2D, BatchNorm3D, GroupNorm,
                          ("BatchNorm1d", BatchNorm1D), ("BatchNorm2d", BatchNorm2D), ("BatchNorm3d", BatchNorm3D)]}
