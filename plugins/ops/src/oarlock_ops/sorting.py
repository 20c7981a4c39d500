"""Sorting and selection: sort, argsort, msort, topk, kthvalue, median and nanmedian (Paddle 3.2), and
the (values, indices) reductions behind oarlock.compat.max/min.

Order. Every kernel sorts stably: equal values keep their input order, in a descending sort too (which
is therefore not the reverse of the ascending one). `stable=False` is accepted and sorts the same way,
a stable order being one an unstable sort may return. NaN ranks above every number, as in Paddle and
torch: last when ascending, first when descending or in topk(largest=True). Floats narrower than 32
bits are ordered by their (exact) float32 values, since numpy compares ml_dtypes' bfloat16 slowly.

Selection. topk(k) is the first k of that order (sorted=False returns them sorted as well; k may be 0);
kthvalue(k) is the k-th smallest, counting from 1; ties resolve by the stable order, so kthvalue and
the lower median pick the same index as Paddle and torch.

Median (Paddle). Over `axis` (None: every element; a list of axes also works). mode='avg' averages the
two middle values of an even count, mode='min' takes the lower one. For mode='avg' oarlock.median
computes in float32 (float64 stays float64), as Paddle does; nanmedian keeps the input dtype, and its
integer averages truncate toward zero like Paddle's. A slice holding NaN has median NaN (its index: the
first NaN); nanmedian skips NaN, and a slice of NaN only gives NaN with index -1. Both return (values,
indices) when mode='min' and `axis` is one int, otherwise the values; called with torch's argument
names (input=, dim=), the default mode is 'min', the rule Paddle 3.2 applies to median.

Results. topk returns a named tuple (values, indices) and so do the oarlock.compat functions: one type
per function in `return_types`, mirroring torch.return_types. Every op takes `out=` (the call path's);
the frontends here that reshape an op's result apply the same rules to what they return (`write_out`).

Gradients. sort, msort, topk, kthvalue and the index-returning reductions scatter the output gradient
back to the selected positions (index_put at the indices), so the rules differentiate again. A median
returned without indices shares its gradient evenly among the entries equal to each middle value
(Paddle's rule, and torch's for a full median); one returned with indices sends it all to the index.
The median kernel computes these per-entry weights as an extra output that the backward multiplies by.
"""

from __future__ import annotations

import collections
import math
import types

import oarlock
from oarlock import Tensor
from oarlock.plugin_api import write_out as write_result_into
from oarlock_ops.linalg import compute_dtype
from oarlock_ops.reduction import _axes, _keep, _reduced_shape
from oarlock_ops.shape import _axis


class _NotGiven:
    """The default of an argument whose absence matters (median's mode depends on which names were
    used; compat's required arguments are checked by hand to name the function); shows in signatures."""

    __slots__ = ()

    def __repr__(self):
        return "<not given>"


_UNSET = _NotGiven()


# -- result types and out= -----------------------------------------------------------------------------

def _values_indices(name):
    """A named tuple type (values, indices) for function `name`, like torch.return_types.<name>; it
    unpacks and indexes as a tuple. Its qualified name points into `return_types`, so it pickles."""
    cls = collections.namedtuple(name, ("values", "indices"), module=__name__)
    cls.__qualname__ = f"return_types.{name}"
    cls.__doc__ = f"The (values, indices) result of {name}."
    return cls


return_types = types.SimpleNamespace(**{name: _values_indices(name) for name in (
    "sort", "topk", "kthvalue", "max", "min", "median", "nanmedian")})


def write_out(public, out, result):
    """`out=` for the frontends here, which reshape an op's result: the call path's rules (exact shape,
    same device, no kind-losing cast, no autograd; plugin_api.write_out) under the frontend's name. A
    named tuple result comes back as the same type over the `out` tensors; otherwise `out` itself."""
    written = write_result_into(types.SimpleNamespace(display=public), out, lambda: result)
    return type(result)(*written) if hasattr(result, "_fields") else written


# -- kernel helpers --------------------------------------------------------------------------------------

def _vector(x):
    """x itself, or a 0-d x as one element: a 0-d tensor sorts and selects like a 1-element vector."""
    return x.reshape(1) if x.ndim == 0 else x


def _order(xp, x, axis, descending=False):
    """The stable argsort (int64) of x along axis. Descending argsorts the reversed axis and reverses
    back: the largest (NaN) come first, and equal values still in input order."""
    keys = x.astype(compute_dtype(xp, x.dtype), copy=False)
    if not descending:
        return xp.argsort(keys, axis=axis, kind="stable").astype(xp.int64, copy=False)
    flipped = xp.argsort(xp.flip(keys, axis=axis), axis=axis, kind="stable")
    return (keys.shape[axis] - 1 - xp.flip(flipped, axis=axis)).astype(xp.int64, copy=False)


def _leading(x, axis, stop):
    """x[..., :stop] along axis."""
    return x[(slice(None),) * axis + (slice(0, stop),)]


def _check_k(k, n, low):
    """topk's and kthvalue's k: an int in [low, n] for an axis of size n."""
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"argument 'k' must be an int (or a 1-element integer Tensor), got {type(k).__name__} {k!r}")
    if not low <= k <= n:
        raise ValueError(f"argument 'k' must be in [{low}, {n}] for an axis of size {n}, got {k}")
    return k


def _sort_kernel(xp, x, axis=-1, descending=False, stable=False):
    work = _vector(x)
    axis = _axis(axis, work.ndim)
    order = _order(xp, work, axis, descending)
    return xp.take_along_axis(work, order, axis=axis).reshape(x.shape), order.reshape(x.shape)


def _argsort_kernel(xp, x, axis=-1, descending=False, stable=False):
    return _sort_kernel(xp, x, axis, descending)[1]


def _topk_kernel(xp, x, k, axis=None, largest=True, sorted=True):
    work = _vector(x)
    axis = _axis(-1 if axis is None else axis, work.ndim)
    k = _check_k(k, work.shape[axis], 0)
    order = _leading(_order(xp, work, axis, largest), axis, k)
    values = xp.take_along_axis(work, order, axis=axis)
    if x.ndim == 0 and k == 1:
        return values.reshape(()), order.reshape(())
    return values, order


def _pick(xp, x, index, axis, keepdim):
    """(x's entries at `index` along axis, index), where index keeps the axis as size 1; the axis goes
    unless keepdim, and a 0-d x gives 0-d results."""
    values = xp.take_along_axis(_vector(x), index, axis=axis)
    if x.ndim == 0:
        return values.reshape(()), index.reshape(())
    if not keepdim:
        values, index = xp.squeeze(values, axis=axis), xp.squeeze(index, axis=axis)
    return values, index


def _kthvalue_kernel(xp, x, k, axis=None, keepdim=False):
    work = _vector(x)
    axis = _axis(-1 if axis is None else axis, work.ndim)
    k = _check_k(k, work.shape[axis], 1)
    index = _order(xp, work, axis)[(slice(None),) * axis + (slice(k - 1, k),)]
    return _pick(xp, x, index, axis, keepdim)


def _extreme_with_index_kernel(fn):
    """max/min along one axis with the index of the first extreme; a NaN is the extreme (its first one),
    as in torch. numpy's and CuPy's argmax/argmin behave exactly so."""
    def kernel(xp, x, axis, keepdim=False):
        work = _vector(x)
        axis = _axis(axis, work.ndim)
        if work.shape[axis] == 0:
            raise ValueError(f"cannot take the {fn[3:]} of an empty axis (input shape {list(x.shape)}): "
                             f"it has no identity value")
        keys = work.astype(compute_dtype(xp, work.dtype), copy=False)
        index = xp.expand_dims(getattr(xp, fn)(keys, axis=axis), axis).astype(xp.int64, copy=False)
        return _pick(xp, x, index, axis, keepdim)
    return kernel


def _median_axes(axis, ndim):
    """The axes a median reduces, as a sorted tuple (None: all of them)."""
    if isinstance(axis, tuple) and not axis:
        raise ValueError("argument 'axis' is an empty list; give None (every axis), an int or a non-empty list")
    axes = _axes(axis, ndim)
    return tuple(range(ndim)) if axes is None else axes


def _median_rows(xp, rows, mode, ignore_nan, spread_ties):
    """The median of each row of the 2-D `rows`: (values, index, weights). `weights` has rows' shape
    and says how much of a value's gradient each entry receives."""
    m, n = rows.shape
    keys = rows.astype(compute_dtype(xp, rows.dtype), copy=False)
    floating = keys.dtype.kind == "f"
    weight_dtype = rows.dtype if floating else xp.float32  # integer medians have no gradient
    if n == 0:
        if not floating:
            raise ValueError("an empty axis has no median (and an integer tensor has no NaN to return)")
        return (xp.full((m,), math.nan, dtype=rows.dtype), xp.full((m,), -1, dtype=xp.int64),
                xp.zeros((m, 0), dtype=weight_dtype))
    order = _order(xp, keys, 1)
    nans = xp.sum(xp.isnan(keys), axis=1) if floating else xp.zeros((m,), dtype=xp.int64)
    count = n - nans if ignore_nan else xp.full((m,), n, dtype=xp.int64)  # the entries the median is over
    lower = xp.maximum(count - 1, 0) // 2  # positions in the sorted row; NaN sort after every number
    upper = xp.minimum(count // 2, n - 1)
    lower_index = xp.take_along_axis(order, lower[:, None], axis=1)
    upper_index = xp.take_along_axis(order, upper[:, None], axis=1)
    low = xp.take_along_axis(keys, lower_index, axis=1)
    high = xp.take_along_axis(keys, upper_index, axis=1)
    if mode == "min":
        values = xp.take_along_axis(rows, lower_index, axis=1)[:, 0]
    elif floating:
        values = ((low + high) / 2)[:, 0].astype(rows.dtype, copy=False)
    else:  # Paddle's integer average: the sum halved, truncated toward zero
        total = low[:, 0].astype(xp.int64) + high[:, 0].astype(xp.int64)
        values = (total // 2 + ((total % 2 != 0) & (total < 0))).astype(rows.dtype, copy=False)
    shares = (0.5, 0.5) if mode == "avg" else (1.0, 0.0)
    if spread_ties:  # each middle value's share split evenly among the entries equal to it
        parts = [keys == v for v in (low, high)]
    else:  # all of it to the middle entries themselves
        columns = xp.arange(n)[None, :]
        parts = [columns == i for i in (lower_index, upper_index)]
    weights = sum(share * p / xp.maximum(xp.sum(p, axis=1, keepdims=True), 1) for share, p in zip(shares, parts))
    index = lower_index[:, 0]
    if floating and not ignore_nan:  # a row holding NaN: the median is its first NaN, which gets the gradient
        has_nan = nans > 0
        first_nan = xp.take_along_axis(order, (n - nans)[:, None] % n, axis=1)
        values = xp.where(has_nan, xp.asarray(math.nan, dtype=rows.dtype), values)
        index = xp.where(has_nan, first_nan[:, 0], index)
        weights = xp.where(has_nan[:, None], xp.arange(n)[None, :] == first_nan, weights)
    elif floating:  # nanmedian of NaN only: NaN, index -1, no gradient
        empty = count == 0
        values = xp.where(empty, xp.asarray(math.nan, dtype=rows.dtype), values)
        index = xp.where(empty, -1, index)
        weights = xp.where(empty[:, None], 0, weights)
    return values, index.astype(xp.int64, copy=False), weights.astype(weight_dtype, copy=False)


def _median_kernel(ignore_nan):
    def kernel(xp, x, axis=None, keepdim=False, mode="avg", spread_ties=True):
        if mode not in ("avg", "min"):
            raise ValueError(f"argument 'mode' must be 'avg' or 'min', got {mode!r}")
        axes = _median_axes(axis, x.ndim)
        rest = [d for d in range(x.ndim) if d not in axes]
        perm = rest + list(axes)  # the reduced axes last, then flattened into one
        lead = [x.shape[d] for d in rest]
        n = math.prod(x.shape[d] for d in axes)
        rows = xp.transpose(x, perm).reshape(math.prod(lead), n)
        values, index, weights = _median_rows(xp, rows, mode, ignore_nan, spread_ties)
        shape = _reduced_shape(x.shape, axes if x.ndim else None, keepdim)
        inverse = sorted(range(x.ndim), key=perm.__getitem__)
        weights = xp.transpose(weights.reshape([*lead, *(x.shape[d] for d in axes)]), inverse)
        return values.reshape(shape), index.reshape(shape), weights
    return kernel


# -- backward rules --------------------------------------------------------------------------------------

def _grids(indices, axis):
    """The index tuple with which t[grids] is numpy's take_along_axis(t, indices, axis): `indices` along
    axis, and each other axis indexed by its own position (broadcast aranges)."""
    grids = []
    for d, n in enumerate(indices.shape):
        if d == axis:
            grids.append(indices)
        else:
            view = [1] * indices.ndim
            view[d] = n
            grids.append(oarlock.reshape(oarlock.arange(n, dtype="int64", place=indices.place), view))
    return tuple(grids)


def _scatter_back(ctx, indices, g, axis, keepdim=True):
    """The gradient of a selection along axis: zeros shaped like the input, with g at `indices`."""
    shape, dtype = ctx.meta[0]
    if not shape:  # a 0-d input: the selection was the input itself (or nothing, for topk with k=0)
        return oarlock.sum(g)
    axis = _axis(-1 if axis is None else axis, len(shape))
    if not keepdim:
        indices, g = oarlock.unsqueeze(indices, axis), oarlock.unsqueeze(g, axis)
    zeros = oarlock.zeros(list(shape), dtype=dtype, place=ctx.place)
    return oarlock.index_put(zeros, _grids(indices, axis), g)  # indices are distinct: no accumulation


def _sort_grad(ctx, g, *_):
    """sort, msort (which has no axis attribute: it sorts axis 0) and topk: g goes back to the indices."""
    if g is None:
        return None
    return _scatter_back(ctx, ctx.saved[0], g, ctx.attrs.get("axis", 0))


def _select_grad(ctx, g, *_):
    """kthvalue, max/min with index: g goes to the returned index."""
    if g is None:
        return None
    return _scatter_back(ctx, ctx.saved[0], g, ctx.attrs["axis"], ctx.attrs["keepdim"])


def _median_grad(ctx, g, *_):
    if g is None:
        return None
    (weights,) = ctx.saved
    return _keep(ctx, g) * weights.detach()  # the weights are piecewise constant in x


# -- Python-level frontends --------------------------------------------------------------------------------

def sort(*args, out=None, **kwargs):
    """oarlock.sort(x, axis=-1, descending=False, stable=False, *, out=None): the values of x sorted along
    axis (Paddle returns the values only; oarlock.compat.sort also returns the indices)."""
    values = internal_op("sort")(*args, **kwargs)[0]
    return values if out is None else write_out("oarlock.sort", out, values)


def topk(*args, out=None, **kwargs):
    """oarlock.topk(x, k, axis=None, largest=True, sorted=True, *, out=None): the k largest (smallest
    when largest=False) entries along axis (None: the last), as return_types.topk(values, indices)."""
    result = return_types.topk(*internal_op("topk")(*args, **kwargs))
    return result if out is None else write_out("oarlock.topk", out, result)


def _alias(public, name, value, alias, alias_value):
    """(the argument given as `name` or as its alias, whether the alias was used)."""
    if alias_value is _UNSET:
        return value, False
    if value is not _UNSET:
        raise TypeError(f"{public}(): got both '{name}' and its alias '{alias}'; pass only one")
    return alias_value, True


def _median_frontend(public, op_name, average_in_float32):
    def median(x=_UNSET, axis=_UNSET, keepdim=False, mode=_UNSET, name=None, *, input=_UNSET, dim=_UNSET,
               out=None):
        x, torch_x = _alias(public, "x", x, "input", input)
        axis, torch_axis = _alias(public, "axis", axis, "dim", dim)
        if x is _UNSET:
            raise TypeError(f"{public}() missing required argument 'x' (alias 'input')")
        axis = None if axis is _UNSET else axis
        if mode is _UNSET:
            mode = "min" if torch_x or torch_axis else "avg"
        if average_in_float32 and mode == "avg" and isinstance(x, Tensor) and x.dtype != oarlock.float64:
            x = oarlock.cast(x, "float32")
        with_index = mode == "min" and axis is not None and not isinstance(axis, (list, tuple))
        values, indices = internal_op(op_name)(x, axis, keepdim, mode, spread_ties=not with_index)
        result = (values, indices) if with_index else values
        return result if out is None else write_out(public, out, result)
    median.__name__ = median.__qualname__ = public.rpartition(".")[2]
    return median


median = _median_frontend("oarlock.median", "median", True)
median.__doc__ = """oarlock.median(x, axis=None, keepdim=False, mode='avg'): the median along axis (None: of all
    elements). mode='avg' averages the two middle values of an even count and computes in float32
    (float64 stays); mode='min' takes the lower one in x's dtype and, with an int axis, also returns the
    int64 indices. A slice holding NaN gives NaN. With input=/dim= the default mode is 'min'."""
nanmedian = _median_frontend("oarlock.nanmedian", "nanmedian", False)
nanmedian.__doc__ = """oarlock.nanmedian(x, axis=None, keepdim=False, mode='avg'): the median ignoring NaN, in x's
    dtype (integer averages truncate toward zero); axis may be a list. A slice of NaN only gives NaN
    (index -1). mode='min' with an int axis also returns the indices; with input=/dim= 'min' is the default."""


# -- registration ----------------------------------------------------------------------------------------

_ALIASES = {"input": "x", "dim": "axis"}
_ORDERED = ("bool", "int", "float")
_REAL = ("int", "float")
_SORT = "(x: Tensor, axis: int = -1, descending: bool = False, stable: bool = False)"


# The internal ops (no public name) the frontends above and oarlock_ops.compat wrap, by op name: the
# callables ops.define returned (also oarlock.ops.<this plugin>.<name>), filled by register.
INTERNAL_OPS: dict = {}


def internal_op(name: str):
    op = INTERNAL_OPS.get(name)
    if op is None:
        raise NotImplementedError(f"the sorting op {name!r} is not registered: the plugin that registers "
                                  f"oarlock_ops.sorting is not loaded (is it disabled by OARLOCK_DISABLE_PLUGINS?)")
    return op


def _private(ops, signature, display, **options):
    """An op the public frontends above wrap (they reshape its result); its errors carry their name."""
    name = signature[:signature.index("(")]
    INTERNAL_OPS[name] = ops.define(signature, internal=True, display=display, **options)
    return INTERNAL_OPS[name]


def register(ops):
    _private(ops, f"sort{_SORT} -> tuple[Tensor, Tensor]", "oarlock.sort", aliases=_ALIASES, dtypes=_ORDERED,
             grad=_sort_grad, saves=("out1",),
             doc="The values of x sorted along axis, and their int64 indices (stable; NaN last, first when "
                 "descending).")
    ops.kernel("sort")(_sort_kernel)
    ops.define(f"argsort{_SORT} -> Tensor", public=["argsort", "Tensor.argsort"], aliases=_ALIASES, dtypes=_ORDERED,
               doc="The int64 indices that sort x along axis (stable; NaN last, first when descending).")
    ops.kernel("argsort")(_argsort_kernel)
    ops.define("msort(x: Tensor) -> Tensor", public=["msort", "Tensor.msort"], aliases={"input": "x"},
               dtypes=_ORDERED, intermediate=1, grad=_sort_grad, saves=("out1",),
               doc="x sorted along its first axis (sort(x, axis=0)).")
    ops.kernel("msort")(lambda xp, x: _sort_kernel(xp, x, axis=0))

    _private(ops, "topk(x: Tensor, k: Scalar, axis: int|None = None, largest: bool = True, sorted: bool = True) "
                  "-> tuple[Tensor, Tensor]", "oarlock.topk", aliases=_ALIASES, dtypes=_REAL, grad=_sort_grad,
             saves=("out1",), doc="The k largest (or smallest) entries along axis (None: the last) and their "
                                  "int64 indices, in sorted order.")
    ops.kernel("topk")(_topk_kernel)
    ops.define("kthvalue(x: Tensor, k: Scalar, axis: int|None = None, keepdim: bool = False) "
               "-> tuple[Tensor, Tensor]", public=["kthvalue", "Tensor.kthvalue"], aliases=_ALIASES,
               dtypes=_REAL, grad=_select_grad, saves=("out1",),
               doc="The k-th smallest entry along axis (None: the last), counting from 1, and its int64 index.")
    ops.kernel("kthvalue")(_kthvalue_kernel)

    for name, fn in (("max", "argmax"), ("min", "argmin")):
        _private(ops, f"{name}_with_index(x: Tensor, axis: int, keepdim: bool = False) -> tuple[Tensor, Tensor]",
                 f"oarlock.compat.{name}", aliases=_ALIASES, dtypes=_ORDERED, grad=_select_grad, saves=("out1",),
                 doc=f"The {name} along axis and the int64 index of its first occurrence (NaN wins).")
        ops.kernel(f"{name}_with_index")(_extreme_with_index_kernel(fn))

    for name, ignore_nan in (("median", False), ("nanmedian", True)):
        _private(ops, f"{name}(x: Tensor, axis: Axis|None = None, keepdim: bool = False, mode: str = 'avg', "
                      f"spread_ties: bool = True) -> tuple[Tensor, Tensor]", f"oarlock.{name}",
                 aliases=_ALIASES, dtypes=_REAL, intermediate=1, grad=_median_grad, saves=("out2",),
                 doc=f"The {name} along axis (None: all) and the int64 index of the lower middle entry; "
                     f"spread_ties shares a value's gradient among the entries equal to it.")
        ops.kernel(name)(_median_kernel(ignore_nan))


def register_api(api):
    """The frontends that reshape an op's result (values only, a named tuple, Paddle's median forms)."""
    for fn in (sort, topk, median, nanmedian):
        api.export("oarlock", fn.__name__, fn)
        api.export("Tensor", fn.__name__, fn)
