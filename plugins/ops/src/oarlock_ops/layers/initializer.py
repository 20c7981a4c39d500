"""Parameter initializers (Paddle's oarlock.nn.initializer.*) and ParamAttr.

An initializer is called on a tensor and fills it in place from the device's
random generator, so `oarlock.seed(n)` makes model initialisation
reproducible. Fan-in/fan-out follow Paddle: for a Linear weight [in, out],
fan_in = in; for a conv weight [out, in/groups, *k], fan_in = in/groups * prod(k).
"""

from __future__ import annotations

import math

import oarlock


def fans(shape) -> tuple[int, int]:
    """(fan_in, fan_out) of a weight of this shape, Paddle's convention."""
    shape = list(shape)
    if not shape:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    if len(shape) == 2:
        return shape[0], shape[1]
    receptive = math.prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive


class Initializer:
    """Base class: `init(tensor)` fills tensor in place and returns it."""

    def __call__(self, tensor):
        values = self.values(tensor.shape, tensor.dtype)
        return tensor.set_value(values)

    def values(self, shape, dtype):
        raise NotImplementedError


class Constant(Initializer):
    def __init__(self, value=0.0):
        self.value = value

    def values(self, shape, dtype):
        return oarlock.full(shape, self.value, dtype=dtype)


class Normal(Initializer):
    def __init__(self, mean=0.0, std=1.0):
        self.mean, self.std = mean, std

    def values(self, shape, dtype):
        return oarlock.randn(shape, dtype="float32") * self.std + self.mean


class TruncatedNormal(Initializer):
    """Normal(mean, std) redrawn outside [a, b] (default: two standard deviations)."""

    def __init__(self, mean=0.0, std=1.0, a=-2.0, b=2.0):
        self.mean, self.std, self.a, self.b = mean, std, a, b

    def values(self, shape, dtype):
        out = oarlock.randn(shape, dtype="float32")
        for _ in range(100):
            bad = (out < self.a) | (out > self.b)
            if not bool(bad.any()):
                break
            out = oarlock.where(bad, oarlock.randn(shape, dtype="float32"), out)
        return out * self.std + self.mean


class Uniform(Initializer):
    def __init__(self, low=-1.0, high=1.0):
        self.low, self.high = low, high

    def values(self, shape, dtype):
        return oarlock.uniform(shape, dtype="float32", min=self.low, max=self.high)


class XavierUniform(Initializer):
    def __init__(self, fan_in=None, fan_out=None, gain=1.0):
        self.fan_in, self.fan_out, self.gain = fan_in, fan_out, gain

    def values(self, shape, dtype):
        fan_in, fan_out = fans(shape)
        limit = self.gain * math.sqrt(6.0 / ((self.fan_in or fan_in) + (self.fan_out or fan_out)))
        return oarlock.uniform(shape, dtype="float32", min=-limit, max=limit)


class XavierNormal(Initializer):
    def __init__(self, fan_in=None, fan_out=None, gain=1.0):
        self.fan_in, self.fan_out, self.gain = fan_in, fan_out, gain

    def values(self, shape, dtype):
        fan_in, fan_out = fans(shape)
        std = self.gain * math.sqrt(2.0 / ((self.fan_in or fan_in) + (self.fan_out or fan_out)))
        return oarlock.randn(shape, dtype="float32") * std


class KaimingUniform(Initializer):
    def __init__(self, fan_in=None, negative_slope=0.0, nonlinearity="relu"):
        self.fan_in, self.negative_slope, self.nonlinearity = fan_in, negative_slope, nonlinearity

    def values(self, shape, dtype):
        gain = math.sqrt(2.0 / (1 + self.negative_slope ** 2)) if self.nonlinearity != "linear" else 1.0
        limit = gain * math.sqrt(3.0 / (self.fan_in or fans(shape)[0]))
        return oarlock.uniform(shape, dtype="float32", min=-limit, max=limit)


class KaimingNormal(Initializer):
    def __init__(self, fan_in=None, negative_slope=0.0, nonlinearity="relu"):
        self.fan_in, self.negative_slope, self.nonlinearity = fan_in, negative_slope, nonlinearity

    def values(self, shape, dtype):
        gain = math.sqrt(2.0 / (1 + self.negative_slope ** 2)) if self.nonlinearity != "linear" else 1.0
        return oarlock.randn(shape, dtype="float32") * (gain / math.sqrt(self.fan_in or fans(shape)[0]))


class Assign(Initializer):
    def __init__(self, value):
        self.value = value

    def values(self, shape, dtype):
        return self.value


class ParamAttr:
    """Paddle's ParamAttr: name, initializer, learning-rate multiplier, regularizer, trainable, need_clip."""

    def __init__(self, name=None, initializer=None, learning_rate=1.0, regularizer=None, trainable=True,
                 do_model_average=False, need_clip=True):
        self.name, self.initializer, self.learning_rate = name, initializer, learning_rate
        self.regularizer, self.trainable, self.need_clip = regularizer, trainable, need_clip
        self.do_model_average = do_model_average

    @staticmethod
    def resolve(attr):
        """ParamAttr from what layers accept: None, False (no parameter), a ParamAttr, a name, an initializer."""
        if attr is None or attr is True:
            return ParamAttr()
        if attr is False:
            return None
        if isinstance(attr, ParamAttr):
            return attr
        if isinstance(attr, str):
            return ParamAttr(name=attr)
        if isinstance(attr, Initializer):
            return ParamAttr(initializer=attr)
        raise TypeError(f"weight_attr/bias_attr must be None, False, a ParamAttr, a name or an initializer, "
                        f"got {type(attr).__name__}")


INITIALIZERS = (Constant, Normal, TruncatedNormal, Uniform, XavierUniform, XavierNormal, KaimingUniform,
                KaimingNormal, Assign)
