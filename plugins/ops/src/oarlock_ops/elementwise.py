"""Elementwise math with broadcasting: arithmetic, unary functions, comparisons, logic, cast."""

from __future__ import annotations

import oarlock
from oarlock_ops._grad import unbroadcast


def _add_grad(ctx, g):
    return unbroadcast(ctx, 0, g), unbroadcast(ctx, 1, g)


def _multiply_grad(ctx, g):
    x, y = ctx.saved
    return unbroadcast(ctx, 0, g * y), unbroadcast(ctx, 1, g * x)


def _cast_grad(ctx, g):
    return oarlock.cast(g, ctx.meta[0][1])


def register(ops):
    binary = "(x: TensorOrScalar, y: TensorOrScalar) -> Tensor"
    numeric = ("int", "float", "complex")
    ops.define("add" + binary, public=["add", "Tensor.add"], promote=True, grad=_add_grad, dtypes=numeric,
               aliases={"input": "x", "other": "y"})
    ops.kernel("add")(lambda xp, x, y: xp.add(x, y))
    ops.define("multiply" + binary, public=["multiply", "mul", "Tensor.multiply", "Tensor.mul"], promote=True,
               dtypes=numeric,
               grad=_multiply_grad, saves=("x", "y"), aliases={"input": "x", "other": "y"})
    ops.kernel("multiply")(lambda xp, x, y: xp.multiply(x, y))

    ops.define("cast(x: Tensor, dtype: DType) -> Tensor", public=["cast", "Tensor.cast", "Tensor.astype"],
               grad=_cast_grad, aliases={"input": "x"})
    ops.kernel("cast")(lambda xp, x, dtype: x.astype(dtype))
