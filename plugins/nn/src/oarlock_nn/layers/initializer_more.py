"""nn.initializer.Bilinear and nn.initializer.set_global_initializer, as Paddle 3.2 has them.

Bilinear fills a [C_out, C_in, K, K] transposed-convolution weight with the bilinear upsampling kernel,
computed exactly as Paddle's: for flat index i, x = i mod K and y = (i / K) mod K with a true (float)
division, w = (1 - |x/f - c|) (1 - |y/f - c|), f = ceil(K/2), c = (2f - 1 - f mod 2) / (2f). (The float y is
Paddle's; it is kept so the weights are the same.)

set_global_initializer(weight_init, bias_init=None) sets the initializers that Layer.create_parameter uses
in place of a layer's default (a ParamAttr's own initializer still wins); None restores the defaults.
"""

from __future__ import annotations

import numpy as np

import oarlock
from oarlock_nn.layers.initializer import Initializer

_GLOBAL = {"weight": None, "bias": None}


class Bilinear(Initializer):
    """The bilinear upsampling kernel for a [C_out, C_in, K, K] weight."""

    def check(self, shape):
        if len(shape) != 4:
            raise ValueError(f"the tensor must be 4-D ([C_out, C_in, K, K]), got shape {list(shape)}")
        if shape[2] != shape[3]:
            raise ValueError(f"the kernel must be square (shape[2] == shape[3]), got shape {list(shape)}")

    def values(self, shape, dtype):
        size = shape[3]
        f = np.ceil(size / 2.0)
        c = (2 * f - 1 - f % 2) / (2.0 * f)
        i = np.arange(int(np.prod(shape)), dtype=np.float64)
        x = i % size
        y = (i / size) % size
        weight = ((1 - np.abs(x / f - c)) * (1 - np.abs(y / f - c))).astype(np.float32).reshape(shape)
        return oarlock.cast(oarlock.to_tensor(weight), dtype)


def set_global_initializer(weight_init, bias_init=None):
    """The initializers for every parameter created from now on without a ParamAttr initializer (None: the
    layers' own defaults again)."""
    for name, init in (("weight_init", weight_init), ("bias_init", bias_init)):
        if init is not None and not isinstance(init, Initializer):
            raise TypeError(f"set_global_initializer: {name} must be an Initializer or None, got "
                            f"{type(init).__name__}")
    _GLOBAL["weight"], _GLOBAL["bias"] = weight_init, bias_init


def global_initializer(is_bias):
    """The initializer set_global_initializer gave for weights or biases, or None."""
    return _GLOBAL["bias" if is_bias else "weight"]


EXPORTS = {"oarlock.nn.initializer": [Bilinear, set_global_initializer]}
