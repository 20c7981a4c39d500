"""Specs for the reduction family.

The references translate Paddle's axis convention (None or [] = every axis; a 0-d tensor takes
axis 0/-1) into numpy's, and accept the `dim` alias, so one case list serves many ops.
"""

import warnings

import numpy as np

from op_specs.base import ALL, ALL_REAL, FLOATS, Case, In, OpSpec

F32_TOL = (2e-5, 2e-6)
INT_AS_FLOAT32 = {"int32": F32_TOL, "int64": F32_TOL, "bool": F32_TOL}  # ints computed in float32

# rows with no zero, one zero and two zeros: prod's gradient has a separate branch for each
ZEROS = [[0.0, 1.5, -0.5, 2.0], [0.5, 0.0, 0.0, 1.2], [1.1, -0.7, 0.9, 1.3]]


def _np_axis(x, axis=None, dim=None):
    axis = dim if dim is not None else axis
    if axis is None or x.ndim == 0:
        return None
    return tuple(np.atleast_1d(axis).tolist()) or None


def _reduction(fn):
    """The reference of a Paddle reduction from fn(x, axis=tuple|None, keepdims=bool, **rest)."""
    def ref(x, axis=None, keepdim=False, dim=None, dtype=None, **rest):
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)  # numpy's notes on empty slices and nan results
            return fn(x, axis=_np_axis(x, axis, dim), keepdims=keepdim, **rest)
    return ref


def _moment(fn):
    def ref(x, axis=None, keepdims=False, unbiased=None, correction=1):
        ddof = (1 if unbiased else 0) if unbiased is not None else correction
        return fn(x, axis=axis, keepdims=keepdims, ddof=ddof)
    return ref


def _logsumexp(x, axis=None, keepdims=False):
    x = x.astype(np.float64)
    if x.size == 0:
        return np.log(np.sum(np.exp(x), axis=axis, keepdims=keepdims))
    m = np.max(x, axis=axis, keepdims=True)
    out = m + np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))
    return out if keepdims else np.squeeze(out, axis=axis)


def _arg(fn):
    def ref(x, axis=None, keepdims=False):
        return fn(x, axis=None if axis is None else axis[0], keepdims=keepdims)
    return ref


def _cumsum(x, axis=None, dim=None, dtype=None):
    axis = dim if dim is not None else axis
    if axis is None:
        return np.cumsum(x.reshape(-1))
    return np.cumsum(x.reshape(1)).reshape(()) if x.ndim == 0 else np.cumsum(x, axis=axis)


# -- output dtypes -------------------------------------------------------------------------------------

def _accumulated(dt, *args, dtype=None, **kwargs):
    """sum, cumsum: bool and integers accumulate in int64."""
    return dtype or (dt if dt in FLOATS else "int64")


def _product(dt, *args, dtype=None, **kwargs):
    """prod keeps integer dtypes (Paddle); bool gives int64."""
    return dtype or ("int64" if dt == "bool" else dt)


def _floating(dt, *args, **kwargs):
    return dt if dt in FLOATS else "float32"


def _index(dt, *args, dtype="int64", **kwargs):
    return dtype


# -- cases ---------------------------------------------------------------------------------------------

def _cases(empty_axis=0):
    """The cases every axis/keepdim reduction runs; `empty_axis` is the reduced axis of the (0, 3)
    input (1 for max/min, which have no value for an empty axis)."""
    return [
        Case([In((3, 4))], name="all"),
        Case([In((3, 4))], {"axis": 1}, name="axis1"),
        Case([In((2, 3, 4))], {"axis": [0, 2], "keepdim": True}, name="keepdim"),
        Case([In((2, 3, 4))], {"dim": -1}, name="dim_alias"),
        Case([In((2, 3))], {"axis": [], "keepdim": True}, name="empty_list_means_all"),
        Case([In(())], name="0d"),
        Case([In(())], {"axis": 0}, name="0d_axis"),
        Case([In((0, 3))], {"axis": empty_axis}, name="empty"),
    ]


SPECS = [
    OpSpec("sum", _cases() + [
        Case([In((3, 4))], {"axis": 0, "dtype": "float64"}, name="dtype"),
    ], ref=_reduction(np.sum), dtypes=ALL, out_dtype=_accumulated),
    OpSpec("prod", _cases() + [
        Case([In((3, 4), values=ZEROS)], {"axis": 1}, name="zeros_rows", dtypes=FLOATS),
        Case([In((3, 4), values=ZEROS)], {"axis": 0}, name="zeros_cols", dtypes=FLOATS),
        Case([In((3, 4), values=ZEROS)], name="zeros_all", dtypes=FLOATS),
        Case([In((2, 3))], {"axis": 1, "dtype": "float64"}, name="dtype"),
    ], ref=_reduction(np.prod), dtypes=ALL, out_dtype=_product),
    OpSpec("mean", _cases(), ref=_reduction(np.mean), dtypes=ALL, out_dtype=_floating, rtol=INT_AS_FLOAT32),
    *[OpSpec(name, _cases() + [
        Case([In((3, 4))], {"axis": 1, "unbiased": False}, name="biased"),
        Case([In((3, 5))], {"axis": 0, "correction": 2}, name="correction"),
        Case([In(())], {"unbiased": False}, name="0d_biased"),
    ], ref=_reduction(_moment(fn)), dtypes=ALL, out_dtype=_floating, rtol=INT_AS_FLOAT32)
      for name, fn in (("var", np.var), ("std", np.std))],
    *[OpSpec(name, _cases(empty_axis=1), ref=_reduction(fn), dtypes=ALL_REAL) for name, fn in
      (("max", np.max), ("min", np.min))],
    *[OpSpec(name, [
        Case([In((3, 4))], name="flat"),
        Case([In((3, 4))], {"axis": 1}, name="axis1"),
        Case([In((2, 3, 4))], {"dim": -2, "keepdim": True}, name="keepdim"),
        Case([In((2, 3))], {"keepdim": True}, name="flat_keepdim"),
        Case([In((2, 3))], {"axis": 0, "dtype": "int32"}, name="int32"),
        Case([In(())], name="0d"),
        Case([In((0, 3))], {"axis": 1}, name="empty"),
    ], ref=_reduction(_arg(fn)), dtypes=ALL_REAL, grad=False, out_dtype=_index)
      for name, fn in (("argmax", np.argmax), ("argmin", np.argmin))],
    OpSpec("logsumexp", _cases() + [
        Case([In((3, 4), domain=(500.0, 800.0))], {"axis": 1}, name="large"),
        Case([In((3, 4), domain=(-800.0, -500.0))], name="very_negative"),
    ], ref=_reduction(_logsumexp), dtypes=ALL, out_dtype=_floating, rtol=INT_AS_FLOAT32),
    OpSpec("cumsum", [
        Case([In((3, 4))], name="flat"),
        Case([In((3, 4))], {"axis": 1}, name="axis1"),
        Case([In((2, 3, 4))], {"dim": -2}, name="dim_alias"),
        Case([In(())], name="0d"),
        Case([In(())], {"axis": 0}, name="0d_axis"),
        Case([In((0, 3))], {"axis": 0}, name="empty"),
        Case([In((3, 4))], {"axis": 0, "dtype": "float64"}, name="dtype"),
    ], ref=_cumsum, dtypes=ALL, out_dtype=_accumulated),
    *[OpSpec(name, _cases() + [
        Case([In((3, 4), values=ZEROS)], {"axis": 1}, name="zeros"),
    ], ref=_reduction(fn), dtypes=ALL, grad=False) for name, fn in (("all", np.all), ("any", np.any))],
]
