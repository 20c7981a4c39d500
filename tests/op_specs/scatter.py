"""Specs for the scatter family: scatter_reduce(_), scatter_add(_), put_along_axis(_), scatter(_)
(Paddle's row scatter), take_along_axis, take_along_dim, argwhere, repeat_interleave.

The scatter reference is a plain loop over the index in row-major order, so "the last of repeated
indices wins" and every reduction are spelled out independently of the kernels' ufunc.at calls.
Index tensors are fixed values (with repeats, negative entries and smaller-than-src shapes); the
gradient cases avoid ties, where amin/amax have no derivative.
"""

import numpy as np

import oarlock
from op_specs.base import ALL, ALL_REAL, Case, In, OpSpec


def _idx(values):
    return In(np.shape(values), dtype="int64", values=values, grad=False)


# -- references ------------------------------------------------------------------------------------------

def _reduce(values, reduce):
    if reduce in ("sum", "add"):
        return sum(values)
    if reduce in ("prod", "mul", "multiply"):
        return np.prod(values)
    if reduce == "amin":
        return min(values)
    if reduce == "amax":
        return max(values)
    if reduce == "mean":
        total = sum(values)
        if isinstance(total, (int, np.integer)):  # integers: truncated toward zero, like Paddle
            return int(np.sign(total)) * (abs(int(total)) // len(values))
        return total / len(values)
    return values[-1]  # assign: the last value aimed at a position wins


def _scatter_ref(x, dim, index, src, reduce="assign", include_self=True):
    out = np.array(x, copy=True)
    x0 = out.ndim == 0
    if x0:
        out, index, src = out.reshape(1), np.reshape(index, (1,)), np.reshape(src, (1,))
    dim %= out.ndim
    groups = {}
    for p in np.ndindex(index.shape):
        target = list(p)
        target[dim] = int(index[p]) % out.shape[dim]
        groups.setdefault(tuple(target), []).append(src[p])
    for target, values in groups.items():
        if include_self and reduce != "assign":
            values = [out[target]] + values
        out[target] = _reduce([v.item() for v in values], reduce)
    return out.reshape(()) if x0 else out


def _scatter_add_ref(x, dim, index, src):
    return _scatter_ref(x, dim, index, src, "sum")


def _put_ref(arr, indices, values, axis, reduce="assign", include_self=True, broadcast=True):
    values = np.asarray(values, dtype=arr.dtype)
    if broadcast and all(i <= n for i, n in zip(indices.shape, arr.shape)):
        shape = list(arr.shape)
        shape[axis] = indices.shape[axis]
        indices = np.broadcast_to(indices, shape)
    values = np.broadcast_to(values, indices.shape) if values.ndim != indices.ndim else values
    return _scatter_ref(arr, axis, indices, values, reduce, include_self)


def _rows_ref(x, index, updates, overwrite=True):
    out = np.array(x, copy=True)
    index = np.reshape(index, (-1,)) % x.shape[0]
    updates = np.reshape(updates, (len(index),) + x.shape[1:])
    if overwrite:
        for i, row in enumerate(index):
            out[row] = updates[i]
    else:
        out[index] = 0
        for i, row in enumerate(index):
            out[row] += updates[i]
    return out


def _take_ref(arr, indices, axis=None, broadcast=True, dim=None):
    axis = dim if axis is None else axis
    if axis is None:
        return np.take(arr.reshape(-1), indices.reshape(-1))
    axis %= arr.ndim
    if broadcast:
        shape = np.broadcast_shapes(tuple(1 if d == axis else n for d, n in enumerate(arr.shape)),
                                    tuple(1 if d == axis else n for d, n in enumerate(indices.shape)))
        arr = np.broadcast_to(arr, shape[:axis] + (arr.shape[axis],) + shape[axis + 1:])
        indices = np.broadcast_to(indices, shape[:axis] + (indices.shape[axis],) + shape[axis + 1:])
    else:
        arr = arr[tuple(slice(0, n) if d != axis else slice(None) for d, n in enumerate(indices.shape))]
    return np.take_along_axis(arr, indices, axis)


def _repeat_ref(x, repeats, axis=None, output_size=None, dim=None):
    axis = dim if axis is None else axis
    repeats = np.asarray(repeats)
    return np.repeat(x, repeats.reshape(()) if repeats.size == 1 else repeats, axis=axis)


def _in_place(name):
    """Call an in-place op on a copy of the first argument (the table reuses its inputs)."""
    def call(x, *args, **kwargs):
        return getattr(oarlock, name)(x.clone(), *args, **kwargs)
    return call


# -- cases -------------------------------------------------------------------------------------------------

INDEX_2D = [[1, 0, -1, 1, 0], [2, 2, 0, 1, 1], [0, 1, 1, 1, 2]]   # [3, 5], repeats and a negative index


def _reduce_cases():
    cases = []
    for reduce in ("sum", "prod", "mean", "amin", "amax"):
        for include_self in (True, False):
            cases.append(Case([In((4, 5)), 0, _idx(INDEX_2D), In((3, 6)), reduce], {"include_self": include_self},
                              name=f"{reduce}_self{int(include_self)}"))
    cases += [
        Case([In((3, 4)), 1, _idx([[3, 3, 0], [1, -4, 1]]), In((2, 3)), "amax"], name="dim1_small_index"),
        Case([In((3, 4)), -1, _idx([[2], [0], [2]]), In((3, 1)), "mean"], {"include_self": False}, name="dim_neg"),
        Case([In(()), 0, _idx(0), In(()), "sum"], name="0d"),
        Case([In((3, 4)), 0, _idx(np.zeros((0, 4), dtype=np.int64)), In((0, 4)), "prod"], name="empty_index"),
    ]
    return cases


SCATTER_ADD_CASES = [
    Case([In((4, 5)), 0, _idx(INDEX_2D), In((3, 6))], name="repeats_small_index"),
    Case([In((2, 3, 2)), 1, _idx([[[0, 2]], [[-1, -1]]]), In((2, 1, 2))], name="3d"),
]

PUT_CASES = [
    Case([In((2, 3)), _idx([[0]]), 9.5, 0], name="scalar_broadcast"),
    Case([In((3, 4)), _idx([[2, 0], [2, 1]]), In((2, 2)), 0], {"broadcast": False}, name="assign_repeats_last_wins"),
    Case([In((3, 4)), _idx([[1], [0], [1]]), In((3, 1)), 1], {"reduce": "add"}, name="add_broadcast"),
    Case([In((3, 4)), _idx([[1, 1], [0, 3]]), In((2, 2)), 1], {"reduce": "multiply", "broadcast": False},
         name="multiply_no_broadcast"),
    Case([In((3, 4)), _idx([[1, 1, 2, 0]]), In((1, 4)), 0], {"reduce": "mean", "include_self": False},
         name="mean_without_self"),
    Case([In((3, 4)), _idx([[2, 2, 2, 0]]), In((1, 4)), 0], {"reduce": "amin"}, name="amin"),
    Case([In((3, 4)), _idx([[0, 0, 1, 0]]), In((1, 4)), 0], {"reduce": "amax", "include_self": False},
         name="amax_without_self"),
    Case([In((2, 3)), _idx([[0, 0, 1]]), In((1, 3)), 1], {"reduce": "mul", "broadcast": False}, name="mul_region"),
]

ROWS_CASES = [
    Case([In((4, 3)), _idx([2, 0]), In((2, 3))], name="rows"),
    Case([In((4, 3)), _idx([2, 1, 0, 1]), In((4, 3))], name="overwrite_repeats_last_wins"),
    Case([In((4, 3)), _idx([2, 1, -4, 1]), In((4, 3))], {"overwrite": False}, name="accumulate"),
    Case([In((4, 3)), _idx([[3], [1]]), In((2, 3))], name="index_n1"),
    Case([In((4, 3)), _idx(-1), In((3,))], name="0d_index"),
    Case([In((4,)), _idx([1, 1]), In((2,))], {"overwrite": False}, name="1d"),
]

TAKE_CASES = [
    Case([In((3, 4)), _idx([[1, 0, -1], [3, 3, 0], [2, 1, 0]]), 1], name="axis1"),
    Case([In((3, 4)), _idx([[2, 0, 2, 1]]), 0], name="broadcast_index"),
    Case([In((1, 4)), _idx([[1, 0], [3, 3]]), 1], name="broadcast_arr"),
    Case([In((3, 4)), _idx([[1, 0], [3, 3]]), 1], {"broadcast": False}, name="region"),
    Case([In((2, 3, 2)), _idx([[[1], [0], [1]]]), -1], name="3d"),
    Case([In((3, 4)), _idx(np.zeros((3, 0), dtype=np.int64)), 1], name="empty"),
]

TAKE_DIM_CASES = [
    Case([In((3, 4)), _idx([[1, 0, -1], [3, 3, 0], [2, 1, 0]]), 1], name="dim1"),
    Case([In((3, 4)), _idx([11, 0, -12, 5])], name="flattened"),
    Case([In((3, 4)), _idx([[2, 0, 1, 1]])], {"dim": 0}, name="broadcast_keyword"),
]

REPEAT_CASES = [
    Case([In((2, 3)), 2], name="int_flattens"),
    Case([In((2, 3)), _idx([1, 0, 3])], {"axis": 1}, name="per_slice"),
    Case([In((2, 3)), _idx([2])], {"dim": 0}, name="one_count_broadcasts"),
    Case([In((2, 3)), _idx(2)], {"axis": -1, "output_size": 6}, name="0d_count_output_size"),
    Case([In(()), 3], name="0d"),
    Case([In((2, 3)), 0], {"axis": 0}, name="zero"),
]

SPECS = [
    OpSpec("scatter_reduce", _reduce_cases(), ref=_scatter_ref, dtypes=ALL_REAL),
    OpSpec("scatter_reduce_", _reduce_cases(), ref=_scatter_ref, dtypes=ALL_REAL, grad=False,
           call=_in_place("scatter_reduce_")),
    OpSpec("scatter_add", SCATTER_ADD_CASES, ref=_scatter_add_ref, dtypes=ALL_REAL),
    OpSpec("scatter_add_", SCATTER_ADD_CASES, ref=_scatter_add_ref, dtypes=ALL_REAL, grad=False,
           call=_in_place("scatter_add_")),
    OpSpec("put_along_axis", PUT_CASES, ref=_put_ref, dtypes=ALL_REAL),
    OpSpec("put_along_axis_", PUT_CASES, ref=_put_ref, dtypes=ALL_REAL, grad=False,
           call=_in_place("put_along_axis_")),
    OpSpec("scatter", ROWS_CASES, ref=_rows_ref, dtypes=ALL_REAL),
    OpSpec("scatter_", ROWS_CASES, ref=_rows_ref, dtypes=ALL_REAL, grad=False, call=_in_place("scatter_")),
    OpSpec("take_along_axis", TAKE_CASES, ref=_take_ref, dtypes=ALL),
    OpSpec("take_along_dim", TAKE_DIM_CASES, ref=_take_ref, dtypes=ALL),
    OpSpec("argwhere", [
        Case([In((3, 4), int_range=(0, 2))], name="2d"),
        Case([In((5,), values=[0, 2, 0, 1, 1])], name="1d"),
        Case([In((0, 3))], name="empty"),
        Case([In((), values=1)], name="0d_nonzero"),
        Case([In((), values=0)], name="0d_zero"),
    ], ref=np.argwhere, dtypes=ALL, grad=False),
    OpSpec("repeat_interleave", REPEAT_CASES, ref=_repeat_ref, dtypes=ALL),
]
