"""Reductions: sum, mean, max, min, prod, var, std, argmax, argmin, logsumexp, cumsum, all, any."""

from __future__ import annotations

import oarlock


def _sum_grad(ctx, g):
    shape = ctx.meta[0][0]
    axis, keepdim = ctx.attrs["axis"], ctx.attrs["keepdim"]
    if not keepdim and axis is not None and len(shape):
        axes = (axis,) if isinstance(axis, int) else axis
        g = oarlock.unsqueeze(g, [a % len(shape) for a in axes]) if axes else g
    return oarlock.expand(g, list(shape)) if list(g.shape) != list(shape) else g


def register(ops):
    ops.define("sum(x: Tensor, axis: Axis|None = None, dtype: DType|None = None, keepdim: bool = False) -> Tensor",
               public=["sum", "Tensor.sum"], aliases={"input": "x", "dim": "axis"}, grad=_sum_grad)

    @ops.kernel("sum")
    def sum_(xp, x, axis=None, dtype=None, keepdim=False):
        if dtype is None and x.dtype.kind in "biu":
            dtype = xp.int64  # Paddle sums bool and integers in int64
        return xp.sum(x, axis=axis, dtype=dtype, keepdims=keepdim)
