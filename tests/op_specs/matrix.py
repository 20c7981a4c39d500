"""Specs for the matrix-structure family (tril, triu, diff, outer, diag, diagonal, trace) and for the
norms registered by the linalg family (norm, linalg.vector_norm, linalg.matrix_norm and the
_norm_svd_grad helper), whose references are written with numpy.linalg.

Norm cases follow Paddle's rules: axis=None flattens, two axes make a matrix norm. The gradient
cases avoid ties (inf and 1-norms) and repeated singular values (nuc, 2, -2).
"""

import math

import numpy as np

import oarlock
from op_specs.base import ALL, FLOATS, INTS, Case, In, OpSpec, library_op

REAL = FLOATS + INTS


def _diff_ref(x, n=1, axis=-1, prepend=None, append=None, dim=None):
    axis = dim if dim is not None else axis
    kwargs = {k: v for k, v in (("prepend", prepend), ("append", append)) if v is not None}
    return np.diff(x, n=n, axis=axis, **kwargs)


def _diag_ref(x, offset=0, padding_value=0):
    if x.ndim == 2:
        return np.diagonal(x, offset)
    x = x.reshape(-1)
    size = len(x) + abs(offset)
    out = np.full((size, size), padding_value, dtype=x.dtype)
    rows = np.arange(len(x)) + max(-offset, 0)
    out[rows, rows + offset] = x
    return out


def _diagonal_ref(x, offset=0, axis1=0, axis2=1, dim1=None, dim2=None):
    return np.diagonal(x, offset, axis1 if dim1 is None else dim1, axis2 if dim2 is None else dim2)


def _trace_ref(x, offset=0, axis1=0, axis2=1):
    return np.trace(x, offset, axis1, axis2)


# -- norms ---------------------------------------------------------------------------------------------------

def _norm_ref(x, p=None, axis=None, keepdim=False, dtype=None):
    if axis is None and p != "nuc":
        out = np.linalg.norm(x.reshape(-1), 2 if p in (None, "fro") else p)
        return np.reshape(out, [1] * x.ndim) if keepdim else out
    axes = tuple(range(x.ndim)) if axis is None else (axis,) if isinstance(axis, int) else tuple(axis)
    if len(axes) == 2:
        return np.linalg.norm(x, "fro" if p is None else p, axis=axes, keepdims=keepdim)
    if len(axes) == 1:
        return np.linalg.norm(x, 2 if p in (None, "fro") else p, axis=axes[0], keepdims=keepdim)
    return _vector_ref(x, 2 if p in (None, "fro") else p, axes, keepdim)


def _vector_ref(x, p=2.0, axis=None, keepdim=False):
    axes = tuple(range(x.ndim)) if axis is None else (axis,) if isinstance(axis, int) else tuple(axis)
    moved = np.moveaxis(x, axes, tuple(range(-len(axes), 0)))
    flat = moved.reshape(moved.shape[:moved.ndim - len(axes)] + (-1,))
    out = np.linalg.norm(flat, p, axis=-1)
    if keepdim:
        out = np.reshape(out, [1 if d in [a % x.ndim for a in axes] else n for d, n in enumerate(x.shape)])
    return out


def _matrix_ref(x, p="fro", axis=(-2, -1), keepdim=False):
    return np.linalg.norm(x, p, axis=tuple(axis), keepdims=keepdim)


def _svd_grad_ref(x, p, axis):
    m = np.moveaxis(x, axis, (-2, -1))
    u, s, vh = np.linalg.svd(m, full_matrices=False)
    if p != "nuc":
        k = np.argmax(s, -1) if p > 0 else np.argmin(s, -1)
        u = np.take_along_axis(u, k[..., None, None], -1)
        vh = np.take_along_axis(vh, k[..., None, None], -2)
    return np.moveaxis(u @ vh, (-2, -1), axis)


NORM_CASES = [
    Case([In((3, 4))], name="default_flattens"),
    Case([In((2, 3, 4))], {"p": 3}, name="p3_flattened"),
    Case([In((2, 3, 4))], {"p": math.inf, "axis": 1}, name="inf_axis"),
    Case([In((2, 3, 4))], {"p": -math.inf, "axis": -1, "keepdim": True}, name="neg_inf_keepdim"),
    Case([In((2, 3, 4))], {"p": 1, "axis": [2]}, name="one_axis_list"),
    Case([In((2, 3, 4), requires_nonzero=True)], {"p": 0.5, "axis": [0, 1, 2]}, name="three_axes_vector"),
    Case([In((3, 4))], {"p": 0, "axis": 1}, name="p0_counts"),
    Case([In((2, 3, 4))], {"p": "fro", "axis": 1}, name="fro_one_axis"),
    Case([In((2, 3, 4))], {"p": "fro", "axis": [1, 2]}, name="fro"),
    Case([In((2, 3, 4))], {"p": "nuc", "axis": [1, 2]}, name="nuc"),
    Case([In((3, 4))], {"p": "nuc"}, name="nuc_2d_no_axis"),
    Case([In((2, 3, 4))], {"p": 2, "axis": [1, 2]}, name="spectral"),
    Case([In((2, 3, 4))], {"p": -2, "axis": [2, 1], "keepdim": True}, name="smallest_singular"),
    Case([In((2, 3, 4))], {"p": 1, "axis": [1, 2]}, name="max_column_sum"),
    Case([In((2, 3, 4))], {"p": -1, "axis": [0, 2]}, name="min_column_sum"),
    Case([In((2, 3, 4))], {"p": math.inf, "axis": [1, 2]}, name="max_row_sum"),
    Case([In((2, 3, 4))], {"p": -math.inf, "axis": [2, 0], "keepdim": True}, name="min_row_sum"),
    Case([In((3, 4))], {"axis": [0, 1], "keepdim": True}, name="default_matrix_keepdim"),
    Case([In(())], name="0d"),
]

NORM_TOL = {"bfloat16": (5e-2, 5e-2)}


def _norm_dtype(tested, *args, **kwargs):
    return kwargs.get("dtype") or tested


SPECS = [
    OpSpec("tril", [
        Case([In((3, 4))], name="default"),
        Case([In((2, 3, 4))], {"diagonal": 1}, name="batch_above"),
        Case([In((4, 3))], {"diagonal": -2}, name="below"),
        Case([In((0, 3))], name="empty"),
    ], ref=lambda x, diagonal=0: np.tril(x, diagonal), dtypes=ALL),
    OpSpec("triu", [
        Case([In((3, 4))], name="default"),
        Case([In((2, 3, 4))], {"diagonal": -1}, name="batch_below"),
        Case([In((4, 3))], {"diagonal": 5}, name="beyond"),
    ], ref=lambda x, diagonal=0: np.triu(x, diagonal), dtypes=ALL),
    OpSpec("diff", [
        Case([In((5,))], name="1d"),
        Case([In((3, 4))], {"n": 2, "axis": 0}, name="n2_axis0"),
        Case([In((3, 4)), 1, -1, In((3, 2)), In((3, 1))], name="prepend_append"),
        Case([In((2, 5))], {"n": 3, "dim": -1}, name="dim_alias"),
        Case([In((2, 3)), 1, 0, In(()), In((1, 3))], name="0d_prepend"),
        Case([In((4,))], {"n": 0}, name="n0_identity"),
        Case([In((3,))], {"n": 4}, name="n_past_length"),
    ], ref=_diff_ref, dtypes=ALL),
    OpSpec("outer", [
        Case([In((3,)), In((4,))], name="vectors"),
        Case([In((2, 2)), In(())], name="flattens"),
        Case([In((0,)), In((3,))], name="empty"),
    ], ref=lambda x, y: np.outer(x, y), dtypes=REAL),
    OpSpec("diag", [
        Case([In((3,))], name="vector"),
        Case([In((3,))], {"offset": -1, "padding_value": 2}, name="vector_offset_padding"),
        Case([In((3, 4))], {"offset": 1}, name="matrix_diagonal"),
        Case([In((3, 4))], {"offset": -2}, name="matrix_below"),
        Case([In(())], name="0d"),
    ], ref=_diag_ref, dtypes=ALL),
    OpSpec("diagonal", [
        Case([In((3, 4))], name="2d"),
        Case([In((2, 3, 4))], {"offset": 1, "axis1": 1, "axis2": 2}, name="batch"),
        Case([In((2, 3, 4))], {"offset": -1, "dim1": 2, "dim2": 0}, name="torch_names_reversed"),
        Case([In((3, 4))], {"offset": 7}, name="empty"),
    ], ref=_diagonal_ref, dtypes=ALL),
    OpSpec("trace", [
        Case([In((3, 4))], name="2d"),
        Case([In((2, 3, 4))], {"offset": 1, "axis1": 1, "axis2": 2}, name="batch"),
        Case([In((3, 3))], {"offset": -3}, name="empty_diagonal"),
    ], ref=_trace_ref, dtypes=REAL),

    OpSpec("norm", NORM_CASES + [
        Case([In((3, 4))], {"p": 2, "axis": -1, "dtype": "float64"}, name="dtype", dtypes=("float32", "float64")),
    ], ref=_norm_ref, out_dtype=_norm_dtype, rtol=NORM_TOL),
    OpSpec("vector_norm", [
        Case([In((2, 3, 4))], name="default_flattens"),
        Case([In((2, 3, 4))], {"p": 3, "axis": [1, 2]}, name="two_axes_stay_vector"),
        Case([In((2, 3, 4))], {"p": math.inf, "axis": 0, "keepdim": True}, name="inf_keepdim"),
    ], ref=_vector_ref, call=oarlock.linalg.vector_norm, rtol=NORM_TOL),
    OpSpec("matrix_norm", [
        Case([In((2, 3, 4))], name="default_fro_last_two"),
        Case([In((2, 3, 4))], {"p": "nuc", "axis": [0, 2]}, name="nuc"),
        Case([In((3, 4))], {"p": -math.inf, "keepdim": True}, name="min_row_sum"),
    ], ref=_matrix_ref, call=oarlock.linalg.matrix_norm, rtol=NORM_TOL),
    OpSpec("_norm_svd_grad", [
        Case([In((3, 4)), "nuc", [0, 1]], name="nuc"),
        Case([In((2, 3, 4)), 2.0, [2, 1]], name="largest"),
        Case([In((4, 2, 3)), -2.0, [0, 2]], name="smallest"),
    ], ref=_svd_grad_ref, call=library_op("_norm_svd_grad"), grad=False, rtol=NORM_TOL),
]
