"""Normalisation layers: LayerNorm, RMSNorm, BatchNorm1D/2D/3D (torch-style aliases BatchNorm1d/2d/3d), the
legacy BatchNorm (act=, is_test=, data_layout=) and GroupNorm, with Paddle's constructor signatures, parameter
layouts and state-dict keys: LayerNorm's weight and bias are flat [prod(normalized_shape)]. Scales start at
one, shifts at zero; weight_attr/bias_attr=False leaves the parameter out.

BatchNorm keeps its running statistics `_mean` and `_variance` as Paddle does: parameters created with
trainable=False (so stop_gradient is True), listed by named_parameters() after weight and bias. Optimizers
update only parameters that take gradients, so the statistics change only through the forward pass.
"""

from __future__ import annotations

import math
import numbers

from oarlock import Tensor
from oarlock.nn import functional as F
from oarlock_nn.layers.base import Layer
from oarlock_nn.layers.common import check_input, check_positive, rank_text
from oarlock_nn.layers.initializer import Constant, ParamAttr


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


def _statistic(layer, size, value, name, model_average=True):
    """A running statistic as Paddle makes it: a parameter that takes no gradient (trainable=False)."""
    attr = ParamAttr(name=name, initializer=Constant(value), trainable=False, do_model_average=model_average)
    return layer.create_parameter([size], attr=attr)


def _running_statistics(layer, size, mean_name=None, variance_name=None, model_average=True):
    layer._mean = _statistic(layer, size, 0.0, mean_name, model_average)
    layer._variance = _statistic(layer, size, 1.0, variance_name, model_average)


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
        _running_statistics(self, num_features, *((name + "_mean", name + "_variance") if name else ()))

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


class BatchNorm(Layer):
    """Paddle's legacy BatchNorm: any 2-D to 5-D input with the channels on axis 1 (data_layout 'NCHW') or last
    ('NHWC'); `act` names an activation of oarlock.nn.functional applied to the result; is_test=True starts
    in eval mode; trainable_statistics=True normalises with the batch statistics in eval mode too."""

    layouts = ("NCHW", "NHWC")
    formats = {("NCHW", 2): "NC", ("NCHW", 3): "NCL", ("NCHW", 4): "NCHW", ("NCHW", 5): "NCDHW",
               ("NHWC", 2): "NC", ("NHWC", 3): "NLC", ("NHWC", 4): "NHWC", ("NHWC", 5): "NDHWC"}

    def __init__(self, num_channels, act=None, is_test=False, momentum=0.9, epsilon=1e-05, param_attr=None,
                 bias_attr=None, dtype="float32", data_layout="NCHW", in_place=False, moving_mean_name=None,
                 moving_variance_name=None, do_model_average_for_mean_and_var=True, use_global_stats=False,
                 trainable_statistics=False):
        super().__init__(dtype="float32" if str(dtype) in ("float16", "paddle.float16") else dtype)
        self._num_channels = check_positive(self, "num_channels", num_channels)
        if data_layout not in self.layouts:
            raise ValueError(f"BatchNorm: data_layout must be 'NCHW' or 'NHWC', got {data_layout!r}")
        if act is not None and not (isinstance(act, str) and callable(getattr(F, act, None))):
            raise ValueError(f"BatchNorm: act must be None or the name of an oarlock.nn.functional activation "
                             f"(e.g. 'relu', 'sigmoid', 'tanh'), got {act!r}")
        self._act, self._param_attr, self._bias_attr, self._in_place = act, param_attr, bias_attr, in_place
        self._momentum, self._epsilon, self._data_layout, self._is_test = momentum, epsilon, data_layout, is_test
        self._use_global_stats, self._trainable_statistics = use_global_stats, trainable_statistics
        self.weight = _scale(self, param_attr, num_channels)
        self.bias = _shift(self, bias_attr, num_channels)
        _running_statistics(self, num_channels, moving_mean_name, moving_variance_name,
                            do_model_average_for_mean_and_var)
        self.training = not is_test

    def forward(self, input):
        channel = 1 if self._data_layout == "NCHW" else -1
        check_input(self, input, lambda: f"a 2-D to 5-D {self._data_layout} input with {self._num_channels} "
                                         f"channels (num_channels) on axis {channel}",
                    ranks=(2, 3, 4, 5), sizes={channel: self._num_channels})
        # Paddle's kernel: running statistics when use_global_stats or (eval and not trainable_statistics)
        global_stats = True if self._use_global_stats else (
            False if self._trainable_statistics and not self.training else None)
        out = F.batch_norm(input, self._mean, self._variance, self.weight, self.bias, training=self.training,
                           momentum=self._momentum, epsilon=self._epsilon,
                           data_format=self.formats[self._data_layout, len(input.shape)],
                           use_global_stats=global_stats)
        return out if self._act is None else getattr(F, self._act)(out)

    def extra_repr(self):
        text = f"num_channels={self._num_channels}, momentum={self._momentum}, epsilon={self._epsilon}"
        return text if self._act is None else f"{text}, act={self._act}"


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


EXPORTS = {"oarlock.nn": [LayerNorm, RMSNorm, BatchNorm, BatchNorm1D, BatchNorm2D, BatchNorm3D, GroupNorm,
                          ("BatchNorm1d", BatchNorm1D), ("BatchNorm2d", BatchNorm2D), ("BatchNorm3d", BatchNorm3D)]}
