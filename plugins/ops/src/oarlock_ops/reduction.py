"""Reductions: sum, mean, max/min (amax/amin), prod, var, std, argmax, argmin, logsumexp, cumsum, all, any.

Axis convention (Paddle's): `axis=None` or an empty list reduces every axis; an int or a list picks
axes in [-ndim, ndim), and a 0-d tensor also takes 0 and -1 (reducing nothing). Sums of bool and
integers come out in int64 (prod keeps int32 like Paddle; bool prods give int64). 16-bit floats
accumulate in float32 and are cast back, since numpy would accumulate them in 16 bits.

Empty reductions follow numpy's identities: sum -> 0, prod -> 1, mean/var/std -> nan,
logsumexp -> -inf, all -> True, any -> False; max/min/argmax/argmin of an empty axis have no
identity and raise.

Gradients: max/min (and amax/amin, the same ops) split the gradient evenly among tied extrema,
like Paddle's max/amax and torch.amax; std takes 0 where it is 0; every rule is written with
public ops, so it can be differentiated again.

Every reduction takes torch's `input` and `dim` for `x` and `axis`. sum, mean, cumsum and logsumexp
are on the AMP black list (their 16-bit accumulations lose too much), and logsumexp is also
oarlock.special.logsumexp (torch.special's name).
"""

from __future__ import annotations

import functools
import math

import oarlock
from oarlock_ops._inplace import define_variants
from oarlock import dtypes as D


# -- kernel helpers ------------------------------------------------------------------------------------

def _axes(axis, ndim):
    """Paddle's axis as a sorted tuple of non-negative axes, or None for 'every axis'."""
    if axis is None:
        return None
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    span = max(ndim, 1)  # a 0-d tensor accepts axis 0 and -1
    for a in axes:
        if not -span <= a < span:
            raise ValueError(f"axis {a} is out of range for a {ndim}-d tensor; it accepts [-{span}, {span - 1}]")
    out = sorted({a % span for a in axes})
    if len(out) != len(axes):
        raise ValueError(f"axis {list(axes)} names an axis twice")
    return tuple(out) if out and ndim else None


def _reduced_shape(shape, axes, keepdim):
    """The result shape of reducing `shape` over `axes` (None: every axis)."""
    if axes is None:
        return [1] * len(shape) if keepdim else []
    return [1 if i in axes else n for i, n in enumerate(shape) if keepdim or i not in axes]


def _count(shape, axes):
    """How many elements each output element reduces."""
    return math.prod(shape if axes is None else [shape[a] for a in axes])


def _require_nonempty(x, axes, what):
    if _count(x.shape, axes) == 0:
        raise ValueError(f"cannot take the {what} of an empty axis (input shape {list(x.shape)}): it has no identity "
                         f"value; reduce over non-empty axes only")


def _is_narrow_float(dtype):
    dt = D.convert_dtype(dtype)
    return dt.is_floating_point and dt.itemsize < 4


def _wide(kernel):
    """Run `kernel` on float32 copies of 16-bit float inputs and cast a float32 result back, because
    numpy accumulates (and CuPy may compute) 16-bit floats at their own precision. A wider
    `dtype=` the caller asked for is computed as asked."""
    @functools.wraps(kernel)
    def run(xp, x, **attrs):
        if not _is_narrow_float(x.dtype):
            return kernel(xp, x, **attrs)
        want = attrs.get("dtype")
        if want is None:
            want = x.dtype
        elif _is_narrow_float(want):
            attrs = {**attrs, "dtype": None}  # accumulate in float32, cast at the end
        out = kernel(xp, x.astype(xp.float32), **attrs)
        return out.astype(want) if out.dtype == xp.float32 and _is_narrow_float(want) else out
    return run


def _divide_count(s, n):
    """s / n, with n == 0 giving nan without numpy's divide warning (s is 0 there; 0 * nan is quiet)."""
    return s / n if n > 0 else s * math.nan


# -- kernels -------------------------------------------------------------------------------------------

def _sum_kernel(xp, x, axis=None, dtype=None, keepdim=False):
    if dtype is None and x.dtype.kind in "biu":
        dtype = xp.int64  # Paddle sums bool and integers in int64
    return xp.sum(x, axis=_axes(axis, x.ndim), dtype=dtype, keepdims=keepdim)


def _prod_kernel(xp, x, axis=None, keepdim=False, dtype=None):
    if dtype is None and x.dtype.kind in "biu":
        dtype = xp.int64 if x.dtype.kind == "b" else x.dtype  # numpy would widen int32 to int64
    return xp.prod(x, axis=_axes(axis, x.ndim), dtype=dtype, keepdims=keepdim)


def _mean_kernel(xp, x, axis=None, keepdim=False):
    axes = _axes(axis, x.ndim)
    return _divide_count(xp.sum(x, axis=axes, keepdims=keepdim), _count(x.shape, axes))


def _var_divisor(n, unbiased, correction):
    if unbiased is not None and correction != 1:
        raise ValueError(f"give either 'unbiased' ({unbiased}) or 'correction' ({correction}), not both")
    correction = (1.0 if unbiased else 0.0) if unbiased is not None else correction
    return n - correction


def _var_kernel(xp, x, axis=None, unbiased=None, keepdim=False, correction=1.0):
    axes = _axes(axis, x.ndim)
    n = _count(x.shape, axes)
    dev = x - _divide_count(xp.sum(x, axis=axes, keepdims=True), n)
    # a divisor <= 0 (one element, unbiased) gives nan, like Paddle
    return _divide_count(xp.sum(dev * dev, axis=axes, keepdims=keepdim), max(_var_divisor(n, unbiased, correction), 0))


def _std_kernel(xp, x, **attrs):
    return xp.sqrt(_var_kernel(xp, x, **attrs))


def _extremum_kernel(fn):
    def kernel(xp, x, axis=None, keepdim=False):
        axes = _axes(axis, x.ndim)
        _require_nonempty(x, axes, fn)
        return getattr(xp, fn)(x, axis=axes, keepdims=keepdim)
    return kernel


def _arg_extremum_kernel(fn):
    def kernel(xp, x, axis=None, keepdim=False, dtype=None):
        if dtype not in (xp.int32, xp.int64):
            raise ValueError(f"argument 'dtype' must be int32 or int64, got {dtype}")
        axes = _axes(axis, x.ndim)
        _require_nonempty(x, axes, fn)
        if axes is None:  # the index into the flattened tensor
            out = getattr(xp, fn)(xp.reshape(x, (-1,)))
            return xp.reshape(out, [1] * x.ndim if keepdim else []).astype(dtype)
        return getattr(xp, fn)(x, axis=axes[0], keepdims=keepdim).astype(dtype)
    return kernel


def _logsumexp_kernel(xp, x, axis=None, keepdim=False):
    axes = _axes(axis, x.ndim)
    if _count(x.shape, axes) == 0:  # log(0), without numpy's divide-by-zero warning
        return xp.full(_reduced_shape(x.shape, axes, keepdim), -math.inf, dtype=x.dtype)
    shift = xp.max(x, axis=axes, keepdims=True)
    # an all -inf slice or a +inf would make x - shift nan; shifting those by 0 is exact
    shift = xp.where(xp.isfinite(shift), shift, xp.zeros_like(shift))
    out = xp.log(xp.sum(xp.exp(x - shift), axis=axes, keepdims=True)) + shift
    return out if keepdim else xp.reshape(out, _reduced_shape(x.shape, axes, False))


def _cumsum_kernel(xp, x, axis=None, dtype=None):
    if dtype is None and x.dtype.kind in "biu":
        dtype = xp.int64  # Paddle's cumsum of int32 gives int64
    if axis is None:
        return xp.cumsum(xp.reshape(x, (-1,)), dtype=dtype)
    axes = _axes(axis, x.ndim)
    if axes is None:  # 0-d tensor, axis 0 or -1: nothing to accumulate
        return x.astype(dtype or x.dtype)
    return xp.cumsum(x, axis=axes[0], dtype=dtype)


def _logical_kernel(fn):
    def kernel(xp, x, axis=None, keepdim=False):
        return getattr(xp, fn)(x, axis=_axes(axis, x.ndim), keepdims=keepdim)
    return kernel


# -- backward rules ------------------------------------------------------------------------------------

def _grad_axes(ctx):
    shape = ctx.meta[0][0]
    return shape, _axes(ctx.attrs.get("axis"), len(shape))


def _keep(ctx, t):
    """A reduced tensor (gradient or output) with the reduced axes put back as size 1, so it broadcasts."""
    shape, axes = _grad_axes(ctx)
    if ctx.attrs.get("keepdim"):
        return t
    return oarlock.reshape(t, _reduced_shape(shape, axes, True))


def _spread(ctx, g):
    """The gradient of a reduction, broadcast back to the input's shape."""
    g = _keep(ctx, g)
    shape = list(ctx.meta[0][0])
    return oarlock.expand(g, shape) if list(g.shape) != shape else g


def _sum_grad(ctx, g):
    return _spread(ctx, g)


def _mean_grad(ctx, g):
    shape, axes = _grad_axes(ctx)
    n = _count(shape, axes)
    return _spread(ctx, g) * (1.0 / n if n else math.nan)


def _extremum_grad(ctx, g):
    """Ties share the gradient evenly (Paddle's max/amax and torch.amax); the pieces sum to g."""
    x, out = ctx.saved
    _, axes = _grad_axes(ctx)
    hits = oarlock.cast(x == _keep(ctx, out), x.dtype)
    return _spread(ctx, g) * hits / oarlock.sum(hits, axis=list(axes or ()), keepdim=True)


def _prod_grad(ctx, g):
    """d prod / dx_i is the product of the other elements. Dividing out x_i fails at zeros, so:
    no zero in the slice -> prod / x_i; exactly one zero -> the product of the nonzeros at that
    zero and 0 elsewhere; more zeros -> 0 everywhere. (Differentiated again, this is exact away
    from zeros; at a zero the masks act as constants.)"""
    (x,) = ctx.saved
    _, axes = _grad_axes(ctx)
    reduce = {"axis": list(axes or ()), "keepdim": True}
    zero = oarlock.cast(x == 0, x.dtype)
    safe = x + zero  # zeros replaced by ones
    nonzero_prod = oarlock.prod(safe, **reduce)
    zeros = oarlock.sum(zero, **reduce)
    none_zero = oarlock.cast(zeros == 0, x.dtype)
    one_zero = oarlock.cast(zeros == 1, x.dtype)
    local = nonzero_prod * (none_zero / safe + one_zero * zero)
    return _spread(ctx, g) * local


def _var_scale(ctx):
    """2 / divisor: d var / dx = 2 (x - mean) / divisor."""
    shape, axes = _grad_axes(ctx)
    n = _count(shape, axes)
    divisor = _var_divisor(n, ctx.attrs.get("unbiased"), ctx.attrs.get("correction", 1.0))
    return 2.0 / divisor if divisor > 0 else math.nan


def _centered(ctx, x):
    _, axes = _grad_axes(ctx)
    return x - oarlock.mean(x, axis=list(axes or ()), keepdim=True)


def _var_grad(ctx, g):
    (x,) = ctx.saved
    return _spread(ctx, g) * _centered(ctx, x) * _var_scale(ctx)


def _std_grad(ctx, g):
    """d std / dx = d var / dx / (2 std). Where std is 0 it has no derivative (a cone's tip, or a
    constant for one element); take 0 there, like torch, instead of 0 / 0."""
    x, out = ctx.saved
    zero = oarlock.cast(out == 0, out.dtype)
    inverse = (1 - zero) / (out + zero)
    return _spread(ctx, g * inverse) * _centered(ctx, x) * (_var_scale(ctx) / 2)


def _logsumexp_grad(ctx, g):
    x, out = ctx.saved
    return _spread(ctx, g) * oarlock.exp(x - _keep(ctx, out))


def _cumsum_grad(ctx, g):
    """Each x_i feeds out_j for j >= i: the gradient is the reverse cumsum, total - cumsum + g."""
    shape = list(ctx.meta[0][0])
    axis = ctx.attrs.get("axis")
    if axis is None:  # the output was the cumsum of the flattened input
        axis = 0
    elif not shape:
        return g
    total = oarlock.sum(g, axis=axis, keepdim=True)
    return oarlock.reshape(total - oarlock.cumsum(g, axis=axis) + g, shape)


# -- registration --------------------------------------------------------------------------------------

_ALIASES = {"input": "x", "dim": "axis"}
_REDUCE = "(x: Tensor, axis: Axis|None = None, keepdim: bool = False) -> Tensor"
_NUMERIC = ("int", "float")


def _public(*names):
    return [form for n in names for form in (n, f"Tensor.{n}")]


def register(ops):
    ops.define("sum(x: Tensor, axis: Axis|None = None, dtype: DType|None = None, keepdim: bool = False) -> Tensor",
               public=_public("sum"), aliases=_ALIASES, grad=_sum_grad, amp="black")
    ops.kernel("sum")(_wide(_sum_kernel))

    ops.define("prod(x: Tensor, axis: Axis|None = None, keepdim: bool = False, dtype: DType|None = None) -> Tensor",
               public=_public("prod"), aliases=_ALIASES, grad=_prod_grad, saves=("x",))
    ops.kernel("prod")(_wide(_prod_kernel))

    ops.define("mean" + _REDUCE, public=_public("mean"), aliases=_ALIASES, to_float=True, grad=_mean_grad,
               amp="black")
    ops.kernel("mean")(_wide(_mean_kernel))

    # var and std: Paddle's `unbiased` and (Paddle 3.3, torch) `correction`; giving both is an error
    moments = "(x: Tensor, axis: Axis|None = None, unbiased: bool|None = None, keepdim: bool = False, " \
              "correction: float = 1.0) -> Tensor"
    for name, kernel, rule, saves in (("var", _var_kernel, _var_grad, ("x",)),
                                      ("std", _std_kernel, _std_grad, ("x", "out"))):
        ops.define(name + moments, public=_public(name), aliases=_ALIASES, to_float=True, grad=rule, saves=saves)
        ops.kernel(name)(_wide(kernel))

    for name, alias in (("max", "amax"), ("min", "amin")):
        ops.define(name + _REDUCE, public=_public(name, alias), aliases=_ALIASES, dtypes=_NUMERIC,
                   grad=_extremum_grad, saves=("x", "out"))
        ops.kernel(name)(_extremum_kernel(name))

    for name in ("argmax", "argmin"):
        ops.define(f"{name}(x: Tensor, axis: int|None = None, keepdim: bool = False, dtype: DType = 'int64') -> Tensor",
                   public=_public(name), aliases=_ALIASES, dtypes=_NUMERIC)
        ops.kernel(name)(_arg_extremum_kernel(name))

    ops.define("logsumexp" + _REDUCE, public=_public("logsumexp") + ["oarlock.special.logsumexp"],
               aliases=_ALIASES, to_float=True, grad=_logsumexp_grad, saves=("x", "out"), amp="black")
    ops.kernel("logsumexp")(_wide(_logsumexp_kernel))

    ops.define("cumsum(x: Tensor, axis: int|None = None, dtype: DType|None = None) -> Tensor",
               public=_public("cumsum"), aliases=_ALIASES, grad=_cumsum_grad, amp="black")
    ops.kernel("cumsum")(_wide(_cumsum_kernel))

    for name in ("all", "any"):
        ops.define(name + _REDUCE, public=_public(name), aliases=_ALIASES)
        ops.kernel(name)(_logical_kernel(name))
    define_variants(ops, ("cumsum",))
