"""Paddle 3.2 functions that are compositions of existing ops (exported by the paddle_math family): the
shape helpers (unbind/unstack, meshgrid, broadcast_tensors, moveaxis, hstack/vstack/dstack/column_stack/
row_stack, atleast_1d/2d/3d, tensor_split/hsplit/vsplit/dsplit, narrow, slice, strided_slice, view_as,
unflatten, reverse), selection (nonzero, masked_select, index_sample, gather_nd, take, index_fill, isin),
products (dot, inner, mv, kron, tensordot, cross), elementwise extras (logaddexp, lerp, logit, stanh,
deg2rad, rad2deg, frac, sgn, positive, signbit, isneginf, isposinf, isreal, nan_to_num), reductions
(nansum, nanmean, count_nonzero, allclose, isclose, equal_all, add_n, dist, cdist), searchsorted/bucketize,
tril_indices/triu_indices, assign and increment.

Each is written with public ops only, so it runs on every device and is differentiable wherever its parts
are; results and argument names follow Paddle 3.2 (tests/test_paddle_functions.py compares them)."""

from __future__ import annotations

import builtins
import math

import numpy as np

import oarlock


def _t(x, fn, what="x"):
    if not isinstance(x, oarlock.Tensor):
        raise TypeError(f"oarlock.{fn}(): {what} must be an oarlock.Tensor, got {type(x).__name__}")
    return x


def _axis(axis, ndim, fn):
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        raise ValueError(f"oarlock.{fn}(): axis {axis} is out of range for a tensor with {ndim} dimensions")
    return axis % max(ndim, 1)


# -- shape ------------------------------------------------------------------------------------------------

def unbind(input, axis=0):
    """The slices of input along axis, as a list of tensors with that axis removed."""
    axis = _axis(axis, _t(input, "unbind", "input").ndim, "unbind")
    return [oarlock.squeeze(p, axis) for p in oarlock.split(input, input.shape[axis], axis)]


def unstack(x, axis=0, num=None):
    """unbind(x, axis); num, when given, must equal the size of that axis."""
    parts = unbind(x, axis)
    if num is not None and num != len(parts):
        raise ValueError(f"oarlock.unstack(): num={num} but axis {axis} has size {len(parts)}")
    return parts


def meshgrid(*args, **kwargs):
    """Coordinate grids of 1-d tensors ('ij' indexing, as Paddle)."""
    tensors = list(args[0]) if len(args) == 1 and isinstance(args[0], (list, tuple)) else list(args)
    shape = [_t(t, "meshgrid", "each input").size for t in tensors]
    n = len(tensors)
    return [t.reshape([-1 if i == k else 1 for i in range(n)]).expand(shape) for k, t in enumerate(tensors)]


def broadcast_tensors(input, name=None):
    """The tensors of the list `input`, each expanded to their common broadcast shape."""
    shape = list(np.broadcast_shapes(*(tuple(_t(t, "broadcast_tensors", "each input").shape) for t in input)))
    return [t if t.shape == shape else oarlock.expand(t, shape) for t in input]


def moveaxis(x, source, destination, name=None):
    """x with the axes `source` moved to positions `destination` (ints or lists of ints)."""
    nd = _t(x, "moveaxis").ndim
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    if len(src) != len(dst):
        raise ValueError(f"oarlock.moveaxis(): source {source} and destination {destination} differ in length")
    src, dst = [_axis(a, nd, "moveaxis") for a in src], [_axis(a, nd, "moveaxis") for a in dst]
    order = [a for a in range(nd) if a not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return x.transpose(order)


def atleast_1d(*inputs, name=None):
    out = [x.reshape([1]) if x.ndim == 0 else x for x in inputs]
    return out[0] if len(out) == 1 else out


def atleast_2d(*inputs, name=None):
    out = [x.reshape([1, 1]) if x.ndim == 0 else x.unsqueeze(0) if x.ndim == 1 else x for x in inputs]
    return out[0] if len(out) == 1 else out


def atleast_3d(*inputs, name=None):
    def lift(x):
        if x.ndim == 0:
            return x.reshape([1, 1, 1])
        if x.ndim == 1:
            return x.reshape([1, -1, 1])
        return x.unsqueeze(-1) if x.ndim == 2 else x
    out = [lift(x) for x in inputs]
    return out[0] if len(out) == 1 else out


def hstack(x, name=None):
    parts = [atleast_1d(t) for t in x]
    return oarlock.concat(parts, axis=0 if parts[0].ndim == 1 else 1)


def vstack(x, name=None):
    return oarlock.concat([atleast_2d(t) for t in x], axis=0)


def dstack(x, name=None):
    return oarlock.concat([atleast_3d(t) for t in x], axis=2)


def column_stack(x, name=None):
    return oarlock.concat([t.reshape([-1, 1]) if t.ndim < 2 else t for t in x], axis=1)


row_stack = vstack


def tensor_split(x, num_or_indices, axis=0, name=None):
    """x split along axis into num_or_indices nearly equal parts (the first ones one larger), or at the
    given indices."""
    axis = _axis(axis, _t(x, "tensor_split").ndim, "tensor_split")
    n = x.shape[axis]
    if isinstance(num_or_indices, int):
        if num_or_indices <= 0:
            raise ValueError(f"oarlock.tensor_split(): num_or_indices must be positive, got {num_or_indices}")
        q, r = divmod(n, num_or_indices)
        bounds = list(np.cumsum([q + 1] * r + [q] * (num_or_indices - r)))[:-1]
    else:
        bounds = [min(max(i + n if i < 0 else i, 0), n) for i in num_or_indices]
    edges = [0, *bounds, n]
    return [narrow(x, axis, a, max(b - a, 0)) for a, b in zip(edges[:-1], edges[1:])]


def hsplit(x, num_or_indices, name=None):
    return tensor_split(x, num_or_indices, axis=0 if x.ndim == 1 else 1)


def vsplit(x, num_or_indices, name=None):
    if x.ndim < 2:
        raise ValueError(f"oarlock.vsplit(): x must have at least 2 dimensions, got shape {x.shape}")
    return tensor_split(x, num_or_indices, axis=0)


def dsplit(x, num_or_indices, name=None):
    if x.ndim < 3:
        raise ValueError(f"oarlock.dsplit(): x must have at least 3 dimensions, got shape {x.shape}")
    return tensor_split(x, num_or_indices, axis=2)


def _slices(ndim, axes, starts, ends, strides=None):
    index = [builtins.slice(None)] * ndim   # this module's own `slice` is Paddle's function
    strides = strides or [1] * len(axes)
    for a, s, e, st in zip(axes, starts, ends, strides):
        s, e = (int(v.item()) if isinstance(v, oarlock.Tensor) else int(v) for v in (s, e))
        index[a] = builtins.slice(s, e, int(st))
    return tuple(index)


def slice(input, axes, starts, ends):  # noqa: A001  (Paddle's name)
    """input[starts:ends] along each of `axes` (Python slicing: bounds are clamped, negatives count back)."""
    if not (len(axes) == len(starts) == len(ends)):
        raise ValueError(f"oarlock.slice(): axes, starts and ends must have the same length, got {len(axes)}, "
                         f"{len(starts)}, {len(ends)}")
    return _t(input, "slice", "input")[_slices(input.ndim, axes, starts, ends)]


def strided_slice(x, axes, starts, ends, strides, name=None):
    """x[starts:ends:strides] along each of `axes`."""
    return _t(x, "strided_slice")[_slices(x.ndim, axes, starts, ends, strides)]


def narrow(input, dim, start, length):
    """`length` elements of input along dim from `start`."""
    dim = _axis(dim, input.ndim, "narrow")
    start = start + input.shape[dim] if start < 0 else start
    if start < 0 or length < 0 or start + length > input.shape[dim]:
        raise ValueError(f"oarlock.narrow(): start {start} and length {length} do not fit axis {dim} of size "
                         f"{input.shape[dim]}")
    return input[_slices(input.ndim, [dim], [start], [start + length])]


def view_as(x, other, name=None):
    return oarlock.reshape(x, other.shape)


def unflatten(x, axis, shape, name=None):
    """x with axis `axis` split into `shape` (one entry may be -1)."""
    axis = _axis(axis, _t(x, "unflatten").ndim, "unflatten")
    shape = [int(s) for s in (shape.tolist() if isinstance(shape, oarlock.Tensor) else shape)]
    return x.reshape(x.shape[:axis] + shape + x.shape[axis + 1:])


def reverse(x, axis, name=None):
    return oarlock.flip(x, axis)


# -- selection ----------------------------------------------------------------------------------------------

def nonzero(x, as_tuple=False):
    """The indices of x's non-zero elements: an [N, ndim] int64 tensor, or with as_tuple a tuple of ndim
    [N] tensors."""
    found = oarlock.argwhere(_t(x, "nonzero"))
    if not as_tuple:
        return found
    return tuple(found[:, i] for i in range(max(x.ndim, 1)))


def masked_select(x, mask, name=None):
    """The elements of x where mask (broadcast together) is True, as a 1-d tensor."""
    x, mask = broadcast_tensors([_t(x, "masked_select"), _t(mask, "masked_select", "mask")])
    return x[mask]


def index_sample(x, index):
    """out[i, j] = x[i, index[i, j]] for a 2-d x and 2-d index with the same first dimension."""
    if _t(x, "index_sample").ndim != 2 or _t(index, "index_sample", "index").ndim != 2 or \
            x.shape[0] != index.shape[0]:
        raise ValueError(f"oarlock.index_sample(): x and index must be 2-d with the same first dimension, got "
                         f"{x.shape} and {index.shape}")
    return oarlock.take_along_axis(x, index, 1)


def gather_nd(x, index, name=None):
    """out[i...] = x[index[i..., 0], ..., index[i..., k-1]] (k = index.shape[-1])."""
    k = _t(index, "gather_nd", "index").shape[-1]
    if k > _t(x, "gather_nd").ndim:
        raise ValueError(f"oarlock.gather_nd(): index.shape[-1] = {k} exceeds x's {x.ndim} dimensions")
    if k == 0:
        return x.expand(index.shape[:-1] + x.shape)
    return x[tuple(index[..., i] for i in range(k))]


def take(x, index, mode="raise", name=None):
    """x flattened, at `index` (same shape as index); mode 'raise' checks bounds, 'wrap' wraps, 'clip' clamps."""
    flat, n = _t(x, "take").reshape([-1]), x.size
    if mode == "wrap":
        index = oarlock.remainder(index, n)
    elif mode == "clip":
        index = oarlock.clip(index, 0, n - 1)
    elif mode == "raise":
        if index.size and (int(index.max()) >= n or int(index.min()) < -n):
            raise IndexError(f"oarlock.take(): index out of range for a tensor of {n} elements")
        index = oarlock.where(index < 0, index + n, index)
    else:
        raise ValueError(f"oarlock.take(): mode must be 'raise', 'wrap' or 'clip', got {mode!r}")
    return flat[index.reshape([-1])].reshape(index.shape)


def index_fill(x, index, axis, value, name=None):
    """x with the slices at `index` along axis set to value."""
    axis = _axis(axis, _t(x, "index_fill").ndim, "index_fill")
    hit = oarlock.zeros([x.shape[axis]], dtype="bool")
    hit[index] = True
    mask = hit.reshape([-1 if a == axis else 1 for a in range(x.ndim)])
    return oarlock.where(mask, oarlock.full_like(x, value) if not isinstance(value, oarlock.Tensor)
                         else value.astype(x.dtype), x)


def isin(x, test_x, assume_unique=False, invert=False, name=None):
    """Whether each element of x is in test_x (invert: is not)."""
    hit = (_t(x, "isin").unsqueeze(-1) == _t(test_x, "isin", "test_x").reshape([-1])).any(axis=-1)
    return oarlock.logical_not(hit) if invert else hit


# -- products -----------------------------------------------------------------------------------------------

def dot(x, y, name=None):
    """The inner product of 1-d x and y, or row by row of 2-d ones."""
    if _t(x, "dot").ndim not in (1, 2) or x.shape != _t(y, "dot", "y").shape:
        raise ValueError(f"oarlock.dot(): x and y must be 1-d or 2-d tensors of one shape, got {x.shape} and "
                         f"{y.shape}")
    return (x * y).sum(axis=-1)


def inner(x, y, name=None):
    """sum over the last axis of x[..., None-ish] * y: shape x.shape[:-1] + y.shape[:-1]."""
    if x.ndim == 0 or y.ndim == 0:
        return x * y
    return oarlock.tensordot(x, y, axes=[[x.ndim - 1], [y.ndim - 1]])


def mv(x, vec, name=None):
    """The product of a matrix and a vector."""
    if _t(x, "mv").ndim != 2 or _t(vec, "mv", "vec").ndim != 1:
        raise ValueError(f"oarlock.mv(): x must be 2-d and vec 1-d, got {x.shape} and {vec.shape}")
    return oarlock.matmul(x, vec)


def kron(x, y, name=None):
    """The Kronecker product."""
    nd = max(_t(x, "kron").ndim, _t(y, "kron", "y").ndim)
    x = x.reshape([1] * (nd - x.ndim) + x.shape)
    y = y.reshape([1] * (nd - y.ndim) + y.shape)
    xs = x.reshape([d for s in x.shape for d in (s, 1)])
    ys = y.reshape([d for s in y.shape for d in (1, s)])
    return (xs * ys).reshape([a * b for a, b in zip(x.shape, y.shape)])


def tensordot(x, y, axes=2, name=None):
    """Sum of products over the last `axes` axes of x and the first of y, or over the listed axis pairs."""
    if isinstance(axes, oarlock.Tensor):
        axes = axes.tolist()
    if isinstance(axes, int):
        ax, ay = list(range(x.ndim - axes, x.ndim)), list(range(axes))
    else:
        ax, ay = ([axes[0]] if isinstance(axes[0], int) else list(axes[0])), \
            ([axes[1]] if len(axes) > 1 and isinstance(axes[1], int) else list(axes[1] if len(axes) > 1 else axes[0]))
    ax, ay = [a % x.ndim for a in ax], [a % y.ndim for a in ay]
    if [x.shape[a] for a in ax] != [y.shape[a] for a in ay]:
        raise ValueError(f"oarlock.tensordot(): contracted sizes differ: x{[x.shape[a] for a in ax]} and "
                         f"y{[y.shape[a] for a in ay]}")
    fx, fy = [a for a in range(x.ndim) if a not in ax], [a for a in range(y.ndim) if a not in ay]
    k = math.prod(x.shape[a] for a in ax)
    left = x.transpose(fx + ax).reshape([math.prod(x.shape[a] for a in fx), k])
    right = y.transpose(ay + fy).reshape([k, math.prod(y.shape[a] for a in fy)])
    return oarlock.matmul(left, right).reshape([x.shape[a] for a in fx] + [y.shape[a] for a in fy])


def cross(x, y, axis=9, name=None):
    """The cross product of 3-vectors along axis (Paddle's default 9: the first axis of size 3)."""
    x, y = broadcast_tensors([x, y])
    if axis == 9:
        axis = next((a for a, s in enumerate(x.shape) if s == 3), None)
        if axis is None:
            raise ValueError(f"oarlock.cross(): no axis of size 3 in shape {x.shape}")
    axis = _axis(axis, x.ndim, "cross")
    if x.shape[axis] != 3:
        raise ValueError(f"oarlock.cross(): axis {axis} has size {x.shape[axis]}, not 3")
    a, b = unbind(x, axis), unbind(y, axis)
    return oarlock.stack([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]], axis)


# -- elementwise --------------------------------------------------------------------------------------------

def logaddexp(x, y, name=None):
    """log(exp(x) + exp(y)), without overflow."""
    m = oarlock.maximum(x, y)
    m = oarlock.where(oarlock.isinf(m), oarlock.zeros_like(m), m).detach()
    return m + oarlock.log(oarlock.exp(x - m) + oarlock.exp(y - m))


def lerp(x, y, weight, name=None):
    """x + weight * (y - x)."""
    return x + weight * (y - x)


def logit(x, eps=None, name=None):
    """log(x / (1 - x)), x clipped to [eps, 1 - eps] when eps is given."""
    if eps is not None:
        x = oarlock.clip(x, eps, 1 - eps)
    return oarlock.log(x / (1 - x))


def stanh(x, scale_a=0.67, scale_b=1.7159, name=None):
    return scale_b * oarlock.tanh(scale_a * x)


def deg2rad(x, name=None):
    return (x if x.dtype.is_floating_point else x.astype("float32")) * (math.pi / 180.0)


def rad2deg(x, name=None):
    return (x if x.dtype.is_floating_point else x.astype("float32")) * (180.0 / math.pi)


def frac(x, name=None):
    return x - oarlock.trunc(x)


def sgn(x, name=None):
    return oarlock.sign(x)


def positive(x):
    if _t(x, "positive").dtype == oarlock.bool:
        raise TypeError("oarlock.positive(): not supported for bool tensors")
    return x


def signbit(x, name=None):
    """Whether each element's sign bit is set (-0.0 included)."""
    if not _t(x, "signbit").dtype.is_floating_point:
        return x < 0
    return oarlock.logical_or(x < 0, oarlock.logical_and(x == 0, (1.0 / x) < 0))


def isneginf(x, name=None):
    return oarlock.logical_and(oarlock.isinf(x), x < 0)


def isposinf(x, name=None):
    return oarlock.logical_and(oarlock.isinf(x), x > 0)


def isreal(x, name=None):
    if not _t(x, "isreal").dtype.is_complex:
        return oarlock.ones(x.shape, dtype="bool")
    return oarlock.imag(x) == 0


def nan_to_num(x, nan=0.0, posinf=None, neginf=None, name=None):
    """x with nan, +inf and -inf replaced (by 0 and the dtype's largest and lowest finite values by default)."""
    if not _t(x, "nan_to_num").dtype.is_floating_point:
        return x
    info = np.finfo(np.float32 if x.dtype.name == "bfloat16" else x.dtype.np)
    big = float(info.max) if x.dtype.name != "bfloat16" else 3.3895313892515355e38
    posinf, neginf = big if posinf is None else posinf, -big if neginf is None else neginf
    x = oarlock.where(oarlock.isnan(x), oarlock.full_like(x, nan), x)
    x = oarlock.where(isposinf(x), oarlock.full_like(x, posinf), x)
    return oarlock.where(isneginf(x), oarlock.full_like(x, neginf), x)


# -- reductions -------------------------------------------------------------------------------------------

def nansum(x, axis=None, dtype=None, keepdim=False, name=None):
    """sum with nan counted as zero."""
    return oarlock.where(oarlock.isnan(x), oarlock.zeros_like(x), x).sum(axis=axis, dtype=dtype, keepdim=keepdim)


def nanmean(x, axis=None, keepdim=False, name=None):
    """mean over the elements that are not nan."""
    count = oarlock.logical_not(oarlock.isnan(x)).astype(x.dtype).sum(axis=axis, keepdim=keepdim)
    return nansum(x, axis=axis, keepdim=keepdim) / count


def count_nonzero(x, axis=None, keepdim=False, name=None):
    """The number of non-zero elements (int64)."""
    return (x != 0).astype("int64").sum(axis=axis, keepdim=keepdim)


def isclose(x, y, rtol=1e-05, atol=1e-08, equal_nan=False, name=None):
    """|x - y| <= atol + rtol * |y|, elementwise (infinities equal when equal; nan equal with equal_nan)."""
    close = oarlock.abs(x - y) <= atol + rtol * oarlock.abs(y)
    close = oarlock.logical_or(close, x == y)
    if equal_nan:
        close = oarlock.logical_or(close, oarlock.logical_and(oarlock.isnan(x), oarlock.isnan(y)))
    return close


def allclose(x, y, rtol=1e-05, atol=1e-08, equal_nan=False, name=None):
    """Whether isclose holds everywhere, as a 0-d bool tensor."""
    return isclose(x, y, rtol, atol, equal_nan).all()


def equal_all(x, y, name=None):
    """Whether x and y have one shape and equal elements, as a 0-d bool tensor."""
    if _t(x, "equal_all").shape != _t(y, "equal_all", "y").shape:
        return oarlock.to_tensor(False)
    return (x == y).all()


def add_n(inputs, name=None):
    """The sum of a list of tensors of one shape."""
    if isinstance(inputs, oarlock.Tensor):
        return inputs
    out = inputs[0]
    for t in inputs[1:]:
        out = out + t
    return out


def dist(x, y, p=2, name=None):
    """The p-norm of x - y (broadcast), flattened; p may be 0 (count), inf or -inf."""
    d = oarlock.abs(x - y).reshape([-1])
    if p == 0:
        return (d != 0).astype(x.dtype).sum()
    if p == float("inf"):
        return d.max()
    if p == float("-inf"):
        return d.min()
    return (d ** p).sum() ** (1.0 / p)


def cdist(x, y, p=2.0, compute_mode="use_mm_for_euclid_dist_if_necessary", name=None):
    """The p-norm distances between the rows of x [..., P, M] and of y [..., R, M]: [..., P, R]."""
    diff = oarlock.abs(x.unsqueeze(-2) - y.unsqueeze(-3))
    if p == float("inf"):
        return diff.max(axis=-1)
    if p == 0:
        return (diff != 0).astype(x.dtype).sum(axis=-1)
    return (diff ** p).sum(axis=-1) ** (1.0 / p)


# -- search and indices -------------------------------------------------------------------------------------

def searchsorted(sorted_sequence, values, out_int32=False, right=False, name=None):
    """For each value, the index where it would be inserted into the (last axis of) sorted_sequence."""
    seq = sorted_sequence
    if seq.ndim == 1:
        below = (seq < values.unsqueeze(-1)) if not right else (seq <= values.unsqueeze(-1))
    else:
        below = (seq.unsqueeze(-2) < values.unsqueeze(-1)) if not right else \
            (seq.unsqueeze(-2) <= values.unsqueeze(-1))
    return below.astype("int64").sum(axis=-1).astype("int32" if out_int32 else "int64")


def bucketize(x, sorted_sequence, out_int32=False, right=False, name=None):
    """searchsorted of x into a 1-d sorted_sequence."""
    if sorted_sequence.ndim != 1:
        raise ValueError(f"oarlock.bucketize(): sorted_sequence must be 1-d, got shape {sorted_sequence.shape}")
    return searchsorted(sorted_sequence, x, out_int32, right)


def _triangle_indices(fn, row, col, offset, dtype, lower):
    col = row if col is None else col
    rows, cols = (np.tril_indices if lower else np.triu_indices)(row, offset, col)
    return oarlock.to_tensor(np.stack([rows, cols]), dtype=dtype)


def tril_indices(row, col, offset=0, dtype="int64"):
    """The [2, N] row and column indices of the lower triangle of a row x col matrix."""
    return _triangle_indices("tril_indices", row, col, offset, dtype, True)


def triu_indices(row, col=None, offset=0, dtype="int64"):
    """The [2, N] row and column indices of the upper triangle of a row x col matrix."""
    return _triangle_indices("triu_indices", row, col, offset, dtype, False)


# -- assignment -----------------------------------------------------------------------------------------------

def assign(x, output=None):
    """A copy of x (a Tensor, numpy array or Python data); written into `output` when given."""
    value = x.clone() if isinstance(x, oarlock.Tensor) else oarlock.to_tensor(np.asarray(x))
    if output is None:
        return value
    output.set_value(value) if hasattr(output, "set_value") else None
    return output


def increment(x, value=1.0, name=None):
    """x + value, written into x (a 1-element tensor, as in Paddle); returns x."""
    if _t(x, "increment").size != 1:
        raise ValueError(f"oarlock.increment(): x must have exactly one element, got shape {x.shape}")
    with oarlock.no_grad():
        x.set_value(x + value)
    return x


TOP = [unbind, unstack, meshgrid, broadcast_tensors, moveaxis, atleast_1d, atleast_2d, atleast_3d, hstack, vstack,
       dstack, column_stack, tensor_split, hsplit, vsplit, dsplit, slice, strided_slice, narrow, view_as,
       unflatten, reverse, nonzero, masked_select, index_sample, gather_nd, take, index_fill, isin, dot, inner, mv,
       kron, tensordot, cross, logaddexp, lerp, logit, stanh, deg2rad, rad2deg, frac, sgn, positive, signbit,
       isneginf, isposinf, isreal, nan_to_num, nansum, nanmean, count_nonzero, isclose, allclose, equal_all, add_n,
       dist, cdist, searchsorted, bucketize, tril_indices, triu_indices, assign, increment]
# top-level names that are not Tensor methods in Paddle 3.2
NOT_METHODS = {"meshgrid", "broadcast_tensors", "atleast_1d", "atleast_2d", "atleast_3d", "hstack", "vstack",
               "dstack", "column_stack", "tril_indices", "triu_indices", "assign", "slice", "add_n"}
