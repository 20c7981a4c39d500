"""Specs for the linalg family: matmul (vectors, transposes, batch broadcasting, 0-size), bmm and
nn.functional.linear (weight stored as [in_features, out_features]), and linear's fused backward _linear_grad."""

import numpy as np

import oarlock.nn.functional as F
from op_specs.base import FLOATS, INTS, Case, In, OpSpec, library_op

REAL = FLOATS + INTS


def _matmul_ref(x, y, transpose_x=False, transpose_y=False):
    # Paddle: the flags swap the last two axes of operands with at least two dimensions
    if transpose_x and x.ndim > 1:
        x = np.swapaxes(x, -1, -2)
    if transpose_y and y.ndim > 1:
        y = np.swapaxes(y, -1, -2)
    return np.matmul(x, y)


def _linear_ref(x, weight, bias=None):
    out = np.matmul(x, weight)
    return out if bias is None else out + bias


def _linear_grad_ref(x, weight, g, need_x=True, need_weight=True, need_bias=True):
    rows = g.reshape(-1, g.shape[-1])
    empty = np.zeros((0,), g.dtype)
    return (g @ weight.T if need_x else empty, x.reshape(-1, x.shape[-1]).T @ rows if need_weight else empty,
            rows.sum(axis=0) if need_bias else empty)


SPECS = [
    OpSpec("matmul", [
        Case([In((3, 4)), In((4, 5))], name="2d"),
        Case([In((2, 1, 3, 4)), In((5, 4, 2))], name="batch_broadcast"),
        Case([In((2, 3, 4)), In((4, 2))], name="batch_matrix"),
        Case([In((2, 2, 3, 4)), In((4, 5))], name="batch4_matrix"),
        Case([In((4,)), In((4,))], name="dot"),
        Case([In((4,)), In((2, 4, 3))], name="vector_batch"),
        Case([In((3, 4)), In((4,))], name="matrix_vector"),
        Case([In((2, 3, 4)), In((4,))], name="batch_vector"),
        Case([In((4, 3)), In((4, 5))], {"transpose_x": True}, name="tx"),
        Case([In((3, 4)), In((5, 4))], {"transpose_y": True}, name="ty"),
        Case([In((2, 4, 3)), In((1, 5, 4))], {"transpose_x": True, "transpose_y": True}, name="txty_batch"),
        Case([In((4,)), In((3, 4))], {"transpose_x": True, "transpose_y": True}, name="vector_flags"),
        Case([In((0, 3)), In((3, 2))], name="empty_rows"),
        Case([In((2, 0)), In((0, 3))], name="empty_inner"),
        Case([In((0, 2, 3)), In((3, 4))], name="empty_batch"),
    ], ref=_matmul_ref, dtypes=REAL),
    OpSpec("bmm", [
        Case([In((2, 3, 4)), In((2, 4, 5))], name="3d"),
        Case([In((1, 1, 3)), In((1, 3, 1))], name="single"),
        Case([In((0, 3, 4)), In((0, 4, 2))], name="empty_batch"),
    ], ref=np.matmul, dtypes=REAL),
    OpSpec("linear", [
        Case([In((2, 3)), In((3, 4)), In((4,))], name="bias"),
        Case([In((2, 5, 3)), In((3, 4)), In((4,))], name="batch"),
        Case([In((3,)), In((3, 2)), None], name="vector_nobias"),
        Case([In((2, 3)), In((3, 4)), In((2, 4))], name="full_bias"),
        Case([In((0, 3)), In((3, 4)), In((4,))], name="empty"),
    ], ref=_linear_ref, dtypes=REAL, call=F.linear),
    OpSpec("_linear_grad", [
        Case([In((2, 3)), In((3, 4)), In((2, 4))], name="2d"),
        Case([In((2, 5, 3)), In((3, 4)), In((2, 5, 4))], name="batch"),
        Case([In((2, 5, 3)), In((3, 4)), In((2, 5, 4)), False, True, False], name="weight_only"),
        Case([In((0, 3)), In((3, 4)), In((0, 4))], name="empty"),
    ], ref=_linear_grad_ref, dtypes=FLOATS, grad=False, call=library_op("_linear_grad")),
]
