"""Specs for the indexing family.

An index is written as a template: `T(i)` stands for the case's i-th tensor argument after the
index, so an index can mix tensors with ints, slices, None and Ellipsis. The reference indexes
float64 numpy arrays with the same template; cases where Paddle's rules differ from numpy's
(integers select before advanced indexing) give their own reference.
"""

import numpy as np

import oarlock
from op_specs.base import ALL, Case, In, OpSpec


class T:
    """Placeholder for the i-th tensor argument that follows the index in a case."""

    def __init__(self, i):
        self.i = i


def _fill(index, tensors):
    if isinstance(index, T):
        return tensors[index.i]
    if isinstance(index, (tuple, list)):
        return type(index)(_fill(i, tensors) for i in index)
    return index


def _ints(values, dtype="int64"):
    return In((len(values),), dtype=dtype, values=values, grad=False)


def _mask(shape):
    return In(shape, dtype="bool", grad=False)


# -- getitem: x[index] -----------------------------------------------------------------------------------

def _getitem_ref(x, index, *tensors):
    return np.asarray(x[_fill(index, tensors)])


GETITEM_CASES = [
    Case([In((3, 4)), 1], name="int"),
    Case([In((3, 4)), -1], name="negative_int"),
    Case([In((4,)), 0], name="1d_int_is_0d"),
    Case([In((3, 4)), (1, 2)], name="0d_result"),
    Case([In((5, 4)), (slice(None, None, 2), slice(1, 3))], name="slice_step"),
    Case([In((5, 4)), slice(4, 0, -2)], name="negative_step"),
    Case([In((3, 4)), (None, 0, None)], name="none"),
    Case([In((2, 3, 4)), (Ellipsis, 1)], name="ellipsis"),
    Case([In((3, 4)), slice(2, 1)], name="empty_slice"),
    Case([In((3, 4)), [2, 0, 2]], name="int_list_repeats"),
    Case([In((3, 4)), T(0), _mask((3, 4))], name="bool_mask"),
    Case([In((3, 4)), (slice(None), T(0)), _mask((4,))], name="bool_mask_axis1"),
    Case([In((3, 4)), [True, False, True]], name="bool_list"),
    Case([In((3, 4)), True], name="python_bool"),
    Case([In((3, 4)), T(0), In((2, 2), dtype="int64", values=[[0, 2], [1, 1]], grad=False)], name="int_tensor_2d"),
    Case([In((3, 4)), (T(0), slice(1, None)), _ints([2, 0], "int32")], name="int32_tensor"),
    Case([In((3, 4)), (slice(None), [0, 3, 3])], name="mixed"),
    Case([In((3, 4, 2)), ([0, 2], [[1], [3]])], name="broadcast_arrays"),
    Case([In((2, 3, 4)), (0, slice(None), [1, 2])], name="int_before_advanced",
         ref=lambda x, index: x[0][:, [1, 2]]),  # Paddle: [3, 2]; numpy would give [2, 3]
    Case([In((2, 3, 4)), (T(0), slice(None), [1, 2]), In((), dtype="int64", values=1, grad=False)],
         name="0d_tensor_is_int", ref=lambda x, index, i: x[int(i)][:, [1, 2]]),
    Case([In(()), ()], name="0d"),
    Case([In(()), None], name="0d_none"),
    Case([In((0, 3)), (slice(None), 1)], name="0size"),
]


# -- setitem_ / index_put: x[index] = value ------------------------------------------------------------------

def _put_ref(x, value, index, *tensors, accumulate=False):
    out = np.array(x, copy=True)
    index = _fill(index, tensors)
    value = np.asarray(value).astype(out.dtype)
    if accumulate:
        np.add.at(out, index, value)
    else:
        out[index] = value
    return out


def _put_int_first(x, value):
    """x[0, :, [1, 2]] = value with Paddle's rule: the target is x[0][:, [1, 2]], of shape [3, 2]."""
    out = np.array(x, copy=True)
    out[0][:, [1, 2]] = value
    return out


def _setitem_call(x, value, index, *tensors):
    """x[index] = value on a clone of x, so the gradient check differentiates through the write."""
    target = x.clone()
    out = oarlock.setitem_(target, _fill(index, tensors), value)
    assert out is target, "setitem_ must return the tensor it wrote"
    return out


def _index_put_call(x, value, index, *tensors, **kw):
    return oarlock.index_put(x, _fill(index, tensors), value, **kw)


SETITEM_CASES = [
    Case([In((3, 4)), 2.5, 1], name="int_scalar"),
    Case([In((3, 4)), In((4,)), -1], name="row"),
    Case([In((5, 4)), In((3, 1)), (slice(None, None, 2), slice(1, 3))], name="slices_broadcast"),
    Case([In((3, 4)), In(()), T(0), _mask((3, 4))], name="bool_mask"),
    Case([In((3, 4)), In((2, 4)), T(0), _ints([2, 0])], name="int_tensor"),
    Case([In((2, 3, 4)), In((3, 2)), (0, slice(None), [1, 2])], name="int_before_advanced",
         ref=lambda x, v, index: _put_int_first(x, v)),
    Case([In(()), 1.0, ()], name="0d"),
    Case([In((3, 4)), In((0, 4)), slice(2, 1)], name="empty"),
]

INDEX_PUT_CASES = [
    Case([In((3, 4)), In((2,)), (T(0), T(1)), _ints([0, 2]), _ints([3, 1])], name="pairs"),
    Case([In((3, 4)), In((3, 4)), (T(0),), _ints([2, 0, 2])], {"accumulate": True}, name="accumulate_repeats"),
    Case([In((3, 4)), In(()), (T(0),), _mask((3, 4))], name="mask"),
    Case([In((3, 4)), In((3, 1)), (slice(None), T(0)), _ints([1])], {"accumulate": True}, name="with_slice"),
    Case([In(()), In(()), ()], name="0d"),
    Case([In((0, 4)), In((4,)), (T(0),), _ints([])], name="empty"),
]


# -- gather / index_select / masked_fill --------------------------------------------------------------------

def _take_ref(x, index, axis=None, dim=None):
    axis = dim if axis is None else axis
    return np.take(x, index.reshape(-1) if index.ndim == 2 else index, axis=axis or 0)


def _masked_fill_ref(x, mask, value):
    return np.where(mask, np.asarray(value).reshape(()).astype(x.dtype), x)


SPECS = [
    OpSpec("getitem", GETITEM_CASES, ref=_getitem_ref, dtypes=ALL,
           call=lambda x, index, *tensors: x[_fill(index, tensors)]),
    OpSpec("setitem_", SETITEM_CASES, ref=_put_ref, dtypes=ALL, call=_setitem_call),
    OpSpec("index_put", INDEX_PUT_CASES, ref=_put_ref, dtypes=ALL, call=_index_put_call),
    OpSpec("gather", [
        Case([In((4, 3)), _ints([3, 0, 3])], name="axis0_repeats"),
        Case([In((4, 3)), _ints([2, -1])], {"axis": 1}, name="axis1_negative"),
        Case([In((4, 3)), In((), dtype="int64", values=2, grad=False)], name="0d_index"),
        Case([In((4, 3)), In((2, 1), dtype="int64", values=[[1], [1]], grad=False)], name="index_n1"),
        Case([In((4, 3)), _ints([])], name="empty_index"),
        Case([In((0, 3)), _ints([0, 2], "int32")], {"axis": 1}, name="0size"),
    ], ref=_take_ref, dtypes=ALL),
    OpSpec("index_select", [
        Case([In((4, 3)), _ints([3, 0, 3])], name="axis0_repeats"),
        Case([In((4, 3)), _ints([2, 0], "int32")], {"dim": 1}, name="dim1"),
        Case([In((2, 3, 4)), _ints([-1, 1])], {"axis": -1}, name="negative"),
        Case([In((4, 3)), _ints([])], name="empty_index"),
    ], ref=_take_ref, dtypes=ALL),
    OpSpec("masked_fill", [
        Case([In((3, 4)), _mask((3, 4)), 2.5], name="scalar"),
        Case([In((3, 4)), _mask((4,)), In(())], name="tensor_value"),
        Case([In((3,)), _mask((2, 1)), In((1,))], name="mask_broadcasts_x"),
        Case([In(()), In((), dtype="bool", values=True, grad=False), -1], name="0d"),
        Case([In((0, 3)), _mask((3,)), 1], name="empty"),
    ], ref=_masked_fill_ref, dtypes=ALL),
]
