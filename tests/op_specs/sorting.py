"""Specs for the sorting family: sort, argsort, msort, topk, kthvalue, max/min_with_index, median, nanmedian.

The references build every order with np.lexsort on (NaN flag, value, position): NaN ranks above every
number, and equal values keep their input order in both directions, which is the stable order the
kernels promise. Integer inputs (drawn from a small range) and bfloat16 roundings bring real ties.
The tuple-returning ops are internal (the public sort, topk, median... wrap them) and are called
through the op library (oarlock.ops.<plugin>.sort...), so the table checks the indices as well as the values.
"""

import numpy as np

from op_specs.base import ALL, ALL_REAL, FLOATS, Case, In, OpSpec, library_op

NAN = float("nan")
TIES = [[2.0, -1.0, 2.0, 0.5], [0.5, 0.5, -3.0, 0.5], [1.0, 1.0, 1.0, 1.0]]
WITH_NAN = [[NAN, 1.0, -2.0, NAN], [0.5, 2.0, NAN, -1.0], [3.0, 1.0, 2.0, 0.0]]


def _axis_of(axis, dim, default=-1):
    axis = dim if dim is not None else axis
    return default if axis is None else axis


def _order(x, axis, descending=False):
    """The stable order of x along axis: NaN last (first when descending), ties by position."""
    x = np.moveaxis(np.asarray(x), axis, -1)
    values = x.astype(np.float64)
    nan = np.isnan(values)
    values = np.where(nan, 0.0, values)
    if descending:
        values, nan = -values, ~nan
    position = np.broadcast_to(np.arange(x.shape[-1]), x.shape)
    return np.moveaxis(np.lexsort((position, values, nan), axis=-1), -1, axis)


def _vector(x):
    return x.reshape(1) if x.ndim == 0 else x


def _sort(x, axis=-1, descending=False, stable=False, dim=None):
    v = _vector(x)
    order = _order(v, _axis_of(axis, dim), descending)
    return np.take_along_axis(v, order, _axis_of(axis, dim)).reshape(x.shape), order.reshape(x.shape)


def _topk(x, k, axis=None, largest=True, sorted=True, dim=None):
    k = int(k)
    v = _vector(x)
    axis = _axis_of(axis, dim) % v.ndim
    order = np.take(_order(v, axis, largest), np.arange(k), axis=axis)
    values = np.take_along_axis(v, order, axis)
    return (values.reshape(()), order.reshape(())) if x.ndim == 0 and k == 1 else (values, order)


def _pick(x, index, axis, keepdim):
    values = np.take_along_axis(_vector(x), index, axis)
    if x.ndim == 0:
        return values.reshape(()), index.reshape(())
    return (values, index) if keepdim else (values.squeeze(axis), index.squeeze(axis))


def _kthvalue(x, k, axis=None, keepdim=False, dim=None):
    v = _vector(x)
    axis = _axis_of(axis, dim) % v.ndim
    index = np.take(_order(v, axis), [k - 1], axis=axis)
    return _pick(x, index, axis, keepdim)


def _extreme(fn):
    def ref(x, axis=None, keepdim=False, dim=None):
        v = _vector(x)
        axis = _axis_of(axis, dim) % v.ndim
        return _pick(x, np.expand_dims(fn(v.astype(np.float64), axis=axis), axis), axis, keepdim)
    return ref


def _median_row(row, mode, ignore_nan):
    """(value, index) of one row; integers average with truncation toward zero, as Paddle's nanmedian."""
    floating = row.dtype.kind == "f"
    nan = np.isnan(row) if floating else np.zeros(row.shape, bool)
    if nan.any() and not ignore_nan:
        return NAN, int(np.argmax(nan))
    valid = sorted((i for i in range(len(row)) if not nan[i]), key=lambda i: (row[i], i))
    if not valid:
        return NAN, -1
    low, high = valid[(len(valid) - 1) // 2], valid[len(valid) // 2]
    if mode == "min":
        return row[low], low
    if floating:
        return (row[low] + row[high]) / 2, low
    total = int(row[low]) + int(row[high])
    return (abs(total) // 2) * (1 if total >= 0 else -1), low


def _median(ignore_nan):
    def ref(x, axis=None, keepdim=False, mode="avg", spread_ties=True, dim=None):
        axis = dim if dim is not None else axis
        if axis is None or x.ndim == 0:
            axes = tuple(range(x.ndim))
        else:
            axes = tuple(sorted(a % x.ndim for a in np.atleast_1d(axis)))
        rest = [d for d in range(x.ndim) if d not in axes]
        lead = [x.shape[d] for d in rest]
        rows = np.transpose(x, rest + list(axes)).reshape(int(np.prod(lead)), -1)
        pairs = [_median_row(row, mode, ignore_nan) for row in rows]
        shape = [1 if d in axes else n for d, n in enumerate(x.shape) if keepdim or d not in axes]
        values = np.array([p[0] for p in pairs], dtype=np.float64 if x.dtype.kind == "f" else x.dtype)
        return values.reshape(shape), np.array([p[1] for p in pairs], dtype=np.int64).reshape(shape)
    return ref


def _index(*args, **kwargs):
    return "int64"


SORT_CASES = [
    Case([In((3, 4))], name="last_axis"),
    Case([In((3, 4))], {"axis": 0}, name="axis0"),
    Case([In((2, 3, 4))], {"dim": 1, "descending": True}, name="dim_alias_descending"),
    Case([In((3, 4))], {"descending": True, "stable": True}, name="stable_descending"),
    Case([In((3, 4), values=TIES)], {"axis": 1}, name="ties", grad=False),
    Case([In((3, 4), values=TIES)], {"axis": 1, "descending": True}, name="ties_descending", grad=False),
    Case([In((3, 4), values=WITH_NAN)], name="nan", dtypes=FLOATS, grad=False),
    Case([In((3, 4), values=WITH_NAN)], {"descending": True}, name="nan_descending", dtypes=FLOATS, grad=False),
    Case([In(())], name="0d"),
    Case([In((0, 3))], {"axis": 0}, name="empty"),
]

MEDIAN_CASES = [
    Case([In((3, 4))], name="all_even"),
    Case([In((3, 5))], name="all_odd"),
    Case([In((3, 4))], {"axis": 1}, name="axis1_even"),
    Case([In((3, 5))], {"axis": 1, "mode": "min"}, name="axis1_min"),
    Case([In((4, 3))], {"dim": 0, "keepdim": True, "mode": "min", "spread_ties": False}, name="index_form"),
    Case([In((2, 3, 4))], {"axis": [0, 2]}, name="axis_list"),
    Case([In((2, 3))], {"keepdim": True}, name="all_keepdim"),
    Case([In((3, 4), values=TIES)], {"axis": 1, "mode": "min"}, name="ties", grad=False),
    Case([In(())], name="0d"),
    Case([In(())], {"axis": -1, "mode": "min"}, name="0d_axis"),
]

SPECS = [
    OpSpec("sort", SORT_CASES, ref=_sort, dtypes=ALL, call=library_op("sort")),
    OpSpec("argsort", SORT_CASES, ref=lambda *a, **k: _sort(*a, **k)[1], dtypes=ALL, grad=False, out_dtype=_index),
    OpSpec("msort", [
        Case([In((4, 3))], name="2d"),
        Case([In((3, 2, 2))], name="3d"),
        Case([In((4, 3), values=np.transpose(TIES))], name="ties", grad=False),
        Case([In((5,))], name="1d"),
        Case([In(())], name="0d"),
    ], ref=lambda x: _sort(x, axis=0)[0], dtypes=ALL),
    OpSpec("topk", [
        Case([In((3, 5)), 2], name="k2"),
        Case([In((3, 5)), 3], {"axis": 0}, name="axis0"),
        Case([In((2, 3, 4)), 2], {"dim": 1, "largest": False}, name="smallest_dim_alias"),
        Case([In((3, 4)), 4], {"sorted": False}, name="k_is_n"),
        Case([In((3, 4)), 0], name="k0", grad=False),
        Case([In((3, 4)), In((), dtype="int64", values=2, grad=False)], name="tensor_k"),
        Case([In((3, 4), values=TIES), 2], name="ties", grad=False),
        Case([In((3, 4), values=WITH_NAN), 2], name="nan_first", dtypes=FLOATS, grad=False),
        Case([In(()), 1], name="0d"),
    ], ref=_topk, dtypes=ALL_REAL, call=library_op("topk")),
    OpSpec("kthvalue", [
        Case([In((3, 5)), 2], name="k2"),
        Case([In((4, 3)), 4], {"axis": 0, "keepdim": True}, name="axis0_keepdim"),
        Case([In((2, 3, 4)), 1], {"dim": -2}, name="dim_alias"),
        Case([In((3, 4), values=TIES), 2], {"axis": 1}, name="ties", grad=False),
        Case([In(()), 1], name="0d"),
    ], ref=_kthvalue, dtypes=ALL_REAL),
    *[OpSpec(f"{name}_with_index", [
        Case([In((3, 4)), 1], name="axis1"),
        Case([In((3, 4)), 0], {"keepdim": True}, name="axis0_keepdim"),
        Case([In((2, 3, 4))], {"dim": -1}, name="dim_alias"),
        Case([In((3, 4), values=TIES), 1], name="ties_first", grad=False),
        Case([In((3, 4), values=WITH_NAN), 1], name="nan_wins", dtypes=FLOATS, grad=False),
        Case([In(()), 0], name="0d"),
    ], ref=_extreme(fn), dtypes=ALL, call=library_op(f"{name}_with_index"))
      for name, fn in (("max", np.argmax), ("min", np.argmin))],
    OpSpec("median", MEDIAN_CASES + [
        Case([In((3, 4), values=WITH_NAN)], {"axis": 1}, name="nan_propagates", dtypes=FLOATS, grad=False),
        Case([In((2, 0))], {"axis": 1}, name="empty", dtypes=FLOATS, grad=False),
    ], ref=_median(False), dtypes=ALL_REAL, call=library_op("median")),
    OpSpec("nanmedian", MEDIAN_CASES + [
        Case([In((3, 4), values=WITH_NAN)], {"axis": 1}, name="nan_skipped", dtypes=FLOATS),
        Case([In((3, 4), values=WITH_NAN)], {"axis": 0, "mode": "min"}, name="nan_skipped_min", dtypes=FLOATS),
        Case([In((2, 2), values=[[NAN, NAN], [1.0, NAN]])], {"axis": 1}, name="all_nan", dtypes=FLOATS,
             grad=False),
    ], ref=_median(True), dtypes=ALL_REAL, call=library_op("nanmedian")),
]
