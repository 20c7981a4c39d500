"""The Paddle 3.2 functions composed of existing ops (oarlock_ops/paddle_functions.py) and einsum, against the
installed Paddle 3.2: same values, dtypes and shapes on the same data, and the same gradients for the float
inputs of the differentiable ones."""

import numpy as np
import pytest

import oarlock

R = np.random.default_rng(11)
A = R.standard_normal((3, 4)).astype(np.float32)
B = R.standard_normal((3, 4)).astype(np.float32)
V = R.standard_normal(4).astype(np.float32)
X3 = R.standard_normal((2, 3, 4)).astype(np.float32)
SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -2.0], np.float32)
SORTED = np.sort(R.standard_normal(6).astype(np.float32))

# name -> (positional args, keyword args, differentiable); a numpy array becomes a tensor, a list of arrays a list
CASES = {
    "unbind": ((X3,), {"axis": 1}, True), "unstack": ((X3,), {"axis": -1}, True),
    "meshgrid": ((V, V[:3]), {}, True), "broadcast_tensors": (([A, V[None]],), {}, True),
    "moveaxis": ((X3, [0, 2], [2, 0]), {}, True), "atleast_2d": ((V,), {}, True), "atleast_3d": ((A,), {}, True),
    "hstack": (([A, B],), {}, True), "vstack": (([V, V],), {}, True), "dstack": (([A, B],), {}, True),
    "column_stack": (([V, V],), {}, True), "row_stack": (([A, B],), {}, True),
    "tensor_split": ((X3, 3), {"axis": 2}, True), "tensor_split_idx": ("tensor_split", (A, [1, 3]), {"axis": 1}, True),
    "hsplit": ((A, 2), {}, True), "vsplit": ((X3, [1]), {}, True), "dsplit": ((X3, 2), {}, True),
    "slice": ((X3, [0, 2], [1, -3], [2, 10]), {}, True),
    "strided_slice": ((X3, [1, 2], [0, 3], [3, 0], [2, -1]), {}, True),
    "narrow": ((A, 1, 1, 2), {}, True), "unflatten": ((X3, 2, [2, 2]), {}, True), "reverse": ((A, [0]), {}, True),
    "view_as": ((A, np.zeros((4, 3), np.int64)), {}, True),
    "nonzero": ((np.array([[0, 1], [2, 0]], np.int64),), {}, False),
    "nonzero_tuple": ("nonzero", (np.array([[0, 1], [2, 0]], np.int64),), {"as_tuple": True}, False),
    "masked_select": ((A, A > 0), {}, True),
    "index_sample": ((A, np.array([[0, 3], [1, 1], [2, 0]], np.int64)), {}, True),
    "gather_nd": ((X3, np.array([[0, 1], [1, 2]], np.int64)), {}, True),
    "take": ((A, np.array([[0, 11], [-1, 5]], np.int64)), {}, True),
    "take_wrap": ("take", (A, np.array([13, -14], np.int64)), {"mode": "wrap"}, True),
    "index_fill": ((A, np.array([0, 2], np.int64), 0, 0.5), {}, True),
    "isin": ((np.array([1, 2, 3, 4], np.int64), np.array([2, 4], np.int64)), {}, False),
    "dot": ((V, V), {}, True), "inner": ((A, B), {}, True), "mv": ((A, V), {}, True),
    "kron": ((A[:2, :2], B[:2]), {}, True), "tensordot": ((X3, A.T.copy()), {"axes": [[2], [0]]}, True),
    "tensordot_int": ("tensordot", (X3, R.standard_normal((3, 4, 2)).astype(np.float32)), {"axes": 2}, True),
    "cross": ((A[:, :3].copy(), B[:, :3].copy()), {"axis": 1}, True),
    "logaddexp": ((A, B * 50), {}, True), "lerp": ((A, B, 0.3), {}, True),
    "logit": ((np.clip(np.abs(A) / 3, 0.01, 0.99),), {"eps": 0.05}, True), "stanh": ((A,), {}, True),
    "deg2rad": ((A,), {}, True), "rad2deg": ((A,), {}, True), "frac": ((A * 3,), {}, True), "sgn": ((A,), {}, False),
    "signbit": ((SPECIAL,), {}, False), "isneginf": ((SPECIAL,), {}, False), "isposinf": ((SPECIAL,), {}, False),
    "isreal": ((A,), {}, False), "nan_to_num": ((SPECIAL,), {}, False),
    "nan_to_num_args": ("nan_to_num", (SPECIAL,), {"nan": 1.0, "posinf": 9.0, "neginf": -9.0}, False),
    "nansum": ((np.where(A > 1, np.nan, A).astype(np.float32),), {"axis": 1}, False),
    "nanmean": ((np.where(A > 1, np.nan, A).astype(np.float32),), {}, False),
    "count_nonzero": ((np.array([[0, 1, 2], [0, 0, 3]], np.int64),), {"axis": 1}, False),
    "isclose": ((SPECIAL, SPECIAL + 1e-9), {"equal_nan": True}, False),
    "allclose": ((A, A + 1e-6), {}, False), "equal_all": ((A, A.copy()), {}, False),
    "add_n": (([A, B, A],), {}, True), "dist": ((A, B), {"p": 3}, True),
    "dist_inf": ("dist", (A, B), {"p": np.inf}, False),
    "cdist": ((A, B[:2] + 0.1), {}, True), "searchsorted": ((SORTED, A), {}, False),
    "searchsorted_right": ("searchsorted", (SORTED, SORTED[[0, 2, 2, 5]].copy()), {"right": True}, False),
    "bucketize": ((A, SORTED), {"out_int32": True}, False),
    "tril_indices": ((4, 3, 1), {}, False), "triu_indices": ((3, 5, -1), {}, False),
    "rot90": ((X3,), {"k": 1, "axes": [1, 2]}, True), "rot90_neg": ("rot90", (A,), {"k": -1}, True),
    "rot90_2": ("rot90", (A,), {"k": 2}, True),
    "heaviside": ((np.array([-1.5, 0, 2], np.float32), np.array([0.5, 0.25, 0.75], np.float32)), {}, False),
    "copysign": ((A, -B), {}, False), "copysign_scalar": ("copysign", (A, -1.5), {}, True),
    "hypot": ((A, B), {}, True), "sinc": ((np.append(A.ravel(), 0),), {}, True),
    "diagflat": ((A[:2, :2].copy(),), {"offset": -1}, True), "vander": ((V,), {"n": 3, "increasing": True}, True),
    "block_diag": (([A, V, np.array(2.0, np.float32)],), {}, True), "cartesian_prod": (([V[:2].copy(), V],), {}, True),
    "unique": ((np.array([3, 1, 2, 3, 1], np.int64),), {"return_index": True, "return_inverse": True,
                                                         "return_counts": True}, False),
    "unique_axis": ("unique", (np.array([[1, 2], [1, 2], [0, 5]], np.int64),), {"axis": 0}, False),
    "unique_consecutive": ((np.array([1, 1, 2, 2, 3, 1, 1], np.int64),), {"return_inverse": True,
                                                                          "return_counts": True}, False),
    "bincount": ((np.array([0, 1, 1, 4], np.int64),), {"minlength": 6}, False),
    "bincount_weights": ("bincount", (np.array([0, 1, 1, 3], np.int64), V), {}, False),
    "logspace": ((0.0, 2.0, 5), {"base": 2.0}, False),
    "einsum": (("bij,bjk->bik", X3, R.standard_normal((2, 4, 3)).astype(np.float32)), {}, True),
    "einsum_ellipsis": ("einsum", ("...j,j->...", X3, V), {}, True),
}


def _to(lib, value, grad):
    if isinstance(value, np.ndarray):
        return lib.to_tensor(value, stop_gradient=not (grad and value.dtype == np.float32))
    if isinstance(value, list) and value and isinstance(value[0], np.ndarray):
        return [_to(lib, v, grad) for v in value]
    return value


def _flat(value):
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _flat(v)]
    return [value]


def _run(lib, name, args, kwargs, grad):
    inputs = [_to(lib, a, grad) for a in args]
    out = getattr(lib, name)(*inputs, **kwargs)
    leaves = [t for t in _flat(inputs) if isinstance(t, lib.Tensor) and not t.stop_gradient]
    if grad and leaves:
        total = None
        for k, o in enumerate(_flat(out)):
            w = lib.to_tensor(np.linspace(-1, 1, max(o.size, 1), dtype=np.float32)[:o.size].reshape(o.shape) + k)
            term = (o * w).sum()
            total = term if total is None else total + term
        total.backward()
    return [o.numpy() for o in _flat(out)], [t.grad.numpy() for t in leaves] if grad and leaves else []


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_paddle(paddle, case):
    spec = CASES[case]
    name, (args, kwargs, grad) = (spec[0], spec[1:]) if isinstance(spec[0], str) and len(spec) == 4 else (case, spec)
    theirs, their_grads = _run(paddle, name, args, kwargs, grad)
    ours, our_grads = _run(oarlock, name, args, kwargs, grad)
    assert len(ours) == len(theirs), case
    for o, t in zip(ours, theirs):
        assert o.shape == t.shape and o.dtype == t.dtype, (case, o.shape, t.shape, o.dtype, t.dtype)
        np.testing.assert_allclose(o, t, rtol=1e-5, atol=1e-5, err_msg=case)
    assert len(our_grads) == len(their_grads)
    for o, t in zip(our_grads, their_grads):
        np.testing.assert_allclose(o, t, rtol=1e-4, atol=1e-5, err_msg=f"{case} gradient")


def test_methods_and_errors():
    x = oarlock.to_tensor(A)
    assert [p.shape for p in x.unbind(0)] == [[4]] * 3 and x.kron(x).shape == [9, 16]
    with pytest.raises(ValueError, match=r"oarlock.index_sample\(\): x and index must be 2-d"):
        oarlock.index_sample(x, oarlock.to_tensor([0, 1]))
    with pytest.raises(ValueError, match=r"oarlock.tensordot\(\): contracted sizes differ"):
        oarlock.tensordot(x, x, axes=[[1], [1]]) if False else oarlock.tensordot(x, x, 1)
    with pytest.raises(IndexError, match=r"oarlock.take\(\): index out of range"):
        oarlock.take(x, oarlock.to_tensor([12]))
    with pytest.raises(ValueError, match=r"oarlock.einsum\(\): the equation 'ij,jk' has 2 operand"):
        oarlock.einsum("ij,jk", x)
    with pytest.raises(TypeError, match=r"oarlock.unbind\(\): input must be an oarlock.Tensor"):
        oarlock.unbind(A)
    counter = oarlock.to_tensor([1.0])
    assert oarlock.increment(counter, 2.0) is counter and counter.tolist() == [3.0]
    target = oarlock.zeros([3, 4])
    assert oarlock.assign(A, target) is target and np.array_equal(target.numpy(), A)


SPD = (A @ A.T + 3 * np.eye(3)).astype(np.float32)
LINALG = {
    "inv": ((SPD,), {}), "det": ((SPD,), {}), "slogdet": ((SPD,), {}), "solve": ((SPD, B), {}),
    "solve_vector": ("solve", (SPD, V[:3].copy()), {}), "cholesky": ((SPD,), {}),
    "cholesky_upper": ("cholesky", (SPD,), {"upper": True}),
    "multi_dot": (([A, B.T.copy(), A],), {}), "matrix_transpose": ((X3,), {}), "vecdot": ((A, B), {"axis": 0}),
    "matrix_power": ((SPD, 3), {}), "matrix_power_neg": ("matrix_power", (SPD, -2), {}),
    "matrix_power_zero": ("matrix_power", (SPD, 0), {}), "cov": ((A,), {}),
    "cov_cols": ("cov", (A,), {"rowvar": False}),
    "cov_weights": ("cov", (A, True, True, np.array([1, 2, 1, 3], np.int64), np.array([0.5, 1, 2, 1], np.float32)), {}),
    "corrcoef": ((A,), {}), "diagonal": ((X3,), {"offset": 1, "axis1": 1, "axis2": 2}),
    "cross": ((A[:, :3].copy(), B[:, :3].copy()), {"axis": 1}),
}


@pytest.mark.parametrize("case", sorted(LINALG))
def test_linalg_matches_paddle(paddle, case):
    spec = LINALG[case]
    name, (args, kwargs) = (spec[0], spec[1:]) if isinstance(spec[0], str) else (case, spec)
    results = []
    for lib in (paddle, oarlock):
        inputs = [_to(lib, a, True) for a in args]
        out = getattr(lib.linalg, name)(*inputs, **kwargs)
        (out * lib.to_tensor(np.linspace(-1, 1, out.size, dtype=np.float32).reshape(out.shape))).sum().backward()
        grads = [t.grad.numpy() for t in _flat(inputs) if isinstance(t, lib.Tensor) and not t.stop_gradient]
        results.append((out.numpy(), grads))
    (theirs, their_grads), (ours, our_grads) = results
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype, (case, ours.shape, theirs.shape)
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5, err_msg=case)
    for o, t in zip(our_grads, their_grads):
        np.testing.assert_allclose(o, t, rtol=1e-3, atol=1e-4, err_msg=f"{case} gradient")


def test_fp8_gemm_against_float64_numpy():
    # Paddle 3.2 runs this op only on GPUs: the oracle is numpy on the float8 values (ml_dtypes)
    import ml_dtypes
    x8 = A.astype(ml_dtypes.float8_e4m3fn)
    y8 = B.astype(ml_dtypes.float8_e4m3fn)
    bias = V[:3].copy()
    x, y = oarlock.to_tensor(A).astype("float8_e4m3fn"), oarlock.to_tensor(B).astype("float8_e4m3fn")
    out = oarlock.linalg.fp8_fp8_half_gemm_fused(x, y, transpose_y=True, bias=oarlock.to_tensor(bias),
                                                 output_dtype="bfloat16", scale=0.5, act="relu")
    expected = np.maximum(x8.astype(np.float64) @ y8.astype(np.float64).T * 0.5 + bias, 0)
    assert out.dtype == oarlock.bfloat16 and out.shape == [3, 3]
    np.testing.assert_allclose(out.astype("float32").numpy(), expected, rtol=1e-2, atol=1e-2)
    with pytest.raises(TypeError, match="x must be float8_e4m3fn or float8_e5m2, got float32"):
        oarlock.linalg.fp8_fp8_half_gemm_fused(oarlock.to_tensor(A), y)


def test_constants_and_tensor_methods_match_paddle(paddle):
    for name in ("e", "pi", "inf"):
        assert getattr(oarlock, name) == getattr(paddle, name)
    assert np.isnan(oarlock.nan) and oarlock.newaxis is paddle.newaxis is None
    x, px = oarlock.to_tensor(A), paddle.to_tensor(A)
    assert int(x.rank()) == int(px.rank()) and x.matrix_transpose().shape == px.matrix_transpose().shape
    np.testing.assert_allclose(x.cov().numpy(), px.cov().numpy(), rtol=1e-5)
    assert x.atleast_3d().shape == px.atleast_3d().shape


def test_einsum_float32_sums_stay_within_rounding_of_float64():
    """A float32 contraction over 50,000 terms, written both ways round (the second hands numpy transposed
    operands): within 1e-6 of float64 numpy, as torch and Paddle are; einsum's term-by-term loop is ~1e-5 off."""
    rng = np.random.default_rng(1)
    x, y = rng.random((4, 50000), dtype=np.float32), rng.random((50000, 3), dtype=np.float32)
    ref = x.astype(np.float64) @ y.astype(np.float64)
    for equation, a, b in (("ij,jk->ik", x, y), ("kj,ij->ik", y.T.copy(), x)):
        ours = oarlock.einsum(equation, oarlock.to_tensor(a), oarlock.to_tensor(b)).numpy()
        assert ours.dtype == np.float32
        np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=0, err_msg=equation)
