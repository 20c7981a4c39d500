"""The rest of Paddle 3.2's activation layers: LogSigmoid, Softsign, Tanhshrink, Mish, CELU, SELU,
Softplus, Softshrink, Hardshrink, Hardtanh, ThresholdedReLU, GLU, Maxout, RReLU, LogSoftmax, Softmax2D and
PReLU (the one with a parameter). Each keeps Paddle's constructor arguments and calls its
oarlock.nn.functional function with them."""

from __future__ import annotations

import copy

from oarlock.nn import functional as F
from oarlock_nn.layers.base import Layer
from oarlock_nn.layers.common import check_input, check_positive
from oarlock_nn.layers.initializer import Constant, ParamAttr


class _Functional(Layer):
    """A layer that is `function(x, **attributes)`; subclasses' __init__ give the attributes."""

    function = ""

    def _keep(self, name=None, **attributes):
        self._attributes, self._name = attributes, name

    def forward(self, x):
        return getattr(F, self.function)(x, **self._attributes)

    def extra_repr(self):
        return ", ".join(f"{k}={v}" for k, v in self._attributes.items())


class LogSigmoid(_Functional):
    """log(sigmoid(x))."""

    function = "log_sigmoid"

    def __init__(self, name=None):
        super().__init__()
        self._keep(name)


class Softsign(_Functional):
    """x / (1 + |x|)."""

    function = "softsign"

    def __init__(self, name=None):
        super().__init__()
        self._keep(name)


class Tanhshrink(_Functional):
    """x - tanh(x)."""

    function = "tanhshrink"

    def __init__(self, name=None):
        super().__init__()
        self._keep(name)


class Mish(_Functional):
    """x * tanh(softplus(x))."""

    function = "mish"

    def __init__(self, name=None):
        super().__init__()
        self._keep(name)


class CELU(_Functional):
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1))."""

    function = "celu"

    def __init__(self, alpha=1.0, name=None):
        super().__init__()
        if alpha == 0:
            raise ValueError("CELU: alpha must not be 0")
        self._keep(name, alpha=alpha)


class SELU(_Functional):
    """scale * (x if x > 0 else alpha * (exp(x) - 1))."""

    function = "selu"

    def __init__(self, scale=1.0507009873554804934193349852946, alpha=1.6732632423543772848170429916717, name=None):
        super().__init__()
        self._keep(name, scale=scale, alpha=alpha)


class Softplus(_Functional):
    """log(1 + exp(beta * x)) / beta, x itself where beta * x > threshold."""

    function = "softplus"

    def __init__(self, beta=1, threshold=20, name=None):
        super().__init__()
        self._keep(name, beta=beta, threshold=threshold)


class Softshrink(_Functional):
    """x - threshold above threshold, x + threshold below -threshold, 0 between."""

    function = "softshrink"

    def __init__(self, threshold=0.5, name=None):
        super().__init__()
        if threshold < 0:
            raise ValueError(f"Softshrink: threshold must be >= 0, got {threshold!r}")
        self._keep(name, threshold=threshold)


class Hardshrink(_Functional):
    """x where |x| > threshold, else 0."""

    function = "hardshrink"

    def __init__(self, threshold=0.5, name=None):
        super().__init__()
        self._keep(name, threshold=threshold)


class Hardtanh(_Functional):
    """x clipped to [min, max]."""

    function = "hardtanh"

    def __init__(self, min=-1.0, max=1.0, name=None):  # noqa: A002 (Paddle's argument names)
        super().__init__()
        self._keep(name, min=min, max=max)


class ThresholdedReLU(_Functional):
    """x where x > threshold, else value."""

    function = "thresholded_relu"

    def __init__(self, threshold=1.0, value=0.0, name=None):
        super().__init__()
        self._keep(name, threshold=threshold, value=value)


class GLU(_Functional):
    """a * sigmoid(b) for the two halves a, b of x along axis."""

    function = "glu"

    def __init__(self, axis=-1, name=None):
        super().__init__()
        self._keep(name, axis=axis)


class Maxout(_Functional):
    """The maximum over each run of `groups` channels."""

    function = "maxout"

    def __init__(self, groups, axis=1, name=None):
        super().__init__()
        self._keep(name, groups=groups, axis=axis)


class RReLU(_Functional):
    """Randomized leaky ReLU: slopes ~ U(lower, upper) in training, their mean in eval."""

    function = "rrelu"

    def __init__(self, lower=1.0 / 8.0, upper=1.0 / 3.0, name=None):
        super().__init__()
        self._keep(name, lower=lower, upper=upper)

    def forward(self, x):
        return F.rrelu(x, training=self.training, **self._attributes)


class LogSoftmax(_Functional):
    """log(softmax(x)) along axis."""

    function = "log_softmax"

    def __init__(self, axis=-1, name=None):
        super().__init__()
        self._keep(name, axis=axis)


class Softmax2D(Layer):
    """softmax over the channel axis (-3) of a 3-D [C, H, W] or 4-D [N, C, H, W] input."""

    def __init__(self, name=None):
        super().__init__()
        self._name = name

    def forward(self, x):
        check_input(self, x, "a 3-D [C, H, W] or 4-D [N, C, H, W] input", ranks=(3, 4))
        return F.softmax(x, axis=-3)


class PReLU(Layer):
    """x where x > 0, weight * x elsewhere; the weight (num_parameters values: 1, or one per channel, set to
    `init`) is the parameter `_weight`, Paddle's name for it in state_dict."""

    def __init__(self, num_parameters=1, init=0.25, weight_attr=None, data_format="NCHW", name=None):
        super().__init__()
        self._num_parameters = check_positive(self, "num_parameters", num_parameters)
        self._init, self._data_format, self._name = init, data_format, name
        attr = ParamAttr.resolve(weight_attr)
        if attr is not None and attr.initializer is None:   # a copy: the caller's ParamAttr stays as given
            attr = copy.copy(attr)
            attr.initializer = Constant(init)
        self._weight = self.create_parameter([num_parameters], attr=attr)

    def forward(self, x):
        return F.prelu(x, self._weight, data_format=self._data_format)

    def extra_repr(self):
        return f"num_parameters={self._num_parameters}, data_format={self._data_format}, init={self._init}"


EXPORTS = {"oarlock.nn": [LogSigmoid, Softsign, Tanhshrink, Mish, CELU, SELU, Softplus, Softshrink, Hardshrink,
                          Hardtanh, ThresholdedReLU, GLU, Maxout, RReLU, LogSoftmax, Softmax2D, PReLU]}
