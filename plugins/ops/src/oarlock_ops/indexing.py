"""Indexing ops: getitem (x[index]), setitem_ (x[index] = value), index_put, gather, index_select,
masked_fill.

An index is an attribute (annotation Any) and reaches the kernel as the user wrote it, so it may
hold Tensors: `_plain_item` turns anything with a `_data` array (a Tensor) into an array of the
kernel's module, the one place a kernel looks inside a Tensor. Indexing follows Paddle 3 (and
torch): integers select before advanced indexing, so for x of shape [2, 3, 4], x[0, :, [1, 2]]
has shape [3, 2] where numpy would give [2, 3]; x[0] of a 1-D tensor is 0-d; basic indexing
returns a view. Every scatter (the gradients of getitem, gather and index_select) is index_put
with accumulate=True, so repeated indices add up and higher-order gradients work.
"""

from __future__ import annotations

import oarlock
from oarlock import dtypes as D
from oarlock_ops._inplace import define_variants
from oarlock_ops._grad import sum_to_shape
from oarlock_ops.shape import _axis


# -- index normalisation (kernels) -----------------------------------------------------------------

def _plain_item(xp, item):
    """One index item with Tensors and lists made arrays, and 0-d arrays made Python scalars."""
    data = getattr(item, "_data", None)
    if data is not None:
        item = xp.asarray(data)
    elif isinstance(item, list):
        item = xp.asarray([_plain_item(xp, i) for i in item]) if item else xp.zeros((0,), dtype=xp.int64)
    if hasattr(item, "ndim"):  # arrays and numpy scalars
        if item.ndim == 0 and item.dtype.kind in "biu":  # like Paddle and torch: a 0-d index is a scalar
            return bool(item) if item.dtype.kind == "b" else int(item)
        if item.dtype.kind not in "biu":
            raise IndexError(f"tensors used as indices must be integer or bool, got dtype {item.dtype}")
    return item


def _split_index(xp, index):
    """(basic, advanced) such that x[index] == x[basic][advanced] (advanced None when there is no
    advanced part). `basic` holds ints, slices, None and Ellipsis only, so x[basic] is a view;
    integers go there, which is what makes them select before the advanced indices."""
    items = [_plain_item(xp, i) for i in (index if isinstance(index, tuple) else (index,))]
    if not any(isinstance(i, bool) or hasattr(i, "ndim") for i in items):
        basic = tuple(items)
        advanced = None
    else:
        basic, adv = [], []
        for item in items:
            if item is None:
                basic.append(None)
                adv.append(slice(None))
            elif item is Ellipsis or isinstance(item, slice):
                basic.append(item)
                adv.append(slice(None) if isinstance(item, slice) else item)
            elif isinstance(item, bool):  # a new axis of length 1 (True) or 0 (False), as torch does
                basic.append(None)
                adv.append(xp.asarray([item]))
            elif hasattr(item, "ndim"):  # an index array consumes 1 axis, a mask as many as it has
                basic.extend([slice(None)] * (item.ndim if item.dtype.kind == "b" else 1))
                adv.append(item)
            else:
                basic.append(item)
        basic, advanced = tuple(basic), tuple(adv)
    if not any(i is Ellipsis for i in basic):
        basic += (Ellipsis,)  # keeps x[basic] an array (a view) even when every axis is selected
    return basic, advanced


def _getitem_kernel(xp, x, index):
    basic, advanced = _split_index(xp, index)
    out = x[basic]
    return out if advanced is None else out[advanced]


def _put(xp, target, index, value, accumulate):
    """target[index] = value (or += value, repeated positions adding up), in place."""
    basic, advanced = _split_index(xp, index)
    view = target[basic]
    value = value.astype(target.dtype, copy=False)
    if advanced is None:
        if accumulate:
            view += value
        else:
            view[...] = value
    elif accumulate:  # unbuffered: a position that appears twice gets both values
        xp.add.at(view, advanced, value)
    else:
        view[advanced] = value


def _setitem_kernel(xp, x, value, index):  # tensors first, then attributes
    _put(xp, x, index, value, False)
    return x


def _index_put_kernel(xp, x, value, indices, accumulate=False):
    out = x.copy()
    _put(xp, out, indices, value, accumulate)
    return out


def _index_1d(xp, index, size, allow_0d):
    """gather / index_select's index: 1-D (or [N, 1]; 0-d for gather) integers in [-size, size)."""
    if index.dtype.kind not in "iu":
        raise TypeError(f"index must be an int32 or int64 tensor, got dtype {index.dtype}")
    if index.ndim == 2 and index.shape[1] == 1:
        index = xp.reshape(index, (-1,))
    if index.ndim > 1 or (index.ndim == 0 and not allow_0d):
        accepts = "0-D or 1-D" if allow_0d else "1-D"
        raise ValueError(f"index must be {accepts} (or of shape [N, 1]), got shape {list(index.shape)}")
    # checked here because some array modules (CuPy) wrap out-of-range values in take() silently
    if index.size and (int(xp.min(index)) < -size or int(xp.max(index)) >= size):
        raise IndexError(f"index values must be in [{-size}, {size}) for an axis of size {size}, got values "
                         f"from {int(xp.min(index))} to {int(xp.max(index))}")
    return index


def _take_kernel(allow_0d):
    def take(xp, x, index, axis=0):
        if x.ndim == 0:
            raise ValueError("x must have at least one dimension")
        axis = _axis(0 if axis is None else axis, x.ndim)
        return xp.take(x, _index_1d(xp, index, x.shape[axis], allow_0d), axis=axis)
    return take


def _masked_fill_kernel(xp, x, mask, value):
    if mask.dtype.kind != "b":
        raise TypeError(f"mask must be a bool tensor, got dtype {mask.dtype}")
    if value.size != 1:
        raise ValueError(f"value must be a Python number or a tensor of one element, got shape {list(value.shape)}")
    value = xp.reshape(value, ())
    if x.dtype.kind in "biu" or (value.dtype.kind == "c" and x.dtype.kind != "c"):
        # PyTorch's check of the fill value (nan or 2**40 into int32, 1+2j into float32 raise); float into
        # float is left alone, so the common float fill costs no device-to-host read of the value
        value = D.fit_scalar(value.item(), x.dtype, "argument 'value'")
    return xp.where(mask, xp.asarray(value, dtype=x.dtype), x)


# -- gradients ---------------------------------------------------------------------------------------

def _scatter_add(ctx, index, g):
    """zeros shaped like input 0, with g added at x[index] (index_put accumulates repeats)."""
    shape, dtype = ctx.meta[0]
    zeros = oarlock.zeros(list(shape), dtype=dtype, place=ctx.place)
    return oarlock.index_put(zeros, index, g, accumulate=True)


def _sum_to(g, shape):
    """sum_to_shape that also allows `shape` to have more (length-1) axes than g."""
    shape = list(shape)
    if len(shape) > g.ndim:
        g = oarlock.reshape(sum_to_shape(g, shape[len(shape) - g.ndim:]), shape)
    return sum_to_shape(g, shape)


def _getitem_grad(ctx, g):
    return _scatter_add(ctx, ctx.attrs["index"], g)


def _index_put_grad(ctx, g):
    indices = ctx.attrs["indices"]
    gx = gv = None
    if ctx.edges[0] is not None:  # overwritten positions get no gradient; accumulated ones pass g on
        gx = g if ctx.attrs["accumulate"] else oarlock.index_put(g, indices, 0)
    if ctx.edges[1] is not None:
        gv = _sum_to(oarlock.getitem(g, indices), ctx.meta[1][0])
    return gx, gv


def _setitem_grad(ctx, g):
    """x[index] = value: the overwritten positions of x get no gradient, value gets g at them (summed
    over the axes it was broadcast along)."""
    index = ctx.attrs["index"]
    gx = oarlock.index_put(g, index, 0) if ctx.edges[0] is not None else None
    gv = _sum_to(oarlock.getitem(g, index), ctx.meta[1][0]) if ctx.edges[1] is not None else None
    return gx, gv


def _take_grad(ctx, g):
    (index,) = ctx.saved
    axis = ctx.attrs["axis"]
    axis = _axis(0 if axis is None else axis, len(ctx.meta[0][0]))
    if index.ndim == 2:
        index = oarlock.reshape(index, [-1])
    elif index.ndim == 0:  # gather with a 0-d index dropped the axis: put it back
        g, index = oarlock.unsqueeze(g, axis), oarlock.reshape(index, [1])
    return _scatter_add(ctx, (slice(None),) * axis + (index,), g), None


def _masked_fill_grad(ctx, g):
    (mask,) = ctx.saved
    gx = gv = None
    if ctx.edges[0] is not None:
        gx = sum_to_shape(oarlock.masked_fill(g, mask, 0), ctx.meta[0][0])
    if ctx.edges[2] is not None:
        gv = oarlock.reshape(oarlock.sum(oarlock.multiply(g, oarlock.cast(mask, g.dtype))), list(ctx.meta[2][0]))
    return gx, None, gv


# -- registration --------------------------------------------------------------------------------------

def register(ops):
    # public top-level too: Tensor.__getitem__ / __setitem__ resolve oarlock.getitem / oarlock.setitem_
    ops.define("getitem(x: Tensor, index: Any) -> Tensor", public=["getitem"], grad=_getitem_grad, view=True,
               doc="x[index]: ints, slices (any step), None, Ellipsis, bool masks, int lists and tensors.")
    ops.kernel("getitem")(_getitem_kernel)
    ops.define("setitem_(x: Tensor, index: Any, value: TensorOrScalar) -> Tensor", public=["setitem_"],
               inplace="x", grad=_setitem_grad,
               doc="x[index] = value, in place (value is cast to x's dtype); returns x.")
    ops.kernel("setitem_")(_setitem_kernel)
    ops.define("index_put(x: Tensor, indices: Any, value: TensorOrScalar, accumulate: bool = False) -> Tensor",
               public=["index_put", "Tensor.index_put"], grad=_index_put_grad,
               doc="A copy of x with x[indices] = value, or += value when accumulate (repeated indices add "
                   "up). indices: a tuple of index tensors as in Paddle, or any index getitem accepts.")
    ops.kernel("index_put")(_index_put_kernel)

    # no torch aliases for gather: torch.gather(input, dim, index) is Paddle's take_along_axis
    ops.define("gather(x: Tensor, index: Tensor, axis: Axis|None = None) -> Tensor",
               public=["gather", "Tensor.gather"], grad=_take_grad, saves=("index",), nondiff=("index",),
               doc="The entries of x at `index` (0-D or 1-D integers) along `axis` (default 0).")
    ops.kernel("gather")(_take_kernel(allow_0d=True))
    ops.define("index_select(x: Tensor, index: Tensor, axis: Axis = 0) -> Tensor",
               public=["index_select", "Tensor.index_select"], aliases={"input": "x", "dim": "axis"},
               grad=_take_grad, saves=("index",), nondiff=("index",))
    ops.kernel("index_select")(_take_kernel(allow_0d=False))

    ops.define("masked_fill(x: Tensor, mask: Tensor, value: TensorOrScalar) -> Tensor",
               public=["masked_fill", "Tensor.masked_fill"], aliases={"input": "x"}, grad=_masked_fill_grad,
               saves=("mask",), nondiff=("mask",),
               doc="x with `value` (cast to x's dtype) where the bool `mask` (broadcast with x) is True.")
    ops.kernel("masked_fill")(_masked_fill_kernel)
    define_variants(ops, ("index_put", "masked_fill"))
