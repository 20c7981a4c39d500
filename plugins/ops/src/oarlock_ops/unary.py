"""Float math and activations: exp, log, log1p, sqrt, rsqrt, sin, cos, tanh, erf, sigmoid, silu, gelu
(integers compute in the default float dtype, like PyTorch and Paddle), relu (integers too), and
leaky_relu and elu (floats only, like Paddle). gelu's `approximate` takes Paddle's bool and torch's
'none'/'tanh'; silu takes Paddle's `inplace` (see _silu_kernel).

Half-precision inputs (bfloat16, float16) compute in float32 and round once at the end: numpy's
bfloat16 loops are slow for some functions (tanh) and a composite formula (gelu, silu) would round at
every step. numpy has no erf, so it is built here from two classical expansions using xp only.
"""

from __future__ import annotations

import math

import oarlock
from oarlock.plugin_api import xp_function
from oarlock_ops._inplace import define_variants
from oarlock_ops.elementwise import REAL, public

SQRT_PI = math.sqrt(math.pi)
SQRT_2 = math.sqrt(2.0)
TANH_GELU_K = math.sqrt(2.0 / math.pi)  # gelu's tanh form: 0.5 x (1 + tanh(K (x + C x^3)))
TANH_GELU_C = 0.044715


def _in_float32(fn):
    """Run fn in float32 for 1- and 2-byte floats, and cast the result back."""
    def kernel(xp, x, **attrs):
        if x.dtype.itemsize >= 4:
            return fn(xp, x, **attrs)
        return fn(xp, x.astype(xp.float32), **attrs).astype(x.dtype)
    return kernel


def _in_float32_pair(fn):
    """_in_float32 for kernels of two same-dtype arrays."""
    def kernel(xp, x, y, **attrs):
        if x.dtype.itemsize >= 4:
            return fn(xp, x, y, **attrs)
        return fn(xp, x.astype(xp.float32), y.astype(xp.float32), **attrs).astype(x.dtype)
    return kernel


def _as_1d(fn):
    """For kernels that work in place: numpy returns a scalar, not an array, from a ufunc on 0-d
    arrays, and out= can't write to that; so 0-d inputs run as 1-element arrays."""
    def kernel(xp, x, *more, **attrs):
        if x.ndim:
            return fn(xp, x, *more, **attrs)
        return fn(xp, x.reshape(1), *(m.reshape(1) for m in more), **attrs).reshape(())
    return kernel


# -- erf ----------------------------------------------------------------------------------------------
# For a = |x| below ERF_SPLIT the series (Abramowitz & Stegun 7.1.6), whose terms are all positive:
#     erf(a) = 2/sqrt(pi) a exp(-a^2) sum_n (2 a^2)^n / (1 3 5 ... (2n+1))
# above it the continued fraction (A&S 7.1.14), which gives erfc with full relative accuracy:
#     erfc(a) = exp(-a^2)/sqrt(pi) / (a + (1/2)/(a + 1/(a + (3/2)/(a + 2/(a + ...)))))
# Both are cut where rounding dominates. float64: erf within 2e-15 relative; erfc within 2e-14 relative
# above the split (the error of exp(-a^2) itself) and 2e-16 absolute below it, where it is 1 - erf.
# float32: a few ulp in the same sense.
ERF_SPLIT = 2.5
ERF_TERMS = {8: (40, 30), 4: (24, 10)}  # itemsize -> (series terms, continued-fraction depth)
ERF_SERIES = [2.0 ** n / math.prod(range(1, 2 * n + 2, 2)) for n in range(40)]


def erf_abs(xp, a, complement=False):
    """erf(a), or erfc(a) with complement=True, for an array a >= 0 (float32 or float64, ndim >= 1).

    A fresh large array costs more than an in-place pass (page faults), so the temporaries are
    reused: out= and copyto work in numpy and CuPy alike."""
    terms, depth = ERF_TERMS[a.dtype.itemsize]
    small = a < ERF_SPLIT
    s = xp.minimum(a, ERF_SPLIT)  # each expansion sees only its own range: no overflow, no wasted nan
    s2 = s * s
    series = s2 * ERF_SERIES[terms - 1]  # Horner's rule in s^2
    series += ERF_SERIES[terms - 2]
    for c in ERF_SERIES[terms - 3::-1]:
        series *= s2
        series += c
    series *= s
    series *= xp.exp(xp.negative(s2, out=s2), out=s2)
    series *= 2.0 / SQRT_PI  # erf for a < split
    b = xp.maximum(a, ERF_SPLIT, out=s)
    fraction = (0.5 * depth) / b  # evaluated from its tail up
    fraction += b
    for k in range(depth - 1, 0, -1):
        xp.divide(0.5 * k, fraction, out=fraction)
        fraction += b
    fraction *= SQRT_PI
    b *= b
    tail = xp.exp(xp.negative(b, out=b), out=b)
    tail /= fraction  # erfc for a >= split
    if complement:
        xp.copyto(tail, xp.subtract(1.0, series, out=series), where=small)
        return tail
    out = xp.subtract(1.0, tail, out=tail)
    xp.copyto(out, series, where=small)
    return out


@_as_1d
def _erf(xp, x):
    out = erf_abs(xp, xp.abs(x))
    return xp.copysign(out, x, out=out)


# -- kernels --------------------------------------------------------------------------------------------
# Signs are folded in arithmetically rather than by a masked select (where/copyto on x < 0), which
# is several times slower when the signs are random.

@_as_1d
def _sigmoid(xp, x):
    # exp(min(x, 0)) / (1 + exp(-|x|)): no overflow, full relative accuracy for large negative x
    out = xp.minimum(x, 0.0)
    xp.exp(out, out=out)
    d = xp.abs(x)
    xp.exp(xp.negative(d, out=d), out=d)
    d += 1.0
    out /= d
    return out


@_as_1d
def _silu(xp, x):
    out = _sigmoid(xp, x)
    out *= x
    return out


def _silu_kernel(xp, x, inplace=False):
    """`inplace` is accepted for Paddle 3.2 and torch code, and the result is always a new tensor: writing
    into x would corrupt the x that backward reads (in-place autograd is not supported yet). Code that
    uses the returned tensor, as F.silu(x, inplace=True) callers do, gets the same values."""
    return _silu(xp, x)


def _gelu_uses_tanh(approximate):
    """Paddle 3.2 takes a bool, PyTorch (and later Paddle) the strings 'none' and 'tanh'."""
    if approximate in (True, "tanh"):
        return True
    if approximate in (False, "none"):
        return False
    raise ValueError(f"argument 'approximate' must be a bool or one of 'none', 'tanh', got {approximate!r}")


def _normal_cdf(xp, x):
    """Phi(x) = h for x < 0 and 1 - h otherwise, h = Phi(-|x|) = erfc(|x|/sqrt2)/2: from erfc, so the
    tail for large negative x keeps its digits. A new array."""
    a = xp.abs(x)
    a /= SQRT_2
    h = erf_abs(xp, a, complement=True)
    h *= 0.5
    out = xp.multiply(h, -2.0, out=a)
    out += 1.0
    out *= x >= 0
    out += h
    return out


def _tanh_gelu_inner(xp, x):
    """tanh(K (x + C x^3)), the tanh form's one transcendental."""
    t = x * x
    t *= TANH_GELU_C
    t += 1.0
    t *= x
    t *= TANH_GELU_K
    return xp.tanh(t, out=t)


@_as_1d
def _gelu(xp, x, approximate=False):
    if _gelu_uses_tanh(approximate):
        out = _tanh_gelu_inner(xp, x)
        out += 1.0
        out *= x
        out *= 0.5
        return out
    out = _normal_cdf(xp, x)
    out *= x
    return out


@_as_1d
def _gelu_grad_kernel(xp, x, g, approximate=False):
    """g * gelu'(x) in a few buffers: Phi(x) + x phi(x) (exact), or the tanh form's derivative."""
    if _gelu_uses_tanh(approximate):
        t = _tanh_gelu_inner(xp, x)
        slope = x * x
        slope *= 3 * TANH_GELU_C
        slope += 1.0
        slope *= x
        slope *= (1.0 - t * t) * (0.5 * TANH_GELU_K)
        t += 1.0
        t *= 0.5
        slope += t
    else:
        slope = x * x
        slope *= -0.5
        xp.exp(slope, out=slope)
        slope *= x
        slope *= 1.0 / (SQRT_2 * SQRT_PI)
        slope += _normal_cdf(xp, x)
    slope *= g
    return slope


def _leaky_relu(xp, x, negative_slope=0.01):
    return xp.where(x >= 0, x, x * negative_slope)


def _elu(xp, x, alpha=1.0):
    # expm1 of min(x, 0): no overflow warning from the branch that where() discards
    return xp.where(x > 0, x, alpha * xp.expm1(xp.minimum(x, 0)))


# -- backward rules -----------------------------------------------------------------------------------

def _gelu_grad(ctx, g):
    (x,) = ctx.saved
    if not oarlock.is_grad_enabled():   # first order: one fused op (a C kernel on the cpu device)
        return _gelu_grad_op(x, g, approximate=ctx.attrs["approximate"])
    if _gelu_uses_tanh(ctx.attrs["approximate"]):   # create_graph: a recorded (differentiable) backward
        t = oarlock.tanh(TANH_GELU_K * (x + TANH_GELU_C * x * x * x))
        slope = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * TANH_GELU_K * (1 + 3 * TANH_GELU_C * x * x)
    else:  # Phi(x) + x phi(x)
        slope = 0.5 * (1 + oarlock.erf(x / SQRT_2)) + x * oarlock.exp(-0.5 * x * x) / (SQRT_2 * SQRT_PI)
    return g * slope


_gelu_grad_op = None  # the internal op gelu_grad (set by register)


def _silu_grad(ctx, g):
    (x,) = ctx.saved
    if oarlock.is_grad_enabled():  # create_graph: a recorded (differentiable) backward
        s = oarlock.sigmoid(x)
        return g * s * (1 + x * (1 - s))
    return _silu_grad_op(x, g)


_silu_grad_op = None  # the internal op silu_grad (ops.define's callable, set by register)


@_as_1d
def _silu_grad_kernel(xp, x, g):
    """g * s * (1 + x * (1 - s)), s = sigmoid(x), in one buffer: six ops' worth of temporaries in one."""
    s = _sigmoid(xp, x)
    out = 1.0 - s
    out *= x
    out += 1.0
    out *= s
    out *= g
    return out


def _relu_grad(ctx, g):
    (out,) = ctx.saved
    if oarlock.is_grad_enabled():  # create_graph: a recorded (differentiable) backward
        return g * (out > 0)
    return _relu_grad_op(out, g)


_relu_grad_op = None  # the internal op relu_grad (set by register)


def _relu_grad_kernel(xp, out, g):
    """g where relu's output is positive, else 0: one op where the composite made three (a compare, a
    cast of the mask and a product)."""
    slope = (out > 0).astype(g.dtype)  # a float mask times g: numpy's where is 3x slower than this
    slope *= g
    return slope


def _leaky_relu_grad(ctx, g):
    # slope 1 where x >= 0 (Paddle's convention at 0), negative_slope below
    (x,) = ctx.saved
    return oarlock.where(x >= 0, g, g * ctx.attrs["negative_slope"])


def _elu_grad(ctx, g):
    # 1 where x > 0, alpha exp(x) at and below 0 (as Paddle and torch)
    (x,) = ctx.saved
    return oarlock.where(x > 0, g, g * (ctx.attrs["alpha"] * oarlock.exp(oarlock.minimum(x, 0.0))))


def _of_saved(derivative):
    """A backward rule from derivative(g, t), t being the one tensor the op saved."""
    return lambda ctx, g: derivative(g, ctx.saved[0])


# name, kernel, backward rule, the tensor it saves, is an activation (also in oarlock.nn.functional)
FLOAT_MATH = [
    ("exp", lambda xp, x: xp_function(xp, "exp")(x), _of_saved(lambda g, out: g * out), "out", False),
    ("log", lambda xp, x: xp.log(x), _of_saved(lambda g, x: g / x), "x", False),
    ("log1p", lambda xp, x: xp.log1p(x), _of_saved(lambda g, x: g / (x + 1)), "x", False),
    ("sqrt", lambda xp, x: xp.sqrt(x), _of_saved(lambda g, out: g / (2 * out)), "out", False),
    ("rsqrt", lambda xp, x: 1.0 / xp.sqrt(x), _of_saved(lambda g, out: -0.5 * g * out * out * out), "out", False),
    ("reciprocal", lambda xp, x: 1.0 / x, _of_saved(lambda g, out: -g * out * out), "out", False),
    ("sin", lambda xp, x: xp.sin(x), _of_saved(lambda g, x: g * oarlock.cos(x)), "x", False),
    ("cos", lambda xp, x: xp.cos(x), _of_saved(lambda g, x: -g * oarlock.sin(x)), "x", False),
    ("erf", _erf, _of_saved(lambda g, x: g * (2 / SQRT_PI) * oarlock.exp(-x * x)), "x", False),
    ("tanh", lambda xp, x: xp.tanh(x), _of_saved(lambda g, out: g * (1 - out * out)), "out", True),
    ("sigmoid", _sigmoid, _of_saved(lambda g, out: g * out * (1 - out)), "out", True),
    ("silu", _silu_kernel, _silu_grad, "x", True),
]
ATTRIBUTES = {"silu": ", inplace: bool = False"}  # attribute parameters after x
AMP_BLACK = ("exp", "log")  # computed in float32 under autocast


def register(ops):
    for name, kernel, rule, saves, activation in FLOAT_MATH:
        ops.define(f"{name}(x: Tensor{ATTRIBUTES.get(name, '')}) -> Tensor", public=public(name, functional=activation),
                   to_float=True, dtypes=REAL, grad=rule, saves=(saves,), aliases={"input": "x"},
                   amp="black" if name in AMP_BLACK else None)
        ops.kernel(name)(_in_float32(kernel))

    global _silu_grad_op
    _silu_grad_op = ops.define("silu_grad(x: Tensor, g: Tensor) -> Tensor", internal=True, promote=True,
                               dtypes=("float",), doc="The first-order backward of silu, fused (g * silu'(x)).")
    ops.kernel("silu_grad")(_in_float32_pair(_silu_grad_kernel))

    ops.define("gelu(x: Tensor, approximate: Any = False) -> Tensor", public=public("gelu", functional=True),
               to_float=True, dtypes=REAL, grad=_gelu_grad, saves=("x",), aliases={"input": "x"})
    ops.kernel("gelu")(_in_float32(_gelu))
    global _gelu_grad_op
    _gelu_grad_op = ops.define("gelu_grad(x: Tensor, g: Tensor, approximate: Any = False) -> Tensor", internal=True,
                               promote=True, dtypes=("float",),
                               doc="The first-order backward of gelu, fused (g * gelu'(x)).")
    ops.kernel("gelu_grad")(_in_float32_pair(_gelu_grad_kernel))

    # parametrised activations: floats only (Paddle has no integer kernels for them)
    for name, signature, kernel, rule in (
            ("leaky_relu", "(x: Tensor, negative_slope: float = 0.01) -> Tensor", _leaky_relu, _leaky_relu_grad),
            ("elu", "(x: Tensor, alpha: float = 1.0) -> Tensor", _elu, _elu_grad)):
        ops.define(name + signature, public=[f"oarlock.nn.functional.{name}"], dtypes=("float",), grad=rule,
                   saves=("x",), aliases={"input": "x"})
        ops.kernel(name)(_in_float32(kernel))

    # relu keeps integer dtypes; its kernel is one ufunc (maximum with a Python 0 keeps the dtype)
    ops.define("relu(x: Tensor) -> Tensor", public=public("relu", functional=True), dtypes=REAL,
               grad=_relu_grad, saves=("out",), aliases={"input": "x"})
    ops.kernel("relu")(lambda xp, x: xp.maximum(x, 0))
    global _relu_grad_op
    _relu_grad_op = ops.define("relu_grad(out: Tensor, g: Tensor) -> Tensor", internal=True, promote=True,
                               dtypes=("float",),
                               doc="The first-order backward of relu from its output (g where out > 0).")
    ops.kernel("relu_grad")(_relu_grad_kernel)
    define_variants(ops, ("exp", "log", "log1p", "sqrt", "rsqrt", "reciprocal", "sin", "cos", "sigmoid"))
    define_variants(ops, ("tanh",), namespaces=("oarlock", "Tensor", "oarlock.nn.functional"))
    define_variants(ops, ("relu", "elu", "leaky_relu"), namespaces=("oarlock.nn.functional",))
