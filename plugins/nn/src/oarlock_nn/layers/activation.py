"""Activation layers: ReLU, ReLU6, GELU, SiLU (Paddle's Silu), Swish, Hardswish, Hardsigmoid, Sigmoid, Tanh,
Softmax, LeakyReLU, ELU, each a thin wrapper over its oarlock.nn.functional op (Paddle's constructor arguments;
any input shape)."""

from __future__ import annotations

from oarlock.nn import functional as F
from oarlock_nn.layers.base import Layer
from oarlock_nn.layers.common import check_input


class _Activation(Layer):
    """An activation with no arguments: `function` names its functional op."""

    function = ""

    def __init__(self, name=None):
        super().__init__()
        self._name = name

    def forward(self, x):
        return getattr(F, self.function)(x)


class ReLU(_Activation):
    """max(x, 0)."""

    function = "relu"


class SiLU(_Activation):
    """x * sigmoid(x) (also called swish)."""

    function = "silu"


class ReLU6(_Activation):
    """min(max(x, 0), 6)."""

    function = "relu6"


class Swish(_Activation):
    """x * sigmoid(x) (Paddle's own layer; SiLU computes the same)."""

    function = "swish"


class Hardswish(_Activation):
    """x * relu6(x + 3) / 6."""

    function = "hardswish"


class Hardsigmoid(_Activation):
    """clip(x / 6 + 0.5, 0, 1): Paddle's layer uses F.hardsigmoid's default slope and offset."""

    function = "hardsigmoid"


class Silu(Layer):
    """Paddle's name of SiLU, with its `inplace` flag (passed on to F.silu)."""

    def __init__(self, inplace=False, name=None):
        super().__init__()
        self._inplace, self._name = inplace, name

    def forward(self, x):
        return F.silu(x, inplace=self._inplace)


class Sigmoid(_Activation):
    """1 / (1 + exp(-x))."""

    function = "sigmoid"


class Tanh(_Activation):
    """tanh(x)."""

    function = "tanh"


class GELU(Layer):
    """x * Phi(x); approximate=True (or 'tanh') uses the tanh approximation."""

    def __init__(self, approximate=False, name=None):
        super().__init__()
        self._approximate, self._name = approximate, name

    def forward(self, x):
        return F.gelu(x, approximate=self._approximate)

    def extra_repr(self):
        return f"approximate={self._approximate}"


class Softmax(Layer):
    """exp(x) / sum(exp(x)) along `axis`."""

    def __init__(self, axis=-1, name=None):
        super().__init__()
        self._axis, self._name = axis, name

    def forward(self, x):
        need = self._axis + 1 if self._axis >= 0 else -self._axis  # a 0-d tensor takes axis 0 or -1 (the op's rule)
        if need > 1:
            check_input(self, x, lambda: f"an input of at least {need} dimensions (axis={self._axis})", min_rank=need)
        return F.softmax(x, axis=self._axis)

    def extra_repr(self):
        return f"axis={self._axis}"


class LeakyReLU(Layer):
    """x where x >= 0, negative_slope * x below."""

    def __init__(self, negative_slope=0.01, name=None):
        super().__init__()
        self._negative_slope, self._name = negative_slope, name

    def forward(self, x):
        return F.leaky_relu(x, negative_slope=self._negative_slope)

    def extra_repr(self):
        return f"negative_slope={self._negative_slope}"


class ELU(Layer):
    """x where x > 0, alpha * (exp(x) - 1) at and below 0."""

    def __init__(self, alpha=1.0, name=None):
        super().__init__()
        self._alpha, self._name = alpha, name

    def forward(self, x):
        return F.elu(x, alpha=self._alpha)

    def extra_repr(self):
        return f"alpha={self._alpha}"


EXPORTS = {"oarlock.nn": [ReLU, ReLU6, GELU, SiLU, Silu, Swish, Hardswish, Hardsigmoid, Sigmoid, Tanh, Softmax,
                          LeakyReLU, ELU]}
