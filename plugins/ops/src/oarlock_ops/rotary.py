"""Rotary position embedding as one op: fused_rotary_embedding(x, cos, sin) (oarlock.nn.functional).

out = x * cos + rotate_half(x) * sin, with rotate_half(x) = concat([x[..., D/2:], x[..., :D/2]]): pair i of
the last axis, (x[i], x[i + D/2]) (the "rotate half" layout of GPT-NeoX and LLaMA), rotates by its angle.
The sine table carries the sign of the rotation (-sin on the first half, +sin on the second), so no
negation is needed: x[i] -> x[i] cos - x[i + D/2] sin and x[i + D/2] -> x[i + D/2] cos + x[i] sin for
the usual tables. cos and sin broadcast against x (typically [1, T, 1, D] for x [B, T, H, D]) but may not
change its shape; D must be even.

This is not Paddle's incubate fused_rotary_position_embedding (which takes q, k, v, an unsigned sin and
position ids); it is the one-call form of the composite that oarlock_train's model used, and it gives
the same numbers: the generic kernel does x * cos + swapped * sin in that order (16-bit floats compute in
float32 and round once).

The gradient of x is the transposed rotation, out^T = g * cos + rotate_half(g * sin), which is this op
with transpose=True (keyword-only, so plain calls stay on the dispatcher's fast path); the transpose of
the transpose is the rotation again, so every order of gradient is one call of this op. The gradients
of cos and sin (rarely wanted: they are usually constant tables) are g * x and g * rotate_half(x) (or
rotate_half(g) * x for the transpose), summed back to their shapes.
"""

from __future__ import annotations

import oarlock
from oarlock.nn import functional as F
from oarlock_ops._grad import sum_to_shape
from oarlock_ops.linalg import compute_dtype


def _broadcast_shape(*shapes):
    """numpy's broadcast of shapes, or None when they do not broadcast."""
    ndim = max(len(s) for s in shapes)
    out = []
    for dims in zip(*[(1,) * (ndim - len(s)) + tuple(s) for s in shapes]):
        sizes = {d for d in dims if d != 1}
        if len(sizes) > 1:
            return None
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def check_rotary(x_shape, cos_shape, sin_shape):
    """Raise ValueError, naming the shapes, unless fused_rotary_embedding accepts them."""
    if len(x_shape) == 0:
        raise ValueError("x must have at least one dimension (the rotated one), got a 0-D tensor")
    if x_shape[-1] % 2:
        raise ValueError(f"the last dimension of x must be even (pairs (x[i], x[i + D/2]) rotate), got x shape "
                         f"{list(x_shape)}")
    for name, shape in (("cos", cos_shape), ("sin", sin_shape)):
        if _broadcast_shape(x_shape, shape) != tuple(x_shape):
            raise ValueError(f"{name} must broadcast to x's shape {list(x_shape)} without changing it, got {name} "
                             f"shape {list(shape)}")


def _halves(a):
    """[..., D] -> a [..., 2, D/2] view (a copy if `a` is not contiguous): [..., ::-1, :] of it is
    rotate_half's swap, with no concatenate."""
    return a.reshape(*a.shape[:-1], 2, a.shape[-1] // 2)


def _table(xp, t, x_shape):
    """cos or sin made contiguous over x's trailing axes from its first non-1 axis on ([1, T, 1, D] for x
    [B, T, H, D] becomes [1, T, H, D]): x * table then runs one long inner loop per leading index instead of
    one per D values. The copy is at most one leading slice of x."""
    t = t.reshape((1,) * (len(x_shape) - t.ndim) + tuple(t.shape))
    lead = next((i for i, n in enumerate(t.shape) if n != 1), t.ndim)
    target = (1,) * lead + tuple(x_shape[lead:])
    if t.shape == target:
        return t
    return xp.ascontiguousarray(xp.broadcast_to(t, target))


def _rotary(xp, x, cos, sin, *, transpose=False):
    check_rotary(x.shape, cos.shape, sin.shape)
    ct = compute_dtype(xp, x.dtype)
    if ct != x.dtype:
        x, cos, sin = (a.astype(ct) for a in (x, cos, sin))
    cos, sin = _table(xp, cos, x.shape), _table(xp, sin, x.shape)
    out = xp.empty(x.shape, dtype=ct)  # contiguous, so _halves(out) is a view
    xp.multiply(x, cos, out=out)
    if transpose:                 # x * cos + rotate_half(x * sin)
        turned = _halves(xp.multiply(x, sin))[..., ::-1, :]
    else:                         # x * cos + rotate_half(x) * sin
        turned = xp.multiply(_halves(x)[..., ::-1, :], _halves(sin))
    halves = _halves(out)
    xp.add(halves, turned, out=halves)
    return out


def _in_dtype(kernel):
    """Round 16-bit results once, back to x's dtype."""
    def run(xp, x, cos, sin, *, transpose=False):
        out = kernel(xp, x, cos, sin, transpose=transpose)
        return out.astype(x.dtype, copy=False)
    return run


def _swap(t):
    half = t.shape[-1] // 2
    return oarlock.concat([t[..., half:], t[..., :half]], axis=-1)


def _rotary_rule(ctx, g):
    x, cos, sin = ctx.saved
    transpose = bool(ctx.attrs.get("transpose", False))
    dx = dcos = dsin = None
    if ctx.edges[0] is not None:
        dx = F.fused_rotary_embedding(g, cos, sin, transpose=not transpose)
    if ctx.edges[1] is not None:
        dcos = sum_to_shape(g * x, ctx.meta[1][0])
    if ctx.edges[2] is not None:
        dsin = sum_to_shape(_swap(g) * x if transpose else g * _swap(x), ctx.meta[2][0])
    return dx, dcos, dsin


def register(ops):
    ops.define("fused_rotary_embedding(x: Tensor, cos: Tensor, sin: Tensor, *, transpose: bool = False) -> Tensor",
               public=["oarlock.nn.functional.fused_rotary_embedding"], aliases={"input": "x"}, promote=True,
               dtypes=("float",), grad=_rotary_rule, saves=("x", "cos", "sin"),
               doc="Rotary position embedding in one call: x * cos + rotate_half(x) * sin (rotate_half swaps the "
                   "halves of the last axis; sin carries the sign, -sin on the first half). cos and sin broadcast "
                   "to x's shape. transpose=True: x * cos + rotate_half(x * sin), the gradient of x.")
    ops.kernel("fused_rotary_embedding")(_in_dtype(_rotary))
