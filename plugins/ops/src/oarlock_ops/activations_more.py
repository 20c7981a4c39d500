"""The rest of Paddle 3.2's activations in oarlock.nn.functional.

Elementwise ones are ops (a kernel and a gradient rule each): log_sigmoid, softsign, tanhshrink, celu,
selu, softplus, softshrink, hardshrink, hardtanh (+ hardtanh_), mish, thresholded_relu
(+ thresholded_relu_). Their kernels are written so no branch overflows (softplus, log_sigmoid and mish
go through log1p(exp(-|z|))), and the gradients follow Paddle's kernels at the kinks: softshrink,
hardshrink and hardtanh pass the gradient only strictly inside their linear pieces.

The others are Python functions over public ops, so autograd needs nothing new: glu, maxout, prelu,
rrelu (random slopes in training, their mean in eval, as Paddle) and gumbel_softmax (hard=True is the
straight-through estimator: a one-hot forward with the soft sample's gradient).
"""

from __future__ import annotations

import numbers

import oarlock
from oarlock_ops._inplace import define_variants
from oarlock_ops.unary import _in_float32

SELU_SCALE = 1.0507009873554804934193349852946
SELU_ALPHA = 1.6732632423543772848170429916717
MISH_THRESHOLD = 20.0  # Paddle's mish: softplus(x) is x itself above this
GUMBEL_TINY = 1e-20  # keeps both logs of gumbel_softmax's noise finite (normal in float32 and bfloat16)


# -- kernels (xp arrays) ------------------------------------------------------------------------------

def _softplus_of(xp, z):
    """log(1 + exp(z)) without overflow: max(z, 0) + log1p(exp(-|z|))."""
    return xp.maximum(z, 0) + xp.log1p(xp.exp(-xp.abs(z)))


def _log_sigmoid(xp, x):
    return -_softplus_of(xp, -x)


def _softplus(xp, x, beta=1.0, threshold=20.0):
    z = x * beta
    return xp.where(z > threshold, x, _softplus_of(xp, z) / beta)


def _celu(xp, x, alpha=1.0):
    return xp.where(x > 0, x, alpha * xp.expm1(xp.minimum(x, 0) / alpha))


def _selu(xp, x, scale=SELU_SCALE, alpha=SELU_ALPHA):
    return scale * xp.where(x > 0, x, alpha * xp.expm1(xp.minimum(x, 0)))


def _softshrink(xp, x, threshold=0.5):
    return xp.where(x > threshold, x - threshold, xp.where(x < -threshold, x + threshold, 0)).astype(x.dtype)


def _hardshrink(xp, x, threshold=0.5):
    return xp.where(xp.abs(x) > threshold, x, 0).astype(x.dtype)


def _hardtanh(xp, x, min=-1.0, max=1.0):  # noqa: A002 (Paddle's argument names)
    return xp.minimum(xp.maximum(x, min), max).astype(x.dtype)


def _mish(xp, x):
    return x * xp.tanh(xp.where(x > MISH_THRESHOLD, x, _softplus_of(xp, x)))


def _thresholded_relu(xp, x, threshold=1.0, value=0.0):
    return xp.where(x > threshold, x, value).astype(x.dtype)


# -- gradient rules (Tensors) -------------------------------------------------------------------------

def _saved_x(derivative):
    """A rule g * derivative(x, attrs) for an op that saves x."""
    return lambda ctx, g: g * derivative(ctx.saved[0], ctx.attrs)


def _mish_slope(x, attrs):
    sp = oarlock.where(x > MISH_THRESHOLD, x, oarlock.nn.functional.softplus(x))
    t = oarlock.tanh(sp)
    return t + x * (1 - t * t) * oarlock.sigmoid(x) * (x <= MISH_THRESHOLD)


SLOPES = {
    "log_sigmoid": lambda x, a: oarlock.sigmoid(-x),
    "softsign": lambda x, a: 1 / oarlock.square(1 + oarlock.abs(x)),
    "tanhshrink": lambda x, a: oarlock.square(oarlock.tanh(x)),
    "celu": lambda x, a: oarlock.where(x > 0, oarlock.ones_like(x), oarlock.exp(oarlock.minimum(x, 0.0) / a["alpha"])),
    "selu": lambda x, a: a["scale"] * oarlock.where(x > 0, oarlock.ones_like(x),
                                                    a["alpha"] * oarlock.exp(oarlock.minimum(x, 0.0))),
    "softplus": lambda x, a: oarlock.where(x * a["beta"] > a["threshold"], oarlock.ones_like(x),
                                           oarlock.sigmoid(x * a["beta"])),
    "softshrink": lambda x, a: oarlock.cast(oarlock.abs(x) > a["threshold"], x.dtype),
    "hardshrink": lambda x, a: oarlock.cast(oarlock.abs(x) > a["threshold"], x.dtype),
    "hardtanh": lambda x, a: oarlock.cast((x > a["min"]) & (x < a["max"]), x.dtype),
    "mish": _mish_slope,
    "thresholded_relu": lambda x, a: oarlock.cast(x > a["threshold"], x.dtype),
}

# name, the signature after the name, kernel
ELEMENTWISE = [
    ("log_sigmoid", "(x: Tensor) -> Tensor", _log_sigmoid),
    ("softsign", "(x: Tensor) -> Tensor", lambda xp, x: x / (1 + xp.abs(x))),
    ("tanhshrink", "(x: Tensor) -> Tensor", lambda xp, x: x - xp.tanh(x)),
    ("celu", "(x: Tensor, alpha: float = 1.0) -> Tensor", _celu),
    ("selu", f"(x: Tensor, scale: float = {SELU_SCALE!r}, alpha: float = {SELU_ALPHA!r}) -> Tensor", _selu),
    ("softplus", "(x: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor", _softplus),
    ("softshrink", "(x: Tensor, threshold: float = 0.5) -> Tensor", _softshrink),
    ("hardshrink", "(x: Tensor, threshold: float = 0.5) -> Tensor", _hardshrink),
    ("hardtanh", "(x: Tensor, min: float = -1.0, max: float = 1.0) -> Tensor", _hardtanh),
    ("mish", "(x: Tensor) -> Tensor", _mish),
    ("thresholded_relu", "(x: Tensor, threshold: float = 1.0, value: float = 0.0) -> Tensor", _thresholded_relu),
]


def register(ops):
    for name, signature, kernel in ELEMENTWISE:
        ops.define(name + signature, public=[f"oarlock.nn.functional.{name}"], dtypes=("float",),
                   grad=_saved_x(SLOPES[name]), saves=("x",), aliases={"input": "x"})
        ops.kernel(name)(_in_float32(kernel))
    define_variants(ops, ("hardtanh", "thresholded_relu"), namespaces=("oarlock.nn.functional",))


# -- Python-level activations -------------------------------------------------------------------------

def _axis(function, x, axis):
    if not isinstance(axis, numbers.Integral) or isinstance(axis, bool) or not -x.ndim <= axis < max(x.ndim, 1):
        raise ValueError(f"{function}: axis must be an int in [{-x.ndim}, {x.ndim}) for a {x.ndim}-D input, "
                         f"got {axis!r}")
    return axis % x.ndim


def _tensor(function, name, x):
    if not isinstance(x, oarlock.Tensor):
        raise TypeError(f"{function}: {name} must be a Tensor, got {type(x).__name__}")


def glu(x, axis=-1, name=None):
    """a * sigmoid(b), where a and b are the two halves of x along `axis` (its size must be even)."""
    _tensor("glu", "x", x)
    axis = _axis("glu", x, axis)
    if x.shape[axis] % 2:
        raise ValueError(f"glu: the size of x along axis {axis} must be even, got shape {x.shape}")
    a, b = oarlock.split(x, 2, axis=axis)
    return a * oarlock.sigmoid(b)


def maxout(x, groups, axis=1, name=None):
    """The maximum over each run of `groups` consecutive channels: [N, C, H, W] -> [N, C / groups, H, W]
    (axis=1, NCHW) or along the last axis (axis=-1 or 3, NHWC)."""
    _tensor("maxout", "x", x)
    if x.ndim != 4:
        raise ValueError(f"maxout: x must be 4-D ([N, C, H, W] or [N, H, W, C]), got shape {x.shape}")
    if axis not in (1, -1, 3):
        raise ValueError(f"maxout: axis must be 1, -1 or 3, got {axis!r}")
    axis %= 4
    if not isinstance(groups, numbers.Integral) or groups <= 0 or x.shape[axis] % groups:
        raise ValueError(f"maxout: groups must be a positive int dividing the {x.shape[axis]} channels, "
                         f"got {groups!r}")
    shape = list(x.shape)
    split = shape[:axis] + [shape[axis] // groups, groups] + shape[axis + 1:]
    return oarlock.max(oarlock.reshape(x, split), axis=axis + 1)


def prelu(x, weight, data_format="NCHW", name=None):
    """x where x > 0, weight * x elsewhere; weight has 1 element (shared) or one per channel (axis 1 for
    'NC*' layouts, the last axis for 'N*C')."""
    _tensor("prelu", "x", x)
    _tensor("prelu", "weight", weight)
    if data_format not in ("NC", "NCL", "NCHW", "NCDHW", "NLC", "NHWC", "NDHWC"):
        raise ValueError(f"prelu: data_format must be one of NC, NCL, NCHW, NCDHW, NLC, NHWC, NDHWC, "
                         f"got {data_format!r}")
    if weight.ndim != 1:
        raise ValueError(f"prelu: weight must be 1-D, got shape {weight.shape}")
    if weight.shape[0] != 1:
        channel = 1 if data_format[1] == "C" else x.ndim - 1
        if x.ndim < 2 or x.shape[channel] != weight.shape[0]:
            raise ValueError(f"prelu: weight has {weight.shape[0]} elements, which must be 1 or the number of "
                             f"channels of x (shape {x.shape}, data_format {data_format!r})")
        shape = [1] * x.ndim
        shape[channel] = weight.shape[0]
        weight = oarlock.reshape(weight, shape)
    return oarlock.where(x > 0, x, x * weight)


def rrelu(x, lower=1.0 / 8.0, upper=1.0 / 3.0, training=True, name=None):
    """x where x >= 0, a * x below: a ~ U(lower, upper) per element in training, (lower + upper) / 2 in eval."""
    _tensor("rrelu", "x", x)
    if not 0 <= lower <= upper <= 1:
        raise ValueError(f"rrelu: need 0 <= lower <= upper <= 1, got lower={lower!r}, upper={upper!r}")
    if training:
        slope = oarlock.uniform(x.shape, dtype=x.dtype, min=lower, max=upper)
    else:
        slope = (lower + upper) / 2.0
    return oarlock.where(x >= 0, x, x * slope)


def gumbel_softmax(x, temperature=1.0, hard=False, axis=-1, name=None):
    """softmax((x + g) / temperature) with g ~ Gumbel(0, 1); hard=True returns the one-hot of its argmax
    with the soft sample's gradient (straight-through)."""
    _tensor("gumbel_softmax", "x", x)
    if not temperature > 0:
        raise ValueError(f"gumbel_softmax: temperature must be positive, got {temperature!r}")
    axis = _axis("gumbel_softmax", x, axis)
    u = oarlock.uniform(x.shape, dtype=x.dtype, min=0.0, max=1.0)
    gumbel = -oarlock.log(-oarlock.log(oarlock.clip(u, min=GUMBEL_TINY)) + GUMBEL_TINY)
    soft = oarlock.nn.functional.softmax((x + gumbel) / temperature, axis=axis)
    if not hard:
        return soft
    index = oarlock.argmax(soft, axis=axis, keepdim=True)
    one_hot = oarlock.put_along_axis(oarlock.zeros_like(soft), index, 1.0, axis)
    return one_hot - soft.detach() + soft


FUNCTIONS = (glu, maxout, prelu, rrelu, gumbel_softmax)


def register_api(api):
    for function in FUNCTIONS:
        api.export("oarlock.nn.functional", function.__name__, function)
