"""Piecewise activations of Paddle's nn.functional that mobile networks use: relu6, hardswish, hardsigmoid and
swish, with Paddle 3.2's signatures, defaults and gradients (floats only, like Paddle's kernels).

The gradients follow Paddle's kernels at the kinks: relu6 passes g where 0 < out < 6; hardsigmoid passes
slope * g where 0 < out < 1; hardswish gives 0 at and below -3, 1 at and above 3 and (2x + 3) / 6 between.
"""

from __future__ import annotations

import oarlock
from oarlock_ops.unary import _in_float32  # half precision computes in float32 and rounds once


def _relu6(xp, x):
    return xp.clip(x, 0, 6).astype(x.dtype, copy=False)


def _relu6_grad(ctx, g):
    (out,) = ctx.saved
    return g * ((out > 0) & (out < 6))


def _hardswish(xp, x):
    return (x * xp.clip(x + 3, 0, 6) / 6).astype(x.dtype, copy=False)


def _hardswish_grad(ctx, g):
    (x,) = ctx.saved
    slope = oarlock.where(x <= -3, oarlock.zeros_like(x), oarlock.where(x < 3, (2 * x + 3) / 6, oarlock.ones_like(x)))
    return g * slope


def _hardsigmoid(xp, x, slope=0.1666667, offset=0.5):
    return xp.clip(x * slope + offset, 0, 1).astype(x.dtype, copy=False)


def _hardsigmoid_grad(ctx, g):
    (out,) = ctx.saved
    return g * (((out > 0) & (out < 1)) * ctx.attrs["slope"])


def _swish(xp, x):
    return (x / (1 + xp.exp(-x))).astype(x.dtype, copy=False)


def _swish_grad(ctx, g):
    (x,) = ctx.saved
    s = oarlock.sigmoid(x)
    return g * s * (1 + x * (1 - s))


# name, signature after the name, kernel, rule, the tensor the rule saves
ACTIVATIONS = [
    ("relu6", "(x: Tensor) -> Tensor", _relu6, _relu6_grad, "out"),
    ("hardswish", "(x: Tensor) -> Tensor", _hardswish, _hardswish_grad, "x"),
    ("hardsigmoid", "(x: Tensor, slope: float = 0.1666667, offset: float = 0.5) -> Tensor", _hardsigmoid,
     _hardsigmoid_grad, "out"),
    ("swish", "(x: Tensor) -> Tensor", _swish, _swish_grad, "x"),
]


def register(ops):
    for name, signature, kernel, rule, saves in ACTIVATIONS:
        ops.define(name + signature, public=[f"oarlock.nn.functional.{name}"], dtypes=("float",), grad=rule,
                   saves=(saves,), aliases={"input": "x"})
        ops.kernel(name)(_in_float32(kernel))
