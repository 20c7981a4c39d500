"""Matrix products: matmul (alias mm), bmm, and nn.functional.linear.

matmul follows numpy's rules: 1-D operands act as a row (x) or a column (y) vector and that axis
is dropped from the result, and the batch dimensions broadcast. Paddle's transpose_x/transpose_y
swap the last two axes of an operand with at least two dimensions (they do nothing to a vector).
Low-precision floats (bfloat16, float16, float8) are multiplied in float32 and cast back, since
numpy would otherwise return float32 (bfloat16) or accumulate in the narrow type.
"""

from __future__ import annotations

import oarlock
from oarlock_ops._grad import sum_to_shape, unbroadcast


def compute_dtype(xp, dtype):
    """The dtype to compute in: float32 for floats narrower than 32 bits (bfloat16 is numpy kind 'V')."""
    dtype = xp.dtype(dtype)
    return xp.dtype(xp.float32) if dtype.kind in "fV" and dtype.itemsize < 4 else dtype


def _check_shapes(x_shape, y_shape, transpose_x, transpose_y):
    """Raise, naming both shapes, unless x and y multiply: compare the shapes they have once vectors
    became matrices and the transposes were applied."""
    x2 = [1, *x_shape] if len(x_shape) == 1 else list(x_shape)
    y2 = [*y_shape, 1] if len(y_shape) == 1 else list(y_shape)
    if transpose_x and len(x_shape) > 1:
        x2[-2:] = x2[-1], x2[-2]
    if transpose_y and len(y_shape) > 1:
        y2[-2:] = y2[-1], y2[-2]
    flags = f" (transpose_x={transpose_x}, transpose_y={transpose_y})" if transpose_x or transpose_y else ""
    if x2[-1] != y2[-2]:
        raise ValueError(f"the inner dimensions do not match: x has shape {list(x_shape)} and y has shape "
                         f"{list(y_shape)}{flags}, so x contributes {x2[-1]} columns and y {y2[-2]} rows")
    for a, b in zip(reversed(x2[:-2]), reversed(y2[:-2])):
        if a != b and a != 1 and b != 1:
            raise ValueError(f"the batch dimensions of x (shape {list(x_shape)}) and y (shape {list(y_shape)}) "
                             f"do not broadcast: {x2[:-2]} against {y2[:-2]}")


def _matmul(xp, x, y, transpose_x=False, transpose_y=False):
    if x.ndim == 0 or y.ndim == 0:
        raise ValueError(f"x and y must have at least one dimension, got shapes {list(x.shape)} and "
                         f"{list(y.shape)}; use multiply for scalars")
    shapes = (x.shape, y.shape, transpose_x, transpose_y)
    if transpose_x and x.ndim > 1:
        x = xp.swapaxes(x, -1, -2)
    if transpose_y and y.ndim > 1:
        y = xp.swapaxes(y, -1, -2)
    ct = compute_dtype(xp, x.dtype)
    try:
        out = xp.matmul(x.astype(ct, copy=False), y.astype(ct, copy=False))
    except ValueError:
        _check_shapes(*shapes)  # the shapes are checked only on failure, to keep the hot path short
        raise
    return out.astype(x.dtype, copy=False)


def _bmm(xp, x, y):
    if x.ndim != 3 or y.ndim != 3:
        raise ValueError(f"x and y must both be 3-D [batch, rows, cols], got shapes {list(x.shape)} and "
                         f"{list(y.shape)}; use matmul for other ranks")
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"x and y must have the same batch size, got shapes {list(x.shape)} and {list(y.shape)}")
    return _matmul(xp, x, y)


def _linear(xp, x, weight, bias=None):
    if weight.ndim != 2:
        raise ValueError(f"weight must be 2-D [in_features, out_features], got shape {list(weight.shape)}")
    features = x.shape[-1] if x.ndim else None
    if features != weight.shape[0]:
        raise ValueError(f"weight has shape {list(weight.shape)}, so it expects {weight.shape[0]} input features, "
                         f"but x has shape {list(x.shape)} ({features} features); Paddle stores weight as "
                         f"[in_features, out_features] (a torch-style [out, in] weight needs transposing)")
    out = _matmul(xp, x, weight)
    if bias is None:
        return out
    try:
        # in place: out is the matmul's fresh array, and a new one would cost a page-faulting allocation
        xp.add(out, bias, out=out)  # promote=True gave bias the dtype of out
    except ValueError:  # numpy: "non-broadcastable output operand"
        raise ValueError(f"bias of shape {list(bias.shape)} does not broadcast to the output shape "
                         f"{list(out.shape)}; it should be [out_features] = [{weight.shape[1]}]") from None
    return out


# -- gradients ----------------------------------------------------------------------------------------

def _matmul_grad(ctx, g):
    """out = op(X) @ op(Y), op a transpose where the flag is set and X, Y the operands as matrices
    (a vector x is [1, k], a vector y is [k, 1]). The products below give each operand's gradient
    with the batch broadcast; sum_to_shape removes it, then the vector axis is dropped again."""
    x, y = ctx.saved
    x_shape, y_shape = ctx.meta[0][0], ctx.meta[1][0]
    # a transpose flag does nothing to a vector
    tx = ctx.attrs.get("transpose_x", False) and len(x_shape) > 1
    ty = ctx.attrs.get("transpose_y", False) and len(y_shape) > 1
    if len(y_shape) == 1:  # put back the axes the vector rules dropped from the output
        y, g = oarlock.reshape(y, [-1, 1]), oarlock.unsqueeze(g, -1)
    if len(x_shape) == 1:
        x, g = oarlock.reshape(x, [1, -1]), oarlock.unsqueeze(g, -2)
    dx = dy = None
    if ctx.edges[0] is not None:  # d op(X) = g @ op(Y)^T, then undo op
        dx = oarlock.matmul(y, g, transpose_x=ty, transpose_y=True) if tx else \
            oarlock.matmul(g, y, transpose_y=not ty)
        dx = _as_shape(sum_to_shape(dx, x.shape), x_shape)
    if ctx.edges[1] is not None:  # d op(Y) = op(X)^T @ g, then undo op
        dy = oarlock.matmul(g, x, transpose_x=True, transpose_y=tx) if ty else \
            oarlock.matmul(x, g, transpose_x=not tx)
        dy = _as_shape(sum_to_shape(dy, y.shape), y_shape)
    return dx, dy


def _as_shape(g, shape):
    return g if tuple(g.shape) == tuple(shape) else oarlock.reshape(g, list(shape))


def _linear_grad(ctx, g):
    x, weight = ctx.saved
    in_features, out_features = ctx.meta[1][0]
    dx = oarlock.matmul(g, weight, transpose_y=True) if ctx.edges[0] is not None else None
    dw = None
    if ctx.edges[1] is not None:  # sum x^T g over every batch position
        x2 = oarlock.reshape(x, [-1, in_features])
        dw = oarlock.matmul(x2, oarlock.reshape(g, [-1, out_features]), transpose_x=True)
    return dx, dw, unbroadcast(ctx, 2, g)


def register(ops):
    real = ("int", "float")
    ops.define("matmul(x: Tensor, y: Tensor, transpose_x: bool = False, transpose_y: bool = False) -> Tensor",
               public=["matmul", "mm", "Tensor.matmul", "Tensor.mm"], aliases={"input": "x", "mat2": "y"},
               promote=True, dtypes=real, grad=_matmul_grad, saves=("x", "y"), amp="white",
               doc="Matrix product with numpy's broadcasting and vector rules; transpose_x/transpose_y "
                   "swap the last two axes of an operand first.")
    ops.kernel("matmul")(_matmul)
    ops.define("bmm(x: Tensor, y: Tensor) -> Tensor", public=["bmm", "Tensor.bmm"], promote=True, dtypes=real,
               grad=_matmul_grad, saves=("x", "y"), amp="white",
               doc="Batched matrix product of [b, n, k] and [b, k, m] tensors (same batch size, no broadcasting).")
    ops.kernel("bmm")(_bmm)
    ops.define("linear(x: Tensor, weight: Tensor, bias: OptTensor = None) -> Tensor",
               public=["oarlock.nn.functional.linear"], promote=True, dtypes=real, grad=_linear_grad,
               saves=("x", "weight"), amp="white",
               doc="x @ weight + bias, with weight stored as [in_features, out_features] (Paddle's layout).")
    ops.kernel("linear")(_linear)
