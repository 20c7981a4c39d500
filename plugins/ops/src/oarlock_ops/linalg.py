"""Matrix products: matmul (alias mm, linalg.matmul), bmm, nn.functional.linear; and norms: norm
(alias linalg.norm, Tensor.norm), linalg.vector_norm, linalg.matrix_norm.

matmul follows numpy's rules: 1-D operands act as a row (x) or a column (y) vector and that axis
is dropped from the result, and the batch dimensions broadcast. Paddle's transpose_x/transpose_y
swap the last two axes of an operand with at least two dimensions (they do nothing to a vector).
Low-precision floats (bfloat16, float16, float8) are multiplied in float32 and cast back, since
numpy would otherwise return float32 (bfloat16) or accumulate in the narrow type. The GEMM ops
declare amp="white": under autocast they run in the low-precision dtype.

norm follows Paddle 3.2 (p also spelled ord, axis dim, x input or A): axis=None flattens x into one
vector, an int or a list of one axis (or of three or more) gives vector norms, a list of two axes
matrix norms. Vector p: any number (inf, -inf, 0 counts the nonzeros; None and 'fro' mean 2);
matrix p: 'fro' (None), 'nuc', 1, -1, 2, -2, inf, -inf ('nuc' with axis=None needs a 2-D x). So
unlike torch.linalg.norm, p=2 without axis is the 2-norm of the flattened tensor, not the spectral
norm. dtype casts x first. vector_norm always takes a vector norm (over the flattened x, an axis or
several); matrix_norm always a matrix norm (axis [-2, -1] by default).

Norm gradients: x / norm for the 2-norms (0 where the norm is 0, like torch), sign(x) |x|^(p-1) /
norm^(p-1) in general, ties of the inf and 1-norms' max/min sharing the gradient evenly; nuc and
+-2 use the singular vectors (_norm_svd_grad, first order only).
"""

from __future__ import annotations

import math
import numbers

import oarlock
from oarlock.plugin_api import xp_function
from oarlock.registry import ANY_DTYPE, GENERIC, default_registry
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
    product = xp_function(xp, "matmul")   # the backend's faster GEMM where it has one (oarlock-cpu: MKL)
    if x.ndim > 2 and y.ndim == 2 and x.flags.c_contiguous and x.shape[-1] == y.shape[0]:
        # stacked rows times one matrix is one GEMM over the rows (numpy would make one per batch entry)
        rows = x.reshape(-1, x.shape[-1])
        out = product(rows.astype(ct, copy=False), y.astype(ct, copy=False))
        return out.reshape(*x.shape[:-1], y.shape[1]).astype(x.dtype, copy=False)
    try:
        out = product(x.astype(ct, copy=False), y.astype(ct, copy=False))
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


def _linear_grad_kernel(xp, x, weight, g, need_x=True, need_weight=True, need_bias=True):
    """linear's first-order backward in one kernel: (dx = g weight^T, dweight = x^T g over every row, dbias = the
    column sums of g), an empty [0] array for each one not needed. x [..., in], weight [in, out], g [..., out]."""
    matmul = xp_function(xp, "matmul")
    dtype, ct = g.dtype, compute_dtype(xp, g.dtype)   # 16-bit floats in float32, rounded once at the end
    cast = not (x.dtype == weight.dtype == dtype == ct)   # the usual case casts nothing (a small op: no passes)
    if cast:
        x, weight, g = (a.astype(ct, copy=False) for a in (x, weight, g))
    rows = g.reshape(-1, g.shape[-1])
    empty = xp.zeros((0,), dtype=ct)
    dx = matmul(rows, weight.T).reshape(x.shape) if need_x else empty
    dweight = matmul(x.reshape(-1, x.shape[-1]).T, rows) if need_weight else empty
    dbias = rows.sum(axis=0) if need_bias else empty
    return tuple(a.astype(dtype, copy=False) for a in (dx, dweight, dbias)) if cast else (dx, dweight, dbias)


_linear_grad_op = None  # the internal op _linear_grad (set by register)


_fused_on: dict = {}   # (device type, dtype, registry generation) -> whether the fused backward serves it


def _level(registry, op: str, chain, dtype) -> int:
    """How far along the device's chain (itself, its parents, the generic kernels) op's kernel is found."""
    for i, device in enumerate(chain):
        if (op, device, dtype) in registry.kernels or (op, device, ANY_DTYPE) in registry.kernels:
            return i
    return len(chain)


def _fused_serves(device: str, dtype) -> bool:
    """Whether the fused op may stand in for the two matmul ops on this device: only where its _linear_grad kernel
    is the device's own at least as much as its matmul kernel is (the generic one with the generic matmul,
    oarlock-cpu's with oarlock-cpu's MKL matmul), so a device's own matmul (a vendor's) is never bypassed."""
    registry = default_registry()
    key = (device, dtype, registry.generation)   # a plugin registered later may change the answer
    found = _fused_on.get(key)
    if found is None:
        chain = [*registry.parent_chain(device), GENERIC]
        found = _fused_on[key] = _level(registry, "_linear_grad", chain, dtype) <= _level(registry, "matmul", chain,
                                                                                          dtype)
    return found


def _fused_linear_grad(ctx, g):
    """The rule's first-order case as one op call (instead of two matmuls, reshapes and a sum, each an op), for
    float32/float64 operands of one dtype, x with rows, and a bias (if any) of shape [out]."""
    x, weight = ctx.saved
    dtype, edges = g.dtype, ctx.edges
    if (oarlock.is_grad_enabled() or x.ndim < 2 or x.dtype is not dtype or weight.dtype is not dtype
            or not (dtype is oarlock.float32 or dtype is oarlock.float64)
            or (edges[2] is not None and tuple(ctx.meta[2][0]) != (ctx.meta[1][0][1],))
            or not _fused_serves(g.place.type, dtype)):
        return None
    need_x, need_weight, need_bias = edges[0] is not None, edges[1] is not None, edges[2] is not None
    dx, dweight, dbias = _linear_grad_op(x, weight, g, need_x, need_weight, need_bias)
    return dx if need_x else None, dweight if need_weight else None, dbias if need_bias else None


def _linear_grad(ctx, g):
    fused = _fused_linear_grad(ctx, g)
    if fused is not None:
        return fused
    x, weight = ctx.saved
    in_features, out_features = ctx.meta[1][0]
    dx = oarlock.matmul(g, weight, transpose_y=True) if ctx.edges[0] is not None else None
    dw = None
    if ctx.edges[1] is not None:  # sum x^T g over every batch position
        x2 = x if len(x.shape) == 2 else oarlock.reshape(x, [-1, in_features])
        g2 = g if len(g.shape) == 2 else oarlock.reshape(g, [-1, out_features])
        dw = oarlock.matmul(x2, g2, transpose_x=True)
    return dx, dw, unbroadcast(ctx, 2, g)


# -- norms ---------------------------------------------------------------------------------------------------

_MATRIX_P = ("fro", "nuc", 1, -1, 2, -2, math.inf, -math.inf)


def _norm_plan(p, axis, ndim, mode=None):
    """(matrix, p, axes): whether it is a matrix norm, the canonical p (a float, 'fro' or 'nuc') and the
    sorted non-negative axes reduced. mode forces 'vector' or 'matrix' (vector_norm, matrix_norm)."""
    if isinstance(p, bool) or not (p is None or isinstance(p, numbers.Real) or p in ("fro", "nuc")):
        raise ValueError(f"argument 'p' must be a number (inf and -inf included), 'fro' or 'nuc', got {p!r}")
    span = max(ndim, 1)
    axes = tuple(range(ndim)) if axis is None else (axis,) if isinstance(axis, int) else tuple(axis)
    for a in axes:
        if not -span <= a < span:
            raise ValueError(f"argument 'axis' holds {a}, out of range for a {ndim}-D tensor; it accepts "
                             f"[{-span}, {span - 1}]")
    axes = tuple(a % span for a in axes) if ndim else ()
    if len(set(axes)) != len(axes):
        raise ValueError(f"argument 'axis' names a dimension twice: {list(axis)}")
    matrix = mode == "matrix" or (mode is None and (len(axes) == 2 and axis is not None or p == "nuc"))
    if not matrix:
        if p == "nuc":
            raise ValueError("p='nuc' is a matrix norm: give axis as two dimensions (or a 2-D x)")
        return False, 2.0 if p in (None, "fro") else float(p), axes
    if len(axes) != 2:
        raise ValueError(f"a matrix norm needs exactly two axes, got axis={axis!r} for a {ndim}-D tensor")
    p = "fro" if p is None else p
    if p not in _MATRIX_P:
        raise ValueError(f"argument 'p' must be one of 'fro', 'nuc', 1, -1, 2, -2, inf, -inf for a matrix norm, "
                         f"got {p!r}")
    return True, p if isinstance(p, str) else float(p), axes


def _keep_shape(shape, axes):
    return [1 if d in axes else n for d, n in enumerate(shape)]


def _to_end(xp, x, axes):
    """x with the two matrix axes moved last (for the SVD)."""
    return xp.moveaxis(x, axes, (-2, -1))


def _vector_norm(xp, a, p, axes):
    if p == math.inf:
        return xp.max(a, axis=axes, keepdims=True)
    if p == -math.inf:
        return xp.min(a, axis=axes, keepdims=True)
    if p == 0:
        return xp.sum(a != 0, axis=axes, keepdims=True).astype(a.dtype)
    if p == 1:
        return xp.sum(a, axis=axes, keepdims=True)
    if p == 2:
        return xp.sqrt(xp.sum(a * a, axis=axes, keepdims=True))
    return xp.sum(a ** p, axis=axes, keepdims=True) ** (1.0 / p)


def _matrix_norm(xp, x, a, p, axes):
    if p == "fro":
        return xp.sqrt(xp.sum(a * a, axis=axes, keepdims=True))
    if p in ("nuc", 2.0, -2.0):
        s = xp.linalg.svd(_to_end(xp, x, axes), compute_uv=False)
        s = xp.sum(s, axis=-1) if p == "nuc" else xp.max(s, axis=-1) if p > 0 else xp.min(s, axis=-1)
        return xp.reshape(s, _keep_shape(x.shape, axes))
    # 1: the largest column sum (summing over the first axis); inf: the largest row sum
    summed, other = (axes[0], axes[1]) if abs(p) == 1 else (axes[1], axes[0])
    sums = xp.sum(a, axis=summed, keepdims=True)
    return xp.max(sums, axis=other, keepdims=True) if p > 0 else xp.min(sums, axis=other, keepdims=True)


def _norm_kernel(mode=None):
    def kernel(xp, x, p=None, axis=None, keepdim=False, dtype=None):
        matrix, p, axes = _norm_plan(p, axis, x.ndim, mode)
        want = x.dtype if dtype is None else xp.dtype(dtype)
        x = x.astype(compute_dtype(xp, want), copy=False)
        a = xp.abs(x)
        out = _matrix_norm(xp, x, a, p, axes) if matrix else _vector_norm(xp, a, p, axes)
        if not keepdim:
            out = xp.reshape(out, [n for d, n in enumerate(x.shape) if d not in axes])
        return out.astype(want, copy=False)
    return kernel


_norm_svd_grad = None  # the internal op (ops.define's callable, set by register): the rule below calls it


def _norm_svd_grad_kernel(xp, x, p, axis):
    """d (nuclear / spectral / smallest-singular-value norm) / dx: U V^T, or u v^T of the largest
    (p=2) or smallest (p=-2) singular value, for the planes spanned by the two axes."""
    ct = compute_dtype(xp, x.dtype)
    u, s, vh = xp.linalg.svd(_to_end(xp, x.astype(ct, copy=False), axis), full_matrices=False)
    if p != "nuc":
        k = (xp.argmax(s, axis=-1) if p > 0 else xp.argmin(s, axis=-1))[..., None, None]
        u = xp.take_along_axis(u, k, axis=-1)
        vh = xp.take_along_axis(vh, k, axis=-2)
    return xp.moveaxis(u @ vh, (-2, -1), axis).astype(x.dtype, copy=False)


def _norm_grad(ctx, g):
    x, out = ctx.saved
    a = ctx.attrs
    mode = {"vector_norm": "vector", "matrix_norm": "matrix"}.get(ctx.name)
    matrix, p, axes = _norm_plan(a.get("p"), a.get("axis"), x.ndim, mode)
    if x.dtype != out.dtype:  # dtype= computed the norm in another dtype
        x = oarlock.cast(x, out.dtype)
    keep = _keep_shape(x.shape, axes)
    g, out = oarlock.reshape(g, keep), oarlock.reshape(out, keep)
    if matrix and p in ("nuc", 2.0, -2.0):
        if oarlock.is_grad_enabled():
            raise NotImplementedError(f"oarlock.norm(): the gradient of the p={p!r} matrix norm cannot be "
                                      f"differentiated again (it needs the gradient of an SVD)")
        return g * _norm_svd_grad(x, p, list(axes))
    if not matrix and p == 0:
        return oarlock.zeros_like(x)
    if (matrix and p == "fro") or p == 2:  # x / norm, 0 where the norm is 0 (x is 0 there)
        return g * x / oarlock.masked_fill(out, out == 0, 1.0)
    sign = oarlock.sign(x)
    if matrix:  # +-1, +-inf: the winning column (row) sums share g; each of their elements gets sign(x)
        summed, other = (axes[0], axes[1]) if abs(p) == 1 else (axes[1], axes[0])
        hits = oarlock.cast(oarlock.sum(oarlock.abs(x), axis=summed, keepdim=True) == out, x.dtype)
        return g * sign * hits / oarlock.sum(hits, axis=other, keepdim=True)
    if math.isinf(p):  # ties share g evenly
        hits = oarlock.cast(oarlock.abs(x) == out, x.dtype)
        return g * sign * hits / oarlock.sum(hits, axis=list(axes), keepdim=True)
    if p == 1:
        return g * sign
    safe = oarlock.masked_fill(out, out == 0, 1.0)
    return g * sign * oarlock.abs(x) ** (p - 1) / safe ** (p - 1)


def register(ops):
    real = ("int", "float")
    ops.define("matmul(x: Tensor, y: Tensor, transpose_x: bool = False, transpose_y: bool = False) -> Tensor",
               public=["matmul", "mm", "Tensor.matmul", "Tensor.mm", "oarlock.linalg.matmul"],
               aliases={"input": "x", "mat2": "y"},
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
    global _linear_grad_op
    _linear_grad_op = ops.define(
        "_linear_grad(x: Tensor, weight: Tensor, g: Tensor, need_x: bool = True, need_weight: bool = True, "
        "need_bias: bool = True) -> tuple[Tensor, Tensor, Tensor]", internal=True, promote=True, dtypes=("float",),
        doc="linear's fused first-order backward: (g weight^T, x^T g summed over the rows, the column sums of g), "
            "an empty [0] tensor for each one not needed.")
    ops.kernel("_linear_grad")(_linear_grad_kernel)

    norm_options = {"dtypes": ("float",), "grad": _norm_grad, "saves": ("x", "out")}
    ops.define("norm(x: Tensor, p: Any = None, axis: Axis|None = None, keepdim: bool = False, "
               "dtype: DType|None = None) -> Tensor", public=["norm", "Tensor.norm", "oarlock.linalg.norm"],
               aliases={"input": "x", "A": "x", "ord": "p", "dim": "axis"}, **norm_options,
               doc="Vector or matrix norm (Paddle's rules: axis None flattens, one axis gives vector norms, two "
                   "axes matrix norms); p: a number, inf, -inf, 'fro' or 'nuc'.")
    ops.kernel("norm")(_norm_kernel())
    ops.define("vector_norm(x: Tensor, p: Any = 2.0, axis: Axis|None = None, keepdim: bool = False, "
               "dtype: DType|None = None) -> Tensor", public=["oarlock.linalg.vector_norm"],
               aliases={"input": "x", "ord": "p", "dim": "axis"}, **norm_options,
               doc="The p-norm of x's elements over axis (None: all of them), as a vector.")
    ops.kernel("vector_norm")(_norm_kernel("vector"))
    ops.define("matrix_norm(x: Tensor, p: Any = 'fro', axis: Axis = [-2, -1], keepdim: bool = False, "
               "dtype: DType|None = None) -> Tensor", public=["oarlock.linalg.matrix_norm"],
               aliases={"input": "x", "A": "x", "ord": "p", "dim": "axis"}, **norm_options,
               doc="The matrix norm ('fro', 'nuc', 1, -1, 2, -2, inf, -inf) of the planes spanned by two axes.")
    ops.kernel("matrix_norm")(_norm_kernel("matrix"))
    global _norm_svd_grad
    _norm_svd_grad = ops.define("_norm_svd_grad(x: Tensor, p: Any, axis: Axis) -> Tensor", internal=True,
                                dtypes=("float",),
                                doc="The gradient direction of the 'nuc', 2 and -2 matrix norms (it has no rule "
                                    "of its own).")
    ops.kernel("_norm_svd_grad")(_norm_svd_grad_kernel)
