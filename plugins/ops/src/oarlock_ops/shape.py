"""Shape ops: reshape, transpose, squeeze, unsqueeze, concat, stack, split, chunk, expand,
broadcast_to, flatten, tile. Their gradients are shape ops too."""

from __future__ import annotations

import oarlock
from oarlock_ops._grad import sum_to_shape


def _reshape_grad(ctx, g):
    return oarlock.reshape(g, list(ctx.meta[0][0]))


def _expand_grad(ctx, g):
    return sum_to_shape(g, ctx.meta[0][0])


def _normalize_axes(axes, ndim, op):
    axes = [axes] if isinstance(axes, int) else list(axes)
    out = []
    for a in axes:
        if not -ndim <= a < ndim:
            raise ValueError(f"axis {a} is out of range for a result with {ndim} dimensions")
        out.append(a % ndim)
    return sorted(out)


def _unsqueeze_kernel(xp, x, axis):
    out_ndim = x.ndim + (1 if isinstance(axis, int) else len(axis))
    shape = list(x.shape)
    for a in _normalize_axes(axis, out_ndim, "unsqueeze"):
        shape.insert(a, 1)
    return xp.reshape(x, shape)


def _expand_kernel(xp, x, shape):
    shape = list(shape)
    lead = len(shape) - x.ndim
    if lead < 0:
        raise ValueError(f"cannot expand a {x.ndim}-d tensor of shape {list(x.shape)} to {len(shape)} dimensions")
    target = [x.shape[i - lead] if (n == -1 and i >= lead) else n for i, n in enumerate(shape)]
    return xp.broadcast_to(x, target).copy()


def register(ops):
    ops.define("reshape(x: Tensor, shape: Shape) -> Tensor", public=["reshape", "Tensor.reshape", "Tensor.view"],
               aliases={"input": "x"}, grad=_reshape_grad, varargs="shape")
    ops.kernel("reshape")(lambda xp, x, shape: xp.reshape(x, shape))

    ops.define("unsqueeze(x: Tensor, axis: Axis) -> Tensor", public=["unsqueeze", "Tensor.unsqueeze"],
               aliases={"input": "x", "dim": "axis"}, grad=_reshape_grad)
    ops.kernel("unsqueeze")(_unsqueeze_kernel)

    ops.define("expand(x: Tensor, shape: Shape) -> Tensor", public=["expand", "Tensor.expand"],
               aliases={"input": "x", "size": "shape"}, grad=_expand_grad, varargs="shape")
    ops.kernel("expand")(_expand_kernel)
