"""Matrix-structure ops: tril, triu, diff, outer (alias ger), diag, diagonal, trace.

Paddle 3.2's semantics, with torch's argument names as aliases (input, dim, vec2, dim1/dim2):
- tril/triu keep the elements on and below (above) the `diagonal`-th diagonal of the last two axes
  (0 the main one, > 0 above it, < 0 below); any dtype; at least 2-D.
- diff(x, n, axis, prepend, append): the n-th forward difference along axis, after concatenating
  prepend and append (same number of dimensions as x, or 0-d) there; bool tensors differ by xor, as
  in Paddle and torch. n=0 returns x (torch; Paddle rejects it); n longer than the axis gives an
  empty axis.
- outer(x, y) = ger(x, y): x and y are flattened, out[i, j] = x[i] * y[j]; the operands are promoted
  together (Paddle refuses mixed int/float).
- diag(x, offset, padding_value): a 1-D (or 0-d) x becomes a square matrix with x on the offset-th
  diagonal and padding_value elsewhere; a 2-D x gives its offset-th diagonal.
- diagonal(x, offset, axis1, axis2): the offset-th diagonal of the planes spanned by axis1 and axis2,
  as a new last axis (a copy, not numpy's read-only view); trace sums it, keeping integer dtypes.

Every gradient is linear in g and written with public ops: the diagonal ops place g back on the
diagonal with index_put, diff applies the adjoint of each difference n times.
"""

from __future__ import annotations

import oarlock
from oarlock_ops._inplace import define_variants
from oarlock_ops.shape import _axis


# -- kernels ------------------------------------------------------------------------------------------

def _triangle_kernel(fn):
    def kernel(xp, x, diagonal=0):
        if x.ndim < 2:
            raise ValueError(f"argument 'x' must have at least 2 dimensions (a matrix or a batch of them), got "
                             f"shape {list(x.shape)}")
        return getattr(xp, fn)(x, k=diagonal)
    return kernel


def _diff_parts(xp, x, axis, prepend, append):
    """[prepend, x, append] as arrays with x's dimensions (a 0-d part becomes a length-1 slice)."""
    parts = []
    for name, part in (("prepend", prepend), ("x", x), ("append", append)):
        if part is None:
            continue
        if part.ndim == 0 and x.ndim:
            shape = list(x.shape)
            shape[axis] = 1
            part = xp.broadcast_to(part, shape)
        elif part.ndim != x.ndim or any(m != n for d, (m, n) in enumerate(zip(part.shape, x.shape)) if d != axis):
            raise ValueError(f"argument '{name}' must have x's shape (except along axis {axis}) or be 0-D, got "
                             f"shape {list(part.shape)} for x of shape {list(x.shape)}")
        parts.append(part)
    return parts


def _diff_kernel(xp, x, prepend=None, append=None, n=1, axis=-1):
    if x.ndim == 0:
        raise ValueError("argument 'x' must have at least one dimension, got a 0-D tensor")
    if n < 0:
        raise ValueError(f"argument 'n' must be non-negative, got {n}")
    axis = _axis(axis, x.ndim)
    parts = _diff_parts(xp, x, axis, prepend, append)
    full = xp.concatenate(parts, axis=axis) if len(parts) > 1 else x
    return xp.diff(full, n=n, axis=axis) if n else full.copy()


def _outer_kernel(xp, x, y):
    return xp.reshape(x, (-1, 1)) * xp.reshape(y, (1, -1))


def _diagonal_kernel(xp, x, offset=0, axis1=0, axis2=1):
    if x.ndim < 2:
        raise ValueError(f"argument 'x' must have at least 2 dimensions, got shape {list(x.shape)}")
    a1, a2 = _axis(axis1, x.ndim, "axis1"), _axis(axis2, x.ndim, "axis2")
    if a1 == a2:
        raise ValueError(f"axis1 ({axis1}) and axis2 ({axis2}) must name different dimensions")
    return xp.diagonal(x, offset, a1, a2).copy()


def _trace_kernel(xp, x, offset=0, axis1=0, axis2=1):
    d = _diagonal_kernel(xp, x, offset, axis1, axis2)
    return xp.sum(d, axis=-1, dtype=x.dtype if x.dtype.kind in "iu" else None).astype(x.dtype, copy=False)


def _diag_kernel(xp, x, offset=0, padding_value=0):
    if x.ndim == 2:
        return xp.diagonal(x, offset).copy()
    if x.ndim > 2:
        raise ValueError(f"argument 'x' must be 0-D, 1-D (to build a matrix) or 2-D (to read a diagonal), got "
                         f"shape {list(x.shape)}")
    x = xp.reshape(x, (-1,))
    size = x.shape[0] + abs(offset)
    out = xp.full((size, size), padding_value, dtype=x.dtype)
    rows = xp.arange(x.shape[0]) + max(-offset, 0)
    out[rows, rows + offset] = x
    return out


# -- gradients ------------------------------------------------------------------------------------------------

def _diagonal_positions(shape, offset, a1, a2):
    """(rows, cols): the positions of the offset-th diagonal in planes of shape [shape[a1], shape[a2]]."""
    n1, n2 = shape[a1], shape[a2]
    start1, start2 = max(-offset, 0), max(offset, 0)
    length = max(min(n1 - start1, n2 - start2), 0)
    return list(range(start1, start1 + length)), list(range(start2, start2 + length))


def _embed_diagonal(g, shape, offset, axis1, axis2):
    """zeros of `shape` with g (diagonal's output: the diagonal as the last axis) on the diagonal."""
    shape = list(shape)
    a1, a2 = _axis(axis1, len(shape)), _axis(axis2, len(shape))
    rest = [d for d in range(len(shape)) if d not in (a1, a2)]
    perm = rest + [a1, a2]
    zeros = oarlock.zeros([shape[d] for d in perm], dtype=g.dtype, place=g.place)
    rows, cols = _diagonal_positions(shape, offset, a1, a2)
    out = oarlock.index_put(zeros, (Ellipsis, rows, cols), g)
    inverse = [perm.index(d) for d in range(len(shape))]
    return oarlock.transpose(out, inverse)


def _triangle_grad(fn):
    return lambda ctx, g: getattr(oarlock, fn)(g, ctx.attrs["diagonal"])


def _diff_grad(ctx, g):
    """Each difference step out[i] = y[i+1] - y[i] has the adjoint gy[j] = g[j-1] - g[j] (g taken as 0
    outside its range); after n of them g has the shape of [prepend, x, append], which it splits into."""
    a = ctx.attrs
    axis = _axis(a["axis"], len(ctx.meta[0][0]))
    for _ in range(a["n"]):
        edge = list(g.shape)
        edge[axis] = 1
        zero = oarlock.zeros(edge, dtype=g.dtype, place=g.place)
        padded = oarlock.concat([zero, g, zero], axis=axis)
        length = padded.shape[axis]
        g = _slice(padded, axis, 0, length - 1) - _slice(padded, axis, 1, length)
    grads, start = [None, None, None], 0
    for i in (1, 0, 2):  # the tensor inputs are (x, prepend, append); the concatenation puts prepend first
        meta = ctx.meta[i]
        if meta is None:
            continue
        width = meta[0][axis] if meta[0] else 1  # a 0-d prepend/append stood for one slice
        piece = _slice(g, axis, start, start + width)
        start += width
        if ctx.edges[i] is not None:
            grads[i] = piece if meta[0] else oarlock.sum(piece)
    return tuple(grads)


def _slice(t, axis, start, stop):
    return t[(slice(None),) * axis + (slice(start, stop),)]


def _outer_grad(ctx, g):
    x, y = ctx.saved
    gx = gy = None
    if ctx.edges[0] is not None:
        gx = oarlock.reshape(oarlock.matmul(g, oarlock.reshape(y, [-1])), list(ctx.meta[0][0]))
    if ctx.edges[1] is not None:
        gy = oarlock.reshape(oarlock.matmul(oarlock.reshape(x, [-1]), g), list(ctx.meta[1][0]))
    return gx, gy


def _diagonal_grad(ctx, g):
    a = ctx.attrs
    return _embed_diagonal(g, ctx.meta[0][0], a["offset"], a["axis1"], a["axis2"])


def _trace_grad(ctx, g):
    a = ctx.attrs
    shape = ctx.meta[0][0]
    rows, _ = _diagonal_positions(shape, a["offset"], _axis(a["axis1"], len(shape)), _axis(a["axis2"], len(shape)))
    spread = oarlock.expand(oarlock.unsqueeze(g, -1), [*g.shape, len(rows)])
    return _embed_diagonal(spread, shape, a["offset"], a["axis1"], a["axis2"])


def _diag_grad(ctx, g):
    shape = list(ctx.meta[0][0])
    offset = ctx.attrs["offset"]
    if len(shape) == 2:
        return _embed_diagonal(g, shape, offset, 0, 1)
    return oarlock.reshape(oarlock.diagonal(g, offset), shape)


# -- registration ------------------------------------------------------------------------------------------

def _public(*names):
    return [form for n in names for form in (n, f"Tensor.{n}")]


def register(ops):
    for fn, what in (("tril", "on and below"), ("triu", "on and above")):
        ops.define(f"{fn}(x: Tensor, diagonal: int = 0) -> Tensor", public=_public(fn), aliases={"input": "x"},
                   grad=_triangle_grad(fn),
                   doc=f"x with the elements {what} the `diagonal`-th diagonal of its last two axes kept, the "
                       f"others zeroed.")
        ops.kernel(fn)(_triangle_kernel(fn))

    ops.define("diff(x: Tensor, n: int = 1, axis: int = -1, prepend: OptTensor = None, append: OptTensor = None) "
               "-> Tensor", public=_public("diff"), aliases={"input": "x", "dim": "axis"}, promote=True,
               grad=_diff_grad,
               doc="The n-th forward difference along axis of [prepend, x, append] (bool tensors: xor).")
    ops.kernel("diff")(_diff_kernel)

    ops.define("outer(x: Tensor, y: Tensor) -> Tensor", public=_public("outer", "ger"),
               aliases={"input": "x", "vec2": "y"}, promote=True, dtypes=("int", "float"), grad=_outer_grad,
               saves=("x", "y"), doc="out[i, j] = x[i] * y[j] for the flattened x and y.")
    ops.kernel("outer")(_outer_kernel)

    ops.define("diag(x: Tensor, offset: int = 0, padding_value: Scalar = 0) -> Tensor", public=_public("diag"),
               aliases={"input": "x", "diagonal": "offset"}, grad=_diag_grad,
               doc="A 1-D x on the offset-th diagonal of a square matrix filled with padding_value; a 2-D x's "
                   "offset-th diagonal.")
    ops.kernel("diag")(_diag_kernel)
    ops.define("diagonal(x: Tensor, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Tensor",
               public=_public("diagonal"), aliases={"input": "x", "dim1": "axis1", "dim2": "axis2"},
               grad=_diagonal_grad, doc="The offset-th diagonal of the (axis1, axis2) planes, as the last axis.")
    ops.kernel("diagonal")(_diagonal_kernel)
    ops.define("trace(x: Tensor, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Tensor",
               public=_public("trace"), aliases={"input": "x", "dim1": "axis1", "dim2": "axis2"},
               dtypes=("int", "float"), grad=_trace_grad,
               doc="The sum of the offset-th diagonal of the (axis1, axis2) planes.")
    ops.kernel("trace")(_trace_kernel)
    define_variants(ops, ("tril", "triu"))
