"""paddle.incubate.nn.functional.moe_combine and moe_combine_no_weight, as Paddle 3.2's GPU kernels
(paddle/phi/kernels/gpu/moe_combine_kernel.cu, moe_combine_grad_kernel.cu, moe_combine_no_weight_kernel.cu and
MoeCombineInferMeta / MoeCombineNoWeightInferMeta) compute them. Paddle registers them for the GPU only.

moe_combine(x [N, H], combine_weights [S, k], scatter_index [S, k] int32) -> y [S, H]:
    y[s] = sum_j combine_weights[s, j] * x[scatter_index[s, j]]
scatter_index is read as [S, k] (the kernel indexes it s * k + j), so moe_gate_dispatch's [k, S] index is passed
transposed; combine_weights has x's dtype. Backward (moe_combine_grad): x_grad[scatter_index[s, j]] =
y_grad[s] * combine_weights[s, j] where that weight is non-zero (Paddle writes; rows reached twice are summed
here, where Paddle's result would depend on the write order), and combine_weights_grad[s, j] =
sum_h y_grad[s, h] * x[scatter_index[s, j], h], for every slot, a zero weight's included.

moe_combine_no_weight(x [S * k, H], combine_weight [S, k], scatter_index [S, k] int32, epsilon=1e-15) -> [S, H]:
    y[s] = sum over j with combine_weight[s, j] > epsilon of x[scatter_index[s, j]]
The sum runs in float32. Paddle 3.2 added combine_weight and epsilon to this op; the kernel source of that
version was not available here (the earlier one, without them, sums every slot), so the mask above -- the
weights' only plausible role, skipping the slots dispatch dropped, which carry weight 0 and index 0 -- is our
reading, not a copy. Its gradient reaches x only (the rows of the kept slots get y_grad[s]).

moe_combine is one op (moe_combine_op, internal) with a generic kernel and a "gpu" kernel in oarlock-cuda; its
backward is the op moe_combine_grad_op (generic kernel only; like Paddle's, it has no gradient of its own)."""

from __future__ import annotations

import numpy as np

import oarlock

FUNCTIONS = ("moe_combine", "moe_combine_no_weight")
OP = "moe_combine_op"
GRAD_OP = "moe_combine_grad_op"
_op = _grad_op = None


def combine_kernel(xp, x, combine_weights, scatter_index):
    """Generic kernel of moe_combine_op (16-bit inputs summed in float32, rounded once)."""
    s, k = scatter_index.shape
    work = np.float32 if x.dtype.itemsize < 4 else x.dtype
    picked = x[scatter_index.reshape(-1).astype(np.int64)].astype(work).reshape(s, k, x.shape[1])
    y = (picked * combine_weights.astype(work)[..., None]).sum(axis=1)
    return y.astype(x.dtype, copy=False)


def combine_grad_kernel(xp, x, combine_weights, scatter_index, grad_y):
    """Generic kernel of moe_combine_grad_op: (x_grad, combine_weights_grad), 16-bit inputs in float32. Rows of
    x reached by one live slot are written directly; np.add.at (slow) runs only when some row is reached twice."""
    s, k = scatter_index.shape
    h = x.shape[1]
    work = np.float32 if x.dtype.itemsize < 4 else x.dtype
    index = scatter_index.reshape(-1).astype(np.int64)
    g = grad_y.astype(work)
    w = combine_weights.astype(work)
    live = (combine_weights != 0).reshape(-1)
    rows = (g[:, None, :] * w[..., None]).reshape(s * k, h)[live]
    targets = index[live]
    dx = xp.zeros(x.shape, dtype=work)
    if targets.size and int(xp.bincount(targets).max()) > 1:
        xp.add.at(dx, targets, rows)
    else:
        dx[targets] = rows
    dw = (g[:, None, :] * x[index].astype(work).reshape(s, k, h)).sum(axis=-1)
    return dx.astype(x.dtype, copy=False), dw.astype(combine_weights.dtype, copy=False)


def _combine_grad(ctx, g):
    x, weights, scatter_index = ctx.saved
    dx, dw = _grad_op(x, weights, scatter_index, g)
    return (dx if ctx.edges[0] is not None else None), (dw if ctx.edges[1] is not None else None), None


def _check(fn, x, weights, scatter_index, wname, one_row_per_slot=False):
    for arg, value in (("x", x), (wname, weights), ("scatter_index", scatter_index)):
        if not isinstance(value, oarlock.Tensor):
            raise TypeError(f"{fn}(): argument '{arg}' must be a Tensor; got {type(value).__name__}")
    if x.ndim != 2:
        raise ValueError(f"{fn}(): argument 'x' has shape {list(x.shape)}; accepted: 2-D [rows, hidden]")
    if scatter_index.ndim != 2 or list(weights.shape) != list(scatter_index.shape):
        raise ValueError(f"{fn}(): arguments '{wname}' {list(weights.shape)} and 'scatter_index' "
                         f"{list(scatter_index.shape)}; accepted: both [seq_len, k] (scatter_index of "
                         "moe_gate_dispatch transposed)")
    if str(scatter_index.dtype).split(".")[-1] != "int32":
        raise TypeError(f"{fn}(): argument 'scatter_index' has dtype {scatter_index.dtype}; accepted: int32")
    if one_row_per_slot and x.shape[0] != scatter_index.size:
        raise ValueError(f"{fn}(): argument 'x' has {x.shape[0]} rows; accepted: seq_len * k = {scatter_index.size}")
    if scatter_index.size:
        lo, hi = int(scatter_index.min()), int(scatter_index.max())
        if lo < 0 or hi >= x.shape[0]:
            raise ValueError(f"{fn}(): argument 'scatter_index' holds values in [{lo}, {hi}]; accepted: row "
                             f"numbers of x in [0, {x.shape[0] - 1}]")


def moe_combine(x, combine_weights, scatter_index, name=None):
    """y[s] = sum_j combine_weights[s, j] * x[scatter_index[s, j]]: x [N, H], combine_weights [S, k] (x's
    dtype), scatter_index [S, k] int32 -> y [S, H]. Differentiable in x and combine_weights."""
    _check("moe_combine", x, combine_weights, scatter_index, "combine_weights")
    if combine_weights.dtype != x.dtype:
        raise TypeError(f"moe_combine(): argument 'combine_weights' has dtype {combine_weights.dtype}; accepted: "
                        f"x's dtype {x.dtype}")
    return _op(x, combine_weights, scatter_index)


def moe_combine_no_weight(x, combine_weight, scatter_index, epsilon=1e-15, name=None):
    """y[s] = sum of x[scatter_index[s, j]] over the slots j whose combine_weight exceeds epsilon (see the
    module docstring): x [S * k, H], combine_weight / scatter_index [S, k] -> y [S, H]."""
    _check("moe_combine_no_weight", x, combine_weight, scatter_index, "combine_weight", one_row_per_slot=True)
    s, k = scatter_index.shape
    keep = (combine_weight > float(epsilon)).astype("float32").detach()
    picked = oarlock.gather(x, scatter_index.reshape([-1]).astype("int64"), axis=0).reshape([s, k, x.shape[1]])
    return (picked.astype("float32") * keep.unsqueeze(-1)).sum(axis=1).astype(x.dtype)


def register(ops):
    """Define moe_combine_op, its backward moe_combine_grad_op and their generic kernels."""
    global _op, _grad_op
    _op = ops.define(
        f"{OP}(x: Tensor, combine_weights: Tensor, scatter_index: Tensor) -> Tensor",
        internal=True, nondiff=("scatter_index",), grad=_combine_grad,
        saves=("x", "combine_weights", "scatter_index"),
        doc="Paddle's moe_combine kernel; the public API is oarlock.incubate.nn.functional.moe_combine.")
    ops.kernel(OP)(combine_kernel)
    _grad_op = ops.define(
        f"{GRAD_OP}(x: Tensor, combine_weights: Tensor, scatter_index: Tensor, grad_y: Tensor) "
        "-> tuple[Tensor, Tensor]",
        internal=True, doc="Paddle's moe_combine_grad kernel: (x_grad, combine_weights_grad).")
    ops.kernel(GRAD_OP)(combine_grad_kernel)
