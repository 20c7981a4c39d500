"""Parameter initializers (Paddle's oarlock.nn.initializer.*), calculate_gain and ParamAttr.

An initializer is called on a tensor and fills it in place from the device's
random generator, so `oarlock.seed(n)` makes model initialisation
reproducible. Fan-in/fan-out follow Paddle: for a Linear weight [in, out],
fan_in = in; for a conv weight [out, in/groups, *k], fan_in = in/groups * prod(k).
Samples are drawn in float32 (float64 for a float64 tensor) and cast to the
tensor's dtype. Orthogonal factors its draw with numpy's QR on the host.
"""

from __future__ import annotations

import contextlib
import math
import numbers

import numpy as np

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


# calculate_gain's table: nonlinearity -> gain (leaky_relu's depends on its negative slope): torch's names and
# Paddle's extra convNd_transpose spellings
_GAINS = {"linear": 1.0, "sigmoid": 1.0, "tanh": 5.0 / 3, "relu": math.sqrt(2.0), "leaky_relu": None, "selu": 0.75,
          **{f"conv{n}d": 1.0 for n in (1, 2, 3)}, **{f"conv_transpose{n}d": 1.0 for n in (1, 2, 3)},
          **{f"conv{n}d_transpose": 1.0 for n in (1, 2, 3)}}


@contextlib.contextmanager
def named(where):
    """Prefix `where` (the class or function the caller used) to the ValueErrors raised inside: the checks
    below state only the problem, so initializer classes and nn.init functions share them."""
    try:
        yield
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _gain(nonlinearity, param=None, param_name="param"):
    if nonlinearity not in _GAINS:
        raise ValueError(f"nonlinearity must be one of {', '.join(map(repr, _GAINS))}; got {nonlinearity!r}")
    if param is not None and not isinstance(param, numbers.Real):
        raise ValueError(f"{param_name} (leaky_relu's negative slope) must be a number or None, got "
                         f"{type(param).__name__} {param!r}")
    if nonlinearity != "leaky_relu":
        return _GAINS[nonlinearity]
    slope = 0.01 if param is None else float(param)
    return math.sqrt(2.0 / (1 + slope ** 2))


def calculate_gain(nonlinearity, param=None):
    """The recommended gain for a nonlinearity (torch's and Paddle's table): 1 for linear, sigmoid and the
    convolutions, 5/3 for tanh, sqrt(2) for relu, sqrt(2 / (1 + param^2)) for leaky_relu (param, its
    negative slope, defaults to 0.01), 3/4 for selu."""
    with named("oarlock.nn.init.calculate_gain()"):
        return _gain(nonlinearity, param)


def _sample_dtype(dtype):
    """Draws are float32 (float64 for float64 tensors): narrow floats have no random kernels of their own."""
    return "float64" if oarlock.dtypes.convert_dtype(dtype) == "float64" else "float32"


class Initializer:
    """Base class: `init(tensor)` fills tensor in place and returns it. Subclasses check their arguments
    in __init__ and compute the values in values(shape, dtype), under `self.named()` so that errors name
    the class -- or the nn.init function, which makes its initializer with for_function()."""

    _where = None

    @classmethod
    def for_function(cls, where, *args, **kwargs):
        """An initializer whose errors name the function `where` rather than the class."""
        init = cls.__new__(cls)
        init._where = where
        init.__init__(*args, **kwargs)
        return init

    def named(self):
        return named(self._where or type(self).__name__)

    def __call__(self, tensor):
        if not isinstance(tensor, oarlock.Tensor):
            raise TypeError(f"{self._where or type(self).__name__}: expected a Tensor to fill, got "
                            f"{type(tensor).__name__}")
        with self.named():
            self.check(tensor.shape)
            if 0 in tensor.shape:  # nothing to fill (and fans of zero would divide by zero)
                return tensor
            values = self.values(tensor.shape, tensor.dtype)
        return tensor.set_value(values)

    def check(self, shape):
        """Raise a ValueError (stating the problem only) unless this initializer can fill that shape."""

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
        return oarlock.randn(shape, dtype=_sample_dtype(dtype)) * self.std + self.mean


def _normal_cdf(x):
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


class TruncatedNormal(Initializer):
    """Normal(mean, std) restricted to [a, b] -- absolute bounds, as in Paddle and torch (the defaults
    -2, 2 are two standard deviations only when std is 1). Rejection sampling: each round draws enough
    normals for the values still missing, given the probability that [a, b] holds."""

    _LEAST = 1e-4  # below this probability of landing in [a, b], rejection sampling takes too long

    def __init__(self, mean=0.0, std=1.0, a=-2.0, b=2.0):
        with self.named():
            if not std > 0:
                raise ValueError(f"std must be positive, got {std!r}")
            if not a < b:
                raise ValueError(f"the bounds must satisfy a < b, got a={a!r}, b={b!r}")
            lo, hi = (a - mean) / std, (b - mean) / std
            if _normal_cdf(hi) - _normal_cdf(lo) < self._LEAST:
                raise ValueError(f"[a, b] = [{a}, {b}] holds only {_normal_cdf(hi) - _normal_cdf(lo):.3g} of "
                                 f"Normal(mean={mean}, std={std}), too little to sample; move mean towards [a, b]")
        self.mean, self.std, self.a, self.b = mean, std, a, b
        self._standard = (lo, hi)  # the bounds for a standard normal

    def values(self, shape, dtype):
        (lo, hi), sample = self._standard, _sample_dtype(dtype)
        inside = _normal_cdf(hi) - _normal_cdf(lo)
        need, kept = math.prod(shape), []
        while need:
            draws = oarlock.randn([min(int(need / inside * 1.1) + 64, 1 << 24)], dtype=sample).numpy()
            good = draws[(draws >= lo) & (draws <= hi)][:need]
            kept.append(good)
            need -= good.size
        # clip: mean + std * z may round just past a bound
        return np.clip(np.concatenate(kept).reshape(shape) * self.std + self.mean, self.a, self.b)


class Uniform(Initializer):
    def __init__(self, low=-1.0, high=1.0):
        self.low, self.high = low, high

    def values(self, shape, dtype):
        return oarlock.uniform(shape, dtype=_sample_dtype(dtype), min=self.low, max=self.high)


class _Xavier(Initializer):
    """Glorot initialisation: variance gain^2 * 2 / (fan_in + fan_out), the fans the weight's unless given."""

    def __init__(self, fan_in=None, fan_out=None, gain=1.0):
        self.fan_in, self.fan_out, self.gain = fan_in, fan_out, gain

    def std(self, shape):
        fan_in, fan_out = fans(shape)
        return self.gain * math.sqrt(2.0 / ((self.fan_in or fan_in) + (self.fan_out or fan_out)))


class XavierUniform(_Xavier):
    """Uniform(-limit, limit) with limit = sqrt(3) * std (the same variance)."""

    def values(self, shape, dtype):
        limit = math.sqrt(3.0) * self.std(shape)
        return oarlock.uniform(shape, dtype=_sample_dtype(dtype), min=-limit, max=limit)


class XavierNormal(_Xavier):
    def values(self, shape, dtype):
        return oarlock.randn(shape, dtype=_sample_dtype(dtype)) * self.std(shape)


class _Kaiming(Initializer):
    """He initialisation: std = gain / sqrt(fan), gain = calculate_gain(nonlinearity, negative_slope) and fan
    the fan-in (mode='fan_in': the given fan_in, else the weight's) or the weight's fan-out."""

    def __init__(self, fan_in=None, negative_slope=0.0, nonlinearity="relu", mode="fan_in"):
        with self.named():
            if mode not in ("fan_in", "fan_out"):
                raise ValueError(f"mode must be 'fan_in' or 'fan_out', got {mode!r}")
            if mode == "fan_out" and fan_in is not None:
                raise ValueError(f"fan_in={fan_in!r} conflicts with mode='fan_out'; leave fan_in None")
            # nn.init's kaiming functions call the negative slope `a`
            self.gain = _gain(nonlinearity, negative_slope, "a" if self._where else "negative_slope")
        self.fan_in, self.negative_slope, self.nonlinearity, self.mode = fan_in, negative_slope, nonlinearity, mode

    def std(self, shape):
        fan_in, fan_out = fans(shape)
        return self.gain / math.sqrt(fan_out if self.mode == "fan_out" else self.fan_in or fan_in)


class KaimingUniform(_Kaiming):
    """Uniform(-limit, limit) with limit = sqrt(3) * std (the same variance)."""

    def values(self, shape, dtype):
        limit = math.sqrt(3.0) * self.std(shape)
        return oarlock.uniform(shape, dtype=_sample_dtype(dtype), min=-limit, max=limit)


class KaimingNormal(_Kaiming):
    def values(self, shape, dtype):
        return oarlock.randn(shape, dtype=_sample_dtype(dtype)) * self.std(shape)


class Dirac(Initializer):
    """The identity convolution for a [out, in, *k] weight (3-D to 5-D): within each of `groups` blocks of
    out/groups output channels, channel d passes input channel d through the kernel's centre."""

    def __init__(self, groups=1):
        if not isinstance(groups, numbers.Integral) or isinstance(groups, bool) or groups < 1:
            with self.named():
                raise ValueError(f"groups must be a positive int, got {groups!r}")
        self.groups = int(groups)

    def check(self, shape):
        if len(shape) not in (3, 4, 5):
            raise ValueError(f"the tensor must be 3-D, 4-D or 5-D (a convolution weight), got shape {list(shape)}")
        if shape[0] % self.groups:
            raise ValueError(f"dimension 0 of the tensor (shape {list(shape)}) is not divisible by "
                             f"groups={self.groups}")

    def values(self, shape, dtype):
        out = np.zeros(shape)
        per_group = shape[0] // self.groups
        centre = tuple(k // 2 for k in shape[2:])
        for g in range(self.groups):
            for d in range(min(per_group, shape[1])):
                out[(g * per_group + d, d) + centre] = 1.0
        return out


class Orthogonal(Initializer):
    """A (semi-)orthogonal matrix times gain, over the tensor viewed as [shape[0], prod(shape[1:])]: its
    rows are orthonormal when there are no more rows than columns, else its columns (the Q of a QR
    factorisation of a normal draw, signs fixed by R's diagonal so that Q is uniformly distributed)."""

    def __init__(self, gain=1.0):
        self.gain = gain

    def check(self, shape):
        if len(shape) < 2:
            raise ValueError(f"the tensor must have at least 2 dimensions, got shape {list(shape)}")

    def values(self, shape, dtype):
        rows, cols = shape[0], math.prod(shape[1:])
        flat = oarlock.randn([rows, cols], dtype=_sample_dtype(dtype)).numpy().astype(np.float64)
        tall = flat if rows >= cols else flat.T
        q, r = np.linalg.qr(tall)
        q *= np.where(np.diag(r) < 0, -1.0, 1.0)
        return (q if rows >= cols else q.T).reshape(shape) * self.gain


class Eye(Initializer):
    """The identity matrix (ones on the main diagonal of a 2-D tensor, also a non-square one): nn.init.eye_'s.
    Paddle has no Eye initializer class, so it is not exported."""

    def check(self, shape):
        if len(shape) != 2:
            raise ValueError(f"the tensor must be 2-D, got shape {list(shape)}")

    def values(self, shape, dtype):
        return oarlock.eye(shape[0], shape[1], dtype=dtype)


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


# exported into oarlock.nn.initializer (calculate_gain too, as in Paddle)
INITIALIZERS = (Constant, Normal, TruncatedNormal, Uniform, XavierUniform, XavierNormal, KaimingUniform,
                KaimingNormal, Dirac, Orthogonal, Assign, calculate_gain)
