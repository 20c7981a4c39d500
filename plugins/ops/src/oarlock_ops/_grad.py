"""Helpers backward rules share. Rules see Tensors and call public ops, so they work on
every device and can themselves be differentiated (create_graph=True)."""

from __future__ import annotations

import oarlock


def sum_to_shape(g, shape):
    """Undo broadcasting: sum g over the axes that broadcasting added or stretched to reach `shape`."""
    gshape = tuple(g.shape)
    shape = tuple(shape)
    if gshape == shape:
        return g
    lead = len(gshape) - len(shape)
    axes = list(range(lead)) + [lead + i for i, n in enumerate(shape) if n == 1 and gshape[lead + i] != 1]
    if axes and axes[-1] < lead:   # only leading axes added (a bias): one sum lands on the shape
        return oarlock.sum(g, axis=axes)
    if axes:
        g = oarlock.sum(g, axis=axes, keepdim=True)
    return oarlock.reshape(g, list(shape)) if tuple(g.shape) != shape else g


def unbroadcast(ctx, i, g):
    """The gradient for input i of a broadcasting op, or None when that input needs none."""
    if ctx.edges[i] is None:
        return None
    return sum_to_shape(g, ctx.meta[i][0])
