"""Scatter and gather along an axis: scatter_reduce (and scatter_reduce_), scatter_add (and
scatter_add_), put_along_axis (and put_along_axis_), Paddle's row scatter (scatter, scatter_),
take_along_axis, take_along_dim, argwhere and repeat_interleave.

The along-an-axis ops share one model (torch's scatter/gather, which Paddle 3.2 follows): `index`
has the input's number of dimensions, and its element at position p sends src[p] to the input
position that equals p except along `dim`, where it is index[p]. Only the region of `src` that
`index` covers is used, and outside `dim` the index may be smaller than the input. Index values may
be negative (counted from the end of `dim`, as Paddle allows; torch refuses them); anything outside
[-size, size) is an IndexError naming the op.

Reductions (reduce=): "sum", "prod", "mean", "amin", "amax" for scatter_reduce; put_along_axis also
takes Paddle's spellings "add", "mul", "multiply" and its default "assign". include_self=False
reduces over the scattered values only at the positions they reach (elsewhere the input stays).
Integer "mean" divides truncating toward zero, like Paddle's kernel (torch floors: they differ for
negative means). 16-bit floats are reduced in float32 and cast back.

Repeated indices: an assignment (reduce="assign", scatter with overwrite=True) keeps the *last*
value written to a position, on every device (the kernel picks the winners explicitly instead of
relying on the order of a fancy-indexed store), and only that value receives a gradient, as in
Paddle's put_along_axis. The reductions' gradients are torch's: sum and mean pass g (divided by the
count for mean), amin/amax split it evenly among the values equal to the result (the input's own
value included), prod divides the product by each factor, with the single-zero case handled exactly.

repeat_interleave accepts an int, a 0-d tensor, a 1-element tensor (broadcast, as torch does) or one
count per slice along `axis`; axis=None flattens first. output_size, when given, must equal the sum.
argwhere returns the int64 coordinates [n, ndim] of the nonzero elements (a 0-d input gives [1, 0]
or [0, 0], as torch does).
"""

from __future__ import annotations

import math

import oarlock
from oarlock_ops._grad import sum_to_shape
from oarlock_ops.linalg import compute_dtype
from oarlock_ops.shape import _axis

SCATTER_REDUCE = ("sum", "prod", "mean", "amin", "amax")
# Paddle's put_along_axis spellings -> the canonical reduction
PUT_REDUCE = {"assign": "assign", "add": "sum", "mul": "prod", "multiply": "prod", "mean": "mean",
              "amin": "amin", "amax": "amax"}


# -- index checks (kernels) --------------------------------------------------------------------------------

def _int_index(index, name):
    if index.dtype.kind not in "iu":
        raise TypeError(f"argument '{name}' must be an int32 or int64 tensor, got dtype {index.dtype}")


def _wrap_index(xp, index, size, dim, name):
    """index with negative values counted from the end; values outside [-size, size) raise. Checked
    here because some array modules (CuPy) wrap or clip out-of-range indices silently."""
    _int_index(index, name)
    if index.size == 0:
        return index.astype(xp.int64)
    low, high = int(xp.min(index)), int(xp.max(index))
    if low < -size or high >= size:
        bad = low if low < -size else high
        raise IndexError(f"argument '{name}' holds {bad}, out of range for dimension {dim} of size {size}; "
                         f"it accepts [{-size}, {size})")
    index = index.astype(xp.int64)
    return xp.where(index < 0, index + size, index) if low < 0 else index


def _scatter_operands(xp, x, dim, index, src, src_name):
    """(dim, index, src cut to index's shape) after checking them against torch's rules."""
    dim = _axis(dim, max(x.ndim, 1), "dim")
    _int_index(index, "index")
    if index.ndim != x.ndim:
        raise ValueError(f"argument 'index' must have as many dimensions as the input ({x.ndim}), got shape "
                         f"{list(index.shape)}")
    if src.ndim != x.ndim:
        raise ValueError(f"argument '{src_name}' must have as many dimensions as the input ({x.ndim}), got shape "
                         f"{list(src.shape)}")
    if any(i > s or (d != dim and i > n) for d, (i, s, n) in enumerate(zip(index.shape, src.shape, x.shape))):
        raise ValueError(f"argument 'index' (shape {list(index.shape)}) must be no larger than '{src_name}' "
                         f"(shape {list(src.shape)}) in every dimension and no larger than the input (shape "
                         f"{list(x.shape)}) apart from dimension {dim}")
    index = _wrap_index(xp, index, x.shape[dim], dim, "index")
    if src.shape != index.shape:
        src = src[tuple(slice(0, n) for n in index.shape)]
    return dim, index, src


def _positions(xp, index, dim):
    """The target coordinates of every index element, as index arrays that broadcast together: the
    element's own position in every dimension but `dim`, its value along `dim`."""
    ndim = index.ndim
    coords = [xp.reshape(xp.arange(n), [n if k == d else 1 for k in range(ndim)]) for d, n in enumerate(index.shape)]
    coords[dim] = index
    return tuple(coords)


# -- the scatter core (kernels) ------------------------------------------------------------------------------

def _identity(xp, dtype, reduce):
    """The value a position starts from when include_self=False."""
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    if dtype.kind == "f":
        return math.inf if reduce == "amin" else -math.inf
    return xp.iinfo(dtype).max if reduce == "amin" else xp.iinfo(dtype).min


def _assign_last(xp, out, pos, src):
    """out[pos] = src where the last of several values aimed at one position wins, on every device."""
    ids = xp.reshape(xp.arange(src.size, dtype=xp.int64), src.shape)
    last = xp.full(out.shape, -1, dtype=xp.int64)
    xp.maximum.at(last, pos, ids)
    won = last[pos] == ids
    out[tuple(xp.broadcast_to(c, src.shape)[won] for c in pos)] = src[won]


def _multiply_at(xp, out, pos, src):
    """xp.multiply.at(out, pos, src). CuPy's ufunc.at covers add, maximum and minimum only, so other
    array modules multiply in rounds, each reaching every position at most once (as many rounds as
    the most repeated position has values)."""
    if xp.__name__ == "numpy":
        xp.multiply.at(out, pos, src)
        return
    _multiply_in_rounds(xp, out, pos, src)


def _multiply_in_rounds(xp, out, pos, src):
    target = xp.ravel_multi_index(tuple(xp.reshape(xp.broadcast_to(c, src.shape), (-1,)) for c in pos), out.shape)
    order = xp.argsort(target)
    target, values = target[order], xp.reshape(src, (-1,))[order]
    rank = xp.arange(target.size) - xp.searchsorted(target, target, side="left")  # place in its run
    flat = xp.reshape(out, (-1,))  # a view: out is a fresh contiguous copy
    for r in range(int(rank.max()) + 1 if rank.size else 0):
        chosen = rank == r
        flat[target[chosen]] *= values[chosen]


def _scatter(xp, x, dim, index, src, reduce, include_self):
    """A copy of x with src scattered into it (operands already checked; x at least 1-D)."""
    ct = compute_dtype(xp, x.dtype)
    out = x.astype(ct, copy=True)
    src = src.astype(ct, copy=False)
    pos = _positions(xp, index, dim)
    if reduce == "assign":
        _assign_last(xp, out, pos, src)
        return out.astype(x.dtype, copy=False)
    if not include_self:
        out[pos] = _identity(xp, ct, reduce)
    if reduce == "prod":
        _multiply_at(xp, out, pos, src)
    else:
        {"sum": xp.add, "mean": xp.add, "amin": xp.minimum, "amax": xp.maximum}[reduce].at(out, pos, src)
    if reduce == "mean":
        count = xp.ones(out.shape, dtype=xp.int64)
        if not include_self:
            count[pos] = 0
        xp.add.at(count, pos, 1)
        if ct.kind == "f":
            out = out / count.astype(ct)
        else:  # truncating division, like Paddle's kernel
            out = (xp.sign(out) * (xp.abs(out) // count)).astype(ct)
    return out.astype(x.dtype, copy=False)


def _at_least_1d(kernel):
    """Run a scatter kernel on 1-element views of 0-d operands (torch accepts dim 0 or -1 for them)."""
    def run(xp, x, *arrays, **attrs):
        if x.ndim:
            return kernel(xp, x, *arrays, **attrs)
        out = kernel(xp, xp.reshape(x, (1,)), *[xp.reshape(a, (1,)) if a.ndim == 0 else a for a in arrays], **attrs)
        return xp.reshape(out, ())
    return run


def _check_reduce(reduce, accepted):
    if reduce not in accepted:
        raise ValueError(f"argument 'reduce' must be one of {', '.join(map(repr, accepted))}, got {reduce!r}")


@_at_least_1d
def _scatter_reduce_kernel(xp, x, index, src, dim, reduce, include_self=True):
    _check_reduce(reduce, SCATTER_REDUCE)
    _same_dtype(x, src, "src")
    dim, index, src = _scatter_operands(xp, x, dim, index, src, "src")
    return _scatter(xp, x, dim, index, src, reduce, include_self)


@_at_least_1d
def _scatter_add_kernel(xp, x, index, src, dim):
    _same_dtype(x, src, "src")
    dim, index, src = _scatter_operands(xp, x, dim, index, src, "src")
    return _scatter(xp, x, dim, index, src, "sum", True)


def _same_dtype(x, src, name):
    if src.dtype != x.dtype:  # torch refuses too; a silent cast could truncate floats into ints
        raise TypeError(f"argument '{name}' must have the input's dtype {x.dtype}, got {src.dtype}; cast it first")


def _broadcast(name, shape, target):
    """`target` after checking that an operand of `shape` broadcasts to it (numpy's rule)."""
    shape, target = tuple(shape), tuple(target)
    if len(shape) > len(target) or any(n not in (1, t) for n, t in zip(shape[::-1], target[::-1])):
        raise ValueError(f"argument '{name}' of shape {list(shape)} does not broadcast to {list(target)}")
    return target


def _put_shapes(arr_shape, idx_shape, val_shape, axis, broadcast):
    """Paddle's put_along_axis broadcasting: the shapes (index, values) are taken to. With broadcast,
    when the index fits in arr, both take arr's shape with the index's length along axis; otherwise
    the values take the index's shape. Without, a one-element value fills every indexed position."""
    if len(idx_shape) != len(arr_shape):
        raise ValueError(f"argument 'indices' must have as many dimensions as arr ({len(arr_shape)}), got shape "
                         f"{list(idx_shape)}")
    idx_shape, val_shape = tuple(idx_shape), tuple(val_shape)
    if broadcast:
        if all(i <= n for i, n in zip(idx_shape, arr_shape)):
            target = list(arr_shape)
            target[axis] = idx_shape[axis]
            idx_shape = _broadcast("indices", idx_shape, target)
        return idx_shape, _broadcast("values", val_shape, idx_shape)
    if math.prod(val_shape) == 1 and len(val_shape) != len(idx_shape):
        return idx_shape, idx_shape
    return idx_shape, val_shape


@_at_least_1d
def _put_along_axis_kernel(xp, arr, indices, values, axis, reduce="assign", include_self=True, broadcast=True):
    _check_reduce(reduce, tuple(PUT_REDUCE))
    axis = _axis(axis, arr.ndim)
    _int_index(indices, "indices")
    ishape, vshape = _put_shapes(arr.shape, indices.shape, values.shape, axis, broadcast)
    indices = xp.broadcast_to(indices, ishape)
    values = xp.broadcast_to(values.astype(arr.dtype, copy=False), vshape)  # Paddle casts values to arr's dtype
    axis, indices, values = _scatter_operands(xp, arr, axis, indices, values, "values")
    return _scatter(xp, arr, axis, indices, values, PUT_REDUCE[reduce], include_self)


def _row_index_shape(index_shape, updates_shape):
    """scatter's index ([N], [N, 1] or 0-d) as the shape it broadcasts from onto updates' rows."""
    n = len(updates_shape)
    return [index_shape[0] if index_shape else 1] + [1] * (n - 1)


def _scatter_rows_kernel(xp, x, index, updates, overwrite=True):
    _int_index(index, "index")
    if index.ndim == 2 and index.shape[1] == 1:
        index = xp.reshape(index, (-1,))
    if index.ndim == 0:  # one row: updates has the shape of a row of x
        index, updates = xp.reshape(index, (1,)), updates[None]
    if index.ndim != 1:
        raise ValueError(f"argument 'index' must be 1-D (or [N, 1], or 0-D), got shape {list(index.shape)}")
    if x.ndim == 0 or updates.shape != (index.shape[0],) + x.shape[1:]:
        raise ValueError(f"argument 'updates' must have shape [len(index)] + x.shape[1:] = "
                         f"{[index.shape[0], *x.shape[1:]]}, got {list(updates.shape)}")
    _same_dtype(x, updates, "updates")
    index = xp.broadcast_to(xp.reshape(index, _row_index_shape(index.shape, updates.shape)), updates.shape)
    index = _wrap_index(xp, index, x.shape[0], 0, "index")
    # Paddle: overwrite=False zeroes the indexed rows, then adds every update aimed at them
    return _scatter(xp, x, 0, index, updates, "assign" if overwrite else "sum", False)


def _in_place(kernel):
    """The in-place form of a kernel: its result written into the first input's array."""
    def run(xp, x, *arrays, **attrs):
        x[...] = kernel(xp, x, *arrays, **attrs)
        return x
    return run


def _take_shapes(arr_shape, idx_shape, axis, broadcast):
    """take_along_axis's (arr shape, index shape) after broadcasting: every dimension but `axis`
    broadcast together (torch's take_along_dim, Paddle's broadcast=True)."""
    if len(idx_shape) != len(arr_shape):
        raise ValueError(f"argument 'indices' must have as many dimensions as the input ({len(arr_shape)}), got "
                         f"shape {list(idx_shape)}")
    if not broadcast:
        if any(i > n for d, (i, n) in enumerate(zip(idx_shape, arr_shape)) if d != axis):
            raise ValueError(f"argument 'indices' (shape {list(idx_shape)}) must be no larger than the input (shape "
                             f"{list(arr_shape)}) apart from dimension {axis} when broadcast=False")
        return tuple(i if d != axis else n for d, (i, n) in enumerate(zip(idx_shape, arr_shape))), tuple(idx_shape)
    common = []
    for d, (n, i) in enumerate(zip(arr_shape, idx_shape)):
        if d != axis and n != i and 1 not in (n, i):
            raise ValueError(f"argument 'indices' of shape {list(idx_shape)} does not broadcast with the input of "
                             f"shape {list(arr_shape)} (dimension {d}: {i} against {n}; only {axis} may differ)")
        common.append(max(n, i) if 0 not in (n, i) else 0)
    return (tuple(n if d == axis else c for d, (n, c) in enumerate(zip(arr_shape, common))),
            tuple(i if d == axis else c for d, (i, c) in enumerate(zip(idx_shape, common))))


def _take_along_kernel(xp, x, indices, axis=None, broadcast=True):
    _int_index(indices, "indices")
    if axis is None:  # torch's take_along_dim without dim: both flattened
        x, indices, axis = xp.reshape(x, (-1,)), xp.reshape(indices, (-1,)), 0
    axis = _axis(axis, max(x.ndim, 1))
    if x.ndim == 0:  # like torch: a 0-d input and index act as 1-element vectors, the result stays 0-d
        one = _take_along_kernel(xp, xp.reshape(x, (1,)), xp.reshape(indices, (-1,)), axis, broadcast)
        return xp.reshape(one, indices.shape)
    xshape, ishape = _take_shapes(x.shape, indices.shape, axis, broadcast)
    x = xp.broadcast_to(x, xshape) if broadcast else x[tuple(slice(0, n) for n in xshape)]
    indices = _wrap_index(xp, xp.broadcast_to(indices, ishape), x.shape[axis], axis, "indices")
    return xp.take_along_axis(x, indices, axis=axis)


def _argwhere_kernel(xp, x):
    return xp.argwhere(x).astype(xp.int64)


def _repeat_counts(xp, repeats, length, output_size):
    """repeat_interleave's repeats as a Python int or an int64 array with one count per slice."""
    if repeats.dtype.kind not in "iu":
        raise TypeError(f"argument 'repeats' must be an int or an integer tensor, got dtype {repeats.dtype}")
    if repeats.ndim > 1:
        raise ValueError(f"argument 'repeats' must be an int, a 0-D or a 1-D tensor, got shape {list(repeats.shape)}")
    if repeats.size == 1:
        counts = int(repeats.reshape(()))
        total = counts * length
        bad = counts < 0
    else:
        if repeats.shape[0] != length:
            raise ValueError(f"argument 'repeats' has {repeats.shape[0]} counts but the input has {length} slices "
                             f"along the axis; give one count per slice (or a single count)")
        counts = repeats.astype(xp.int64)
        total = int(counts.sum()) if length else 0
        bad = bool(xp.any(counts < 0)) if length else False
    if bad:
        raise ValueError(f"argument 'repeats' must be non-negative, got {repeats.tolist()}")
    if output_size is not None and output_size != total:
        raise ValueError(f"argument 'output_size' is {output_size} but the repeats add up to {total}")
    return counts


def _repeat_interleave_kernel(xp, x, repeats, axis=None, output_size=None):
    if axis is None:
        x, axis = xp.reshape(x, (-1,)), 0
    axis = _axis(axis, max(x.ndim, 1))
    if x.ndim == 0:
        x = xp.reshape(x, (1,))
    counts = _repeat_counts(xp, repeats, x.shape[axis], output_size)
    # a list, not an array: CuPy's repeat takes an int, a list or a tuple only
    return xp.repeat(x, counts if isinstance(counts, int) else counts.tolist(), axis=axis)


# -- gradients (public ops only, so they run anywhere and differentiate again) -----------------------------

def _gather(t, dim, index):
    """t's values at the index positions (torch's gather): index may be smaller than t outside dim."""
    return oarlock.take_along_axis(t, index, dim, broadcast=False)


def _pad_to(g, shape):
    """g (the index-shaped region of a src tensor) placed in zeros of src's full shape."""
    shape = list(shape)
    if list(g.shape) == shape:
        return g
    zeros = oarlock.zeros(shape, dtype=g.dtype, place=g.place)
    return oarlock.index_put(zeros, tuple(slice(0, n) for n in g.shape), g)


def _region(t, shape):
    return t if list(t.shape) == list(shape) else t[tuple(slice(0, n) for n in shape)]


def _winners(shape, dim, index):
    """A bool tensor shaped like index: True where that element's value is the last one written to
    its target (the one an assignment keeps)."""
    ids = oarlock.reshape(oarlock.arange(index.size, place=index.place), list(index.shape))
    last = oarlock.put_along_axis(oarlock.full(list(shape), -1, dtype="int64", place=index.place), index, ids, dim,
                                  reduce="amax", broadcast=False)
    return _gather(last, dim, index) == ids


def _scatter_grads(x, index, src, out, g, dim, reduce, include_self, want_x, want_src):
    """(d input, d src region) of out = scatter(x, dim, index, src, reduce, include_self) for the
    index-shaped region of src, as torch's scatter_reduce_backward defines them."""
    gx = gs = None
    if reduce == "assign":
        if want_src:
            gs = oarlock.where(_winners(x.shape, dim, index), _gather(g, dim, index), 0.0)
        if want_x:
            gx = oarlock.put_along_axis(g, index, 0.0, dim, broadcast=False)
        return gx, gs
    if reduce == "sum":
        gx, gs = g, (_gather(g, dim, index) if want_src else None)
    elif reduce == "mean":
        count = oarlock.full(list(g.shape), 1.0 if include_self else 0.0, dtype=g.dtype, place=g.place)
        count = oarlock.scatter_add(count, dim, index, oarlock.ones(list(index.shape), dtype=g.dtype, place=g.place))
        count = oarlock.masked_fill(count, count == 0, 1.0)
        gx = g / count
        gs = _gather(g, dim, index) / _gather(count, dim, index) if want_src else None
    elif reduce in ("amin", "amax"):  # ties (the input's own value included) share g evenly
        x_hit = oarlock.cast(x == out, g.dtype)
        src_hit = oarlock.cast(src == _gather(out, dim, index), g.dtype)
        share = g / oarlock.scatter_add(x_hit, dim, index, src_hit)
        gx = x_hit * share
        gs = src_hit * _gather(share, dim, index) if want_src else None
    else:  # prod: the product of the other factors, computed without dividing by a zero
        gx = _prod_grad_x(x, index, src, g, dim, include_self) if want_x else None
        gs = _prod_grad_src(x, index, src, out, g, dim, include_self) if want_src else None
    if want_x and not include_self:  # the scattered positions did not use the input's value
        gx = oarlock.put_along_axis(gx, index, 0.0, dim, broadcast=False)
    return gx, gs


def _prod_grad_x(x, index, src, g, dim, include_self):
    safe_x = oarlock.masked_fill(x, x == 0, 1.0)
    others = oarlock.scatter_reduce(safe_x, dim, index, src, "prod", include_self=include_self)
    return g * others / safe_x


def _prod_grad_src(x, index, src, out, g, dim, include_self):
    zero = src == 0
    zeros_there = _gather(oarlock.scatter_add(oarlock.zeros_like(x), dim, index, oarlock.cast(zero, x.dtype)),
                          dim, index)
    single = zero & (zeros_there == 1)  # the only zero among its target's factors: the others' product
    others = oarlock.scatter_reduce(x, dim, index, oarlock.masked_fill(src, single, 1.0), "prod",
                                    include_self=include_self)
    return oarlock.where(single, _gather(g * others, dim, index),
                         _gather(g * out, dim, index) / oarlock.masked_fill(src, zero, 1.0))


def _scatter_reduce_grad(ctx, g):
    x, index, src, out = ctx.saved
    a = ctx.attrs
    dim = _axis(a["dim"], max(x.ndim, 1))
    region = _region(src, index.shape)
    gx, gs = _scatter_grads(x, index, region, out, g, dim, a.get("reduce", "sum"), a.get("include_self", True),
                            ctx.edges[0] is not None, ctx.edges[2] is not None)
    return gx, None, None if gs is None else _pad_to(gs, src.shape)


def _put_along_axis_grad(ctx, g):
    x, indices, values, out = ctx.saved
    a = ctx.attrs
    axis = _axis(a["axis"], max(x.ndim, 1))
    ishape, vshape = _put_shapes(x.shape, indices.shape, values.shape, axis, a["broadcast"])
    index = oarlock.broadcast_to(indices, list(ishape))
    src = oarlock.broadcast_to(oarlock.cast(values, x.dtype), list(vshape))
    gx, gs = _scatter_grads(x, index, _region(src, ishape), out, g, axis, PUT_REDUCE[a["reduce"]],
                            a["include_self"], ctx.edges[0] is not None, ctx.edges[2] is not None)
    if gs is not None:
        gs = sum_to_shape(_pad_to(gs, vshape), values.shape)
    return gx, None, gs


def _scatter_rows_grad(ctx, g):
    x, index, updates, out = ctx.saved
    if index.ndim == 2:
        index = oarlock.reshape(index, [-1])
    shape = list(updates.shape) if index.ndim else [1, *updates.shape]
    index = oarlock.broadcast_to(oarlock.reshape(index, _row_index_shape(index.shape, shape)), shape)
    overwrite = ctx.attrs["overwrite"]
    gx, gs = _scatter_grads(x, index, oarlock.reshape(updates, shape), out, g, 0,
                            "assign" if overwrite else "sum", False,
                            ctx.edges[0] is not None, ctx.edges[2] is not None)
    return gx, None, None if gs is None else oarlock.reshape(gs, list(updates.shape))


def _take_along_grad(ctx, g):
    (indices,) = ctx.saved
    shape = list(ctx.meta[0][0])
    a = ctx.attrs
    axis, broadcast = a["axis"] if "axis" in a else a["dim"], a.get("broadcast", True)
    if axis is None:  # flattened
        flat = oarlock.zeros([math.prod(shape)], dtype=g.dtype, place=g.place)
        flat = oarlock.scatter_add(flat, 0, oarlock.reshape(indices, [-1]), oarlock.reshape(g, [-1]))
        return oarlock.reshape(flat, shape), None
    axis = _axis(axis, max(len(shape), 1))
    if not shape:  # a 0-d input was taken from as a 1-element vector
        return oarlock.reshape(oarlock.sum(g), []), None
    xshape, ishape = _take_shapes(shape, indices.shape, axis, broadcast)
    if not broadcast:  # scatter_add takes an index smaller than its input as a region
        return oarlock.scatter_add(oarlock.zeros(shape, dtype=g.dtype, place=g.place), axis, indices, g), None
    index = oarlock.broadcast_to(indices, list(ishape))
    gx = oarlock.scatter_add(oarlock.zeros(list(xshape), dtype=g.dtype, place=g.place), axis, index, g)
    return sum_to_shape(gx, shape), None


def _repeat_interleave_grad(ctx, g):
    """Each input slice gets the sum of its copies' gradients (an accumulating index_put)."""
    (repeats,) = ctx.saved
    shape = list(ctx.meta[0][0])
    axis = ctx.attrs["axis"]
    if axis is None or not shape:
        target = [math.prod(shape)]
        axis = 0
    else:
        axis = _axis(axis, len(shape))
        target = shape
    source = oarlock.repeat_interleave(oarlock.arange(target[axis], place=g.place), repeats)
    zeros = oarlock.zeros(target, dtype=g.dtype, place=g.place)
    gx = oarlock.index_put(zeros, (slice(None),) * axis + (source,), g, accumulate=True)
    return oarlock.reshape(gx, shape) if target != shape else gx, None


# -- registration --------------------------------------------------------------------------------------------

_SCATTER_ALIASES = {"x": "input", "axis": "dim"}
_NUMERIC = ("int", "float")


def _public(*names):
    return [form for n in names for form in (n, f"Tensor.{n}")]


def register(ops):
    ops.define("scatter_reduce(input: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, "
               "include_self: bool = True) -> Tensor", public=_public("scatter_reduce"), aliases=_SCATTER_ALIASES,
               dtypes=_NUMERIC, nondiff=("index",), grad=_scatter_reduce_grad, saves=("input", "index", "src", "out"),
               doc="A copy of input with src reduced into it along dim at the positions index gives; reduce is "
                   "'sum', 'prod', 'mean', 'amin' or 'amax'; include_self=False leaves the input's own values "
                   "out of the reduction at the scattered positions.")
    ops.kernel("scatter_reduce")(_scatter_reduce_kernel)
    ops.define("scatter_reduce_(input: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, "
               "include_self: bool = True) -> Tensor", public=_public("scatter_reduce_"), aliases=_SCATTER_ALIASES,
               dtypes=_NUMERIC, inplace="input", doc="scatter_reduce, written into input; returns input.")
    ops.kernel("scatter_reduce_")(_in_place(_scatter_reduce_kernel))

    ops.define("scatter_add(input: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor",
               public=_public("scatter_add"), aliases=_SCATTER_ALIASES, dtypes=_NUMERIC, nondiff=("index",),
               grad=_scatter_reduce_grad, saves=("input", "index", "src", "out"),
               doc="A copy of input with src added at the positions index gives along dim (repeats add up).")
    ops.kernel("scatter_add")(_scatter_add_kernel)
    ops.define("scatter_add_(input: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor",
               public=_public("scatter_add_"), aliases=_SCATTER_ALIASES, dtypes=_NUMERIC, inplace="input",
               doc="scatter_add, written into input; returns input.")
    ops.kernel("scatter_add_")(_in_place(_scatter_add_kernel))

    put = ("(arr: Tensor, indices: Tensor, values: TensorOrScalar, axis: int, reduce: str = 'assign', "
           "include_self: bool = True, broadcast: bool = True) -> Tensor")
    ops.define("put_along_axis" + put, public=_public("put_along_axis"), aliases={"input": "arr", "dim": "axis"},
               dtypes=_NUMERIC, nondiff=("indices",), grad=_put_along_axis_grad,
               saves=("arr", "indices", "values", "out"),
               doc="A copy of arr with values put (reduce='assign') or reduced ('add', 'mul'/'multiply', 'mean', "
                   "'amin', 'amax') at the positions indices gives along axis; broadcast=True broadcasts "
                   "indices and values over arr's other dimensions (Paddle's rule).")
    ops.kernel("put_along_axis")(_put_along_axis_kernel)
    ops.define("put_along_axis_" + put, public=_public("put_along_axis_"), aliases={"input": "arr", "dim": "axis"},
               dtypes=_NUMERIC, inplace="arr", doc="put_along_axis, written into arr; returns arr.")
    ops.kernel("put_along_axis_")(_in_place(_put_along_axis_kernel))

    rows = "(x: Tensor, index: Tensor, updates: Tensor, overwrite: bool = True) -> Tensor"
    ops.define("scatter" + rows, public=_public("scatter"), dtypes=_NUMERIC, nondiff=("index",),
               grad=_scatter_rows_grad, saves=("x", "index", "updates", "out"),
               doc="Paddle's scatter: a copy of x with row index[i] replaced by updates[i] (overwrite=True, the "
                   "last of repeated indices wins) or, with overwrite=False, the indexed rows replaced by the "
                   "sum of the updates aimed at them.")
    ops.kernel("scatter")(_scatter_rows_kernel)
    ops.define("scatter_" + rows, public=_public("scatter_"), dtypes=_NUMERIC, inplace="x",
               doc="scatter, written into x; returns x.")
    ops.kernel("scatter_")(_in_place(_scatter_rows_kernel))

    ops.define("take_along_axis(arr: Tensor, indices: Tensor, axis: int, broadcast: bool = True) -> Tensor",
               public=_public("take_along_axis"), aliases={"input": "arr", "dim": "axis"}, nondiff=("indices",),
               grad=_take_along_grad, saves=("indices",),
               doc="The values of arr at `indices` along axis (numpy's take_along_axis); broadcast=True "
                   "broadcasts arr and indices over the other dimensions, broadcast=False lets indices be "
                   "smaller than arr there.")
    ops.kernel("take_along_axis")(_take_along_kernel)
    ops.define("take_along_dim(input: Tensor, indices: Tensor, dim: int|None = None) -> Tensor",
               public=_public("take_along_dim"), aliases={"arr": "input", "axis": "dim"}, nondiff=("indices",),
               grad=_take_along_grad, saves=("indices",),
               doc="torch.take_along_dim: take_along_axis with broadcasting; dim=None takes from the flattened "
                   "input with flattened indices.")
    ops.kernel("take_along_dim")(lambda xp, x, indices, dim=None: _take_along_kernel(xp, x, indices, dim))

    ops.define("argwhere(input: Tensor) -> Tensor", public=_public("argwhere"), aliases={"x": "input"},
               doc="The int64 coordinates [n, ndim] of input's nonzero elements, in row-major order.")
    ops.kernel("argwhere")(_argwhere_kernel)

    ops.define("repeat_interleave(x: Tensor, repeats: TensorOrScalar, axis: int|None = None, "
               "output_size: int|None = None) -> Tensor", public=_public("repeat_interleave"),
               aliases={"input": "x", "dim": "axis"}, nondiff=("repeats",), grad=_repeat_interleave_grad,
               saves=("repeats",),
               doc="Each slice of x along axis repeated `repeats` times (an int, or one count per slice); "
                   "axis=None repeats the elements of the flattened x.")
    ops.kernel("repeat_interleave")(_repeat_interleave_kernel)
