"""Tensor-level API of Paddle 3.2's torch-style additions: ravel, broadcast_shapes, Tensor.repeat
(torch's: tile), Tensor.type_as, Tensor.new_full/new_empty/new_ones/new_zeros and Tensor.copy_.

ravel and copy_ are ops (a kernel per device, ravel differentiable); the rest are Python functions
over existing ops (tile, cast and the creation ops), which gives them autograd and device kernels
for free. They check their own arguments so that errors name them.
"""

from __future__ import annotations

import numpy as np

import oarlock
from oarlock_ops._grad import sum_to_shape
from oarlock_ops.creation import (_UNSET, dtype_arg, fill_arg, make_filled, place_arg, sizes_arg,
                                  tensor_arg)


# -- ops ------------------------------------------------------------------------------------------------

def _ravel_grad(ctx, g):
    return oarlock.reshape(g, list(ctx.meta[0][0]))


def _copy_kernel(xp, x, src, non_blocking=False):
    """Write src into x (the dispatcher hands x back): src broadcast to x's shape, cast to x's dtype."""
    if np.broadcast_shapes(src.shape, x.shape) != x.shape:  # shape arithmetic on the host
        raise ValueError(f"argument 'src' of shape {list(src.shape)} cannot be broadcast to the tensor's shape "
                         f"{list(x.shape)}")
    x[...] = src.astype(x.dtype, copy=False)
    return x


# -- Python-level functions and methods --------------------------------------------------------------------

def broadcast_shapes(*shapes):
    """The shape that tensors of the given shapes broadcast to, as a list (Paddle returns a list).
    Each shape is a list/tuple of ints (an int is a 1-d shape, as in torch)."""
    fn = "oarlock.broadcast_shapes"
    result: list = []
    for k, shape in enumerate(shapes):
        dims = sizes_arg(fn, f"shapes[{k}]", (shape,))
        if len(dims) > len(result):
            result = [1] * (len(dims) - len(result)) + result
        offset = len(result) - len(dims)
        for i, n in enumerate(dims):
            have = result[offset + i]
            if have == 1:
                result[offset + i] = n
            elif n != 1 and n != have:
                raise ValueError(f"{fn}(): shapes[{k}] = {dims} cannot be broadcast with the shape {result} of the "
                                 f"shapes before it: dimension {i - len(dims)} is {n} there and {have} before "
                                 f"(sizes must match or be 1)")
    return result


def repeat(x, *sizes, repeats=_UNSET):
    """Tensor.repeat(*sizes), torch's semantics: tile x sizes[i] times along axis i. sizes come as
    varargs or one list/tuple; there must be at least one per axis of x, and extra leading ones add
    new leading axes. (Paddle 3.2 also accepts fewer and tiles the trailing axes; use oarlock.tile
    for that.)"""
    fn = "Tensor.repeat"
    if repeats is not _UNSET:
        if sizes:
            raise TypeError(f"{fn}(): got sizes both positionally and as 'repeats'; pass only one")
        sizes = (repeats,)
    if not sizes:
        raise TypeError(f"{fn}() missing required argument 'repeats' (ints, or one list/tuple of ints)")
    reps = sizes_arg(fn, "repeats", sizes)
    if len(reps) < x.ndim:
        raise ValueError(f"{fn}(): got {len(reps)} repeat count(s) {reps} for a {x.ndim}-d tensor of shape "
                         f"{x.shape}; it needs at least one per dimension")
    return oarlock.tile(x, reps) if reps else x.clone()


def type_as(x, other):
    """x cast to other's dtype; x itself when the dtypes already match (as in torch)."""
    other = tensor_arg("Tensor.type_as", other, name="other")
    return x if x.dtype is other.dtype else x.astype(other.dtype)


def _new(fill: str, what: str):
    """Tensor.new_zeros/new_ones/new_empty: sizes as varargs, one list/tuple, or size=."""
    fn = f"Tensor.new_{fill}"

    def new(self, *sizes, size=_UNSET, dtype=None, device=None, requires_grad=False, pin_memory=False):
        if size is not _UNSET:
            if sizes:
                raise TypeError(f"{fn}(): got the size both positionally and as 'size'; pass only one")
            sizes = (size,)
        shape = sizes_arg(fn, "size", sizes)
        return make_filled(fn, fill, shape, None, dtype_arg(fn, dtype, self.dtype), place_arg(fn, device, self.place),
                           requires_grad, pin_memory)

    new.__name__ = new.__qualname__ = f"new_{fill}"
    new.__doc__ = (f"{fn}(*size, dtype=None, device=None, requires_grad=False, pin_memory=False): a new tensor "
                   f"of {what} with this tensor's dtype and device unless given (torch's semantics).")
    return new


def new_full(self, size=_UNSET, fill_value=_UNSET, *, dtype=None, device=None, requires_grad=False,
             pin_memory=False):
    """A new tensor of `size` filled with fill_value, with this tensor's dtype and device unless given."""
    fn = "Tensor.new_full"
    if size is _UNSET or fill_value is _UNSET:
        raise TypeError(f"{fn}() missing required argument '{'size' if size is _UNSET else 'fill_value'}'")
    return make_filled(fn, "full", sizes_arg(fn, "size", (size,)), fill_arg(fn, fill_value),
                       dtype_arg(fn, dtype, self.dtype), place_arg(fn, device, self.place), requires_grad,
                       pin_memory)


def _copy_grad(ctx, g):
    """x is overwritten (no gradient to its old value); src gets g, summed over its broadcast axes."""
    return None, (sum_to_shape(g, ctx.meta[1][0]) if ctx.edges[1] is not None else None)


# -- registration --------------------------------------------------------------------------------------------

def register(ops):
    ops.define("ravel(x: Tensor) -> Tensor", public=["ravel", "Tensor.ravel"], aliases={"input": "x"},
               grad=_ravel_grad, doc="x flattened to 1-d (a 0-d tensor gives shape [1]); a view where possible.")
    ops.kernel("ravel")(lambda xp, x: xp.reshape(x, (-1,)))
    ops.define("copy_(x: Tensor, src: Tensor, non_blocking: bool = False) -> Tensor", public=["Tensor.copy_"],
               aliases={"other": "src"}, inplace="x", grad=_copy_grad,
               doc="Copy src into this tensor in place (broadcast to its shape, cast to its dtype) and return "
                   "it. src must be on the same device; non_blocking is accepted and changes nothing.")
    ops.kernel("copy_")(_copy_kernel)


def register_api(api):
    """Export the Python-level functions and methods."""
    api.export("oarlock", "broadcast_shapes", broadcast_shapes)
    api.export("Tensor", "repeat", repeat)
    api.export("Tensor", "type_as", type_as)
    for fill, what in (("zeros", "zeros"), ("ones", "ones"), ("empty", "uninitialised values")):
        api.export("Tensor", f"new_{fill}", _new(fill, what))
    api.export("Tensor", "new_full", new_full)
