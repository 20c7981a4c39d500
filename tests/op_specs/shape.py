"""Specs for the shape family."""

import numpy as np

import oarlock
from op_specs.base import ALL, Case, In, OpSpec


def _expand_ref(x, shape):
    lead = len(shape) - x.ndim
    return np.broadcast_to(x, [x.shape[i - lead] if s == -1 else s for i, s in enumerate(shape)])


def _permute_ref(x, *perm):
    if len(perm) == 1 and isinstance(perm[0], (list, tuple)):
        perm = perm[0]
    return np.transpose(x, perm)


def _transpose_ref(x, perm, dim1=None):
    """A permutation, or (transpose(x, dim0, dim1)) the two axes to swap."""
    if dim1 is None:
        return np.transpose(x, perm)
    return x if x.ndim == 0 else np.swapaxes(x, perm, dim1)  # a 0-d tensor takes axes 0 and -1


def _squeeze_ref(x, axis=None, dim=None):
    axis = dim if axis is None else axis
    if axis is None:
        return np.squeeze(x)
    axes = [a % max(x.ndim, 1) for a in np.atleast_1d(axis)]
    return np.reshape(x, [n for i, n in enumerate(x.shape) if not (i in axes and n == 1)])


def _flatten_ref(x, start_axis=0, stop_axis=-1):
    if x.ndim == 0:
        return x.reshape(1)
    start, stop = start_axis % x.ndim, stop_axis % x.ndim
    return x.reshape(x.shape[:start] + (int(np.prod(x.shape[start:stop + 1])),) + x.shape[stop + 1:])


def _split_ref(x, sections, axis=0):
    size = x.shape[axis]
    if isinstance(sections, int):
        sections = [size // sections] * sections
    sections = [size - sum(s for s in sections if s != -1) if s == -1 else s for s in sections]
    return np.split(x, np.cumsum(sections)[:-1], axis=axis)


def _list_call(name):
    """Call a list op with the case's tensors gathered into its first argument."""
    return lambda *xs, **kw: getattr(oarlock, name)(list(xs), **kw)


def _axis_of(kw):
    return kw.get("axis", kw.get("dim", 0))


SPECS = [
    OpSpec("reshape", [
        Case([In((3, 4)), [2, 6]], name="2d"),
        Case([In((3, 4)), [-1]], name="flat"),
        Case([In(()), [1, 1]], name="0d"),
        Case([In((0, 4)), [4, 0]], name="empty"),
    ], ref=lambda x, shape: np.reshape(x, shape), dtypes=ALL),
    OpSpec("unsqueeze", [
        Case([In((3, 4)), 0], name="front"),
        Case([In((3, 4)), [-1, 1]], name="two"),
        Case([In(()), 0], name="0d"),
    ], ref=lambda x, axis: np.expand_dims(x, tuple(np.atleast_1d(axis))), dtypes=ALL),
    OpSpec("expand", [
        Case([In((3, 1)), [2, 3, 4]], name="bcast"),
        Case([In((4,)), [3, -1]], name="minus1"),
        Case([In(()), [2, 2]], name="0d"),
    ], ref=_expand_ref, dtypes=ALL),
    OpSpec("broadcast_to", [
        Case([In((3, 1)), [2, 3, 4]], name="bcast"),
        Case([In((4,)), [3, -1]], name="minus1"),
        Case([In(()), [2, 2]], name="0d"),
        Case([In((1, 3)), [0, 3]], name="empty"),
    ], ref=_expand_ref, dtypes=ALL),
    OpSpec("transpose", [
        Case([In((2, 3, 4)), [2, 0, 1]], name="3d"),
        Case([In((3, 4)), [-1, 0]], name="negative"),
        Case([In(()), []], name="0d"),
        Case([In((0, 3)), [1, 0]], name="empty"),
        Case([In((2, 3, 4)), 0, 2], name="swap"),  # Paddle 3.2's transpose(x, dim0, dim1)
        Case([In((2, 3, 4)), -1, 1], name="swap_negative"),
        Case([In((2, 3))], {"dim0": 1, "dim1": 0}, name="swap_keywords",
             ref=lambda x, dim0, dim1: np.swapaxes(x, dim0, dim1)),
        Case([In(()), 0, -1], name="swap_0d"),
    ], ref=_transpose_ref, dtypes=ALL),
    OpSpec("permute", [
        Case([In((2, 3, 4)), 2, 0, 1], name="varargs"),
        Case([In((2, 3, 4)), [1, 2, 0]], name="list"),
        Case([In((3, 4))], {"dims": (1, 0)}, name="dims", ref=lambda x, dims: np.transpose(x, dims)),
        Case([In(()), []], name="0d"),
    ], ref=_permute_ref, dtypes=ALL),
    OpSpec("squeeze", [
        Case([In((1, 3, 1))], name="all"),
        Case([In((1, 3, 1)), -1], name="one"),
        Case([In((1, 3, 1)), [0, 1]], name="ignores_size3"),
        Case([In((1, 3, 1))], {"dim": 0}, name="dim"),
        Case([In(()), 0], name="0d"),
        Case([In((0, 1))], name="empty"),
    ], ref=_squeeze_ref, dtypes=ALL),
    OpSpec("flatten", [
        Case([In((2, 3, 4))], name="all"),
        Case([In((2, 3, 4)), 1, 2], name="tail"),
        Case([In((2, 3, 4)), -3, -2], name="negative"),
        Case([In((2, 3, 4)), 1, 1], name="single"),
        Case([In(())], name="0d"),
        Case([In((2, 0, 3)), 0, 1], name="empty"),
    ], ref=_flatten_ref, dtypes=ALL),
    OpSpec("expand_as", [
        Case([In((3, 1)), In((2, 3, 4), grad=False)], name="bcast"),
        Case([In(()), In((2, 2), grad=False)], name="0d"),
        Case([In((1, 3)), In((0, 3), grad=False)], name="empty"),
        Case([In((2, 3)), In((2, 3), dtype="int64", grad=False)], name="other_dtype"),
    ], ref=lambda x, y: np.broadcast_to(x, y.shape), dtypes=ALL),
    OpSpec("tile", [
        Case([In((2, 3)), [2, 1]], name="2d"),
        Case([In((2, 3)), [3]], name="short"),
        Case([In((3,)), [2, 1, 2]], name="long"),
        Case([In((2, 3)), []], name="none"),
        Case([In(()), [2, 3]], name="0d"),
        Case([In((2,)), [0]], name="empty"),
    ], ref=lambda x, reps: np.tile(x, reps), dtypes=ALL),
    OpSpec("concat", [
        Case([In((2, 3)), In((4, 3))], name="axis0"),
        Case([In((2, 3)), In((2, 1)), In((2, 0))], {"axis": -1}, name="axis-1"),
        Case([In((2, 3)), In((2, 2))], {"dim": 1}, name="dim"),
        Case([In((3,))], name="single"),
        Case([In((0, 3)), In((1, 3))], name="empty"),
    ], ref=lambda *xs, **kw: np.concatenate(xs, axis=_axis_of(kw)), call=_list_call("concat"), dtypes=ALL),
    OpSpec("stack", [
        Case([In((2, 3)), In((2, 3))], name="axis0"),
        Case([In((2, 3)), In((2, 3)), In((2, 3))], {"axis": -1}, name="axis-1"),
        Case([In(()), In(())], name="0d"),
        Case([In((0, 3)), In((0, 3))], {"dim": 1}, name="empty"),
    ], ref=lambda *xs, **kw: np.stack(xs, axis=_axis_of(kw)), call=_list_call("stack"), dtypes=ALL),
    OpSpec("split", [
        Case([In((6, 4)), 3], name="equal"),
        Case([In((6, 4)), [1, -1, 2]], name="sections"),
        Case([In((3, 5)), [2, 0, 3], 1], name="zero_part"),
        Case([In((2, 4)), 2, -1], name="negative_axis"),
        Case([In((0, 4)), 2, 1], name="empty"),
    ], ref=_split_ref, dtypes=ALL),
    OpSpec("chunk", [
        Case([In((6, 4)), 3], name="axis0"),
        Case([In((4, 6)), 2, 1], name="axis1"),
        Case([In((4, 6)), 3], {"dim": -1}, name="dim"),
        Case([In((4, 0)), 2], name="empty"),
    ], ref=lambda x, chunks, axis=0, dim=None: np.split(x, chunks, axis=axis if dim is None else dim), dtypes=ALL),
]
