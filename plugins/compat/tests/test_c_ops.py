"""oarlock._C_ops against the installed Paddle 3.2's paddle._C_ops: the same positional call on the same data
gives the same values (and, for the differentiable ones checked, the same gradients)."""

import numpy as np
import pytest

import oarlock
from oarlock_compat import c_ops

R = np.random.default_rng(7)
A = R.standard_normal((3, 4)).astype(np.float32)
B = R.standard_normal((4, 5)).astype(np.float32)
C = R.standard_normal((3, 4)).astype(np.float32)
POS = (np.abs(A) + 0.5).astype(np.float32)
IDX = np.array([2, 0, 1], np.int64)
X3 = R.standard_normal((2, 3, 4)).astype(np.float32)

# name -> args, where a numpy array becomes a tensor of the library under test, a list of arrays a list of tensors
CASES = {
    "matmul": (A, B, False, False), "matmul_t": ("matmul", A, C, False, True),
    "add": (A, C), "subtract": (A, C), "multiply": (A, C), "divide": (A, POS), "maximum": (A, C),
    "minimum": (A, C), "equal": (A, A), "less_than": (A, C), "greater_equal": (A, C),
    "bmm": (X3, X3.transpose(0, 2, 1)),
    "scale": (A, 2.5, -1.0, True), "scale_before": ("scale", A, 2.5, -1.0, False),
    "sum": (A, [], None, False), "sum_axis": ("sum", X3, [1], None, True), "mean": (X3, [0, 2], False),
    "max": (A, [-1], False), "min": (A, [], False), "logsumexp": (X3, [1], False, False),
    "argmax": (A, 1, False, False, "int64"), "argmax_flat": ("argmax", A, 0, False, True, "int64"),
    "argmin": (A, 0, True, False, "int32"),
    "cumsum": (A, 1, False, False, False), "cumsum_excl_rev": ("cumsum", A, 1, False, True, True),
    "cumsum_flat": ("cumsum", A, -1, True, False, False),
    "softmax": (A, -1), "log_softmax": (A, 0), "gelu": (A, False), "gelu_tanh": ("gelu", A, True),
    "exp": (A,), "log": (POS,), "sqrt": (POS,), "rsqrt": (POS,), "tanh": (A,), "sigmoid": (A,), "silu": (A,),
    "relu": (A,), "abs": (A,), "square": (A,), "sin": (A,), "cos": (A,), "floor": (A,), "erf": (A,),
    "transpose": (X3, [2, 0, 1]), "reshape": (X3, [4, -1]), "expand": (A[:1], [3, 4]), "tile": (A, [2, 1]),
    "cast": (A, "float64"), "unsqueeze": (A, [0, 2]), "squeeze": (A[None], [0]), "flatten": (X3, 1, 2),
    "gather": (A, IDX, 0), "index_select": (A, IDX, 0), "clip": (A, -0.5, 0.5),
    "masked_fill": (A, A > 0, np.array(0.25, np.float32)),
    "where": (A > 0, A, C), "tril": (A, 0), "triu": (A, 1), "concat": ([A, C], 0), "stack": ([A, C], 1),
    "split": (A, [1, 3], 1), "split_with_num": (A, 2, 1), "topk": (A, 2, -1, True, True),
    "argsort": (A, 1, True, False), "take_along_axis": (A, np.argsort(A, 1)[:, :2], 1),
    "full_like": (A, 3.0, "float32"), "assign": (A,), "pow": (POS, 1.5), "elementwise_pow": (POS, POS),
    "full": ([2, 3], 1.5, "float32"), "arange": (np.array(0), np.array(10), np.array(3), "int64"),
    "linear": (A, B, R.standard_normal(5).astype(np.float32)),
    "embedding": (np.array([[0, 2], [1, 0]], np.int64), B, -1, False),
    "embedding_pad": ("embedding", np.array([[0, 2], [1, 0]], np.int64), B, 0, False),
    "layer_norm": (X3, R.standard_normal(12).astype(np.float32), R.standard_normal(12).astype(np.float32),
                   1e-5, 1),
}
ON_PLACE = {"full", "full_like", "arange"}   # these take a trailing place (Paddle's crashes without one)


def _to(lib, value):
    if isinstance(value, np.ndarray):
        return lib.to_tensor(value)
    if isinstance(value, list) and value and isinstance(value[0], np.ndarray):
        return [lib.to_tensor(v) for v in value]
    return value


def _numpy(out):
    if isinstance(out, (list, tuple)):
        return [_numpy(o) for o in out if o is not None]
    return out.numpy()


@pytest.mark.parametrize("case", sorted(CASES))
def test_c_op_matches_paddle(paddle, case):
    args = CASES[case]
    name, args = (args[0], args[1:]) if isinstance(args[0], str) else (case, args)
    extra = ((paddle.CPUPlace(),), (oarlock.CPUPlace(),)) if name in ON_PLACE else ((), ())
    theirs = getattr(paddle._C_ops, name)(*(_to(paddle, a) for a in args), *extra[0])
    ours = getattr(oarlock._C_ops, name)(*(_to(oarlock, a) for a in args), *extra[1])
    expected, got = _numpy(theirs), _numpy(ours)
    if isinstance(expected, list):
        assert len(got) == len(expected)
    else:
        expected, got = [expected], [got]
    for e, g in zip(expected, got):
        assert g.shape == e.shape and g.dtype == e.dtype, (case, g.shape, e.shape, g.dtype, e.dtype)
        np.testing.assert_allclose(g, e, rtol=2e-5, atol=1e-6, err_msg=case)


@pytest.mark.parametrize("name, args", [("matmul", (A, B, False, False)), ("softmax", (A, -1)),
                                         ("layer_norm", (X3, X3[0, 0].repeat(3), X3[1, 1].repeat(3), 1e-5, 1)),
                                         ("linear", (A, B, B[0])), ("gelu", (A, True))])
def test_c_op_gradients_match_paddle(paddle, name, args):
    grads = []
    for lib in (paddle, oarlock):
        tensors = [lib.to_tensor(a, stop_gradient=False) if isinstance(a, np.ndarray) else a for a in args]
        out = getattr(lib._C_ops, name)(*tensors)
        out = out[0] if isinstance(out, (tuple, list)) else out
        weight = lib.to_tensor(np.linspace(-1, 1, out.size, dtype=np.float32).reshape(out.shape))
        (out * weight).sum().backward()
        grads.append([t.grad.numpy() for t in tensors if isinstance(t, lib.Tensor)])
    for theirs, ours in zip(*grads):
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)


def _rms_reference(x, bias, residual, weight, norm_bias, eps, begin):
    h = x.astype(np.float64) + (0 if bias is None else bias) + (0 if residual is None else residual)
    axes = tuple(range(begin, h.ndim))
    inv = 1 / np.sqrt((h * h).mean(axis=axes, keepdims=True) + eps)
    return h * inv * weight + (0 if norm_bias is None else norm_bias), h, inv.reshape(-1)


def test_rms_norm_and_swiglu_against_float64_numpy():
    # Paddle 3.2's CPU build has no rms_norm or swiglu kernel, so float64 numpy is the oracle here
    x, res = X3, R.standard_normal(X3.shape).astype(np.float32)
    weight, nbias = R.standard_normal(4).astype(np.float32), R.standard_normal(4).astype(np.float32)
    out, res_out, inv = oarlock._C_ops.rms_norm(oarlock.to_tensor(x), None, oarlock.to_tensor(res),
                                                oarlock.to_tensor(weight), oarlock.to_tensor(nbias), 1e-6, 2,
                                                -1.0, 0, 0.0, 0.0)
    e_out, e_res, e_inv = _rms_reference(x, None, res, weight, nbias, 1e-6, 2)
    for got, expected in ((out, e_out), (res_out, e_res), (inv, e_inv)):
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-6)
    out, res_out, _ = oarlock._C_ops.rms_norm(oarlock.to_tensor(x), None, None, oarlock.to_tensor(weight), None,
                                              1e-6, 2)
    assert res_out is None
    np.testing.assert_allclose(out.numpy(), _rms_reference(x, None, None, weight, None, 1e-6, 2)[0], rtol=1e-5)
    with pytest.raises(NotImplementedError, match="quant_scale"):
        oarlock._C_ops.rms_norm(oarlock.to_tensor(x), None, None, None, None, 1e-6, 2, 0.5)
    silu = lambda v: v / (1 + np.exp(-v.astype(np.float64)))   # noqa: E731
    np.testing.assert_allclose(oarlock._C_ops.swiglu(oarlock.to_tensor(A), oarlock.to_tensor(C)).numpy(),
                               silu(A) * C, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(oarlock._C_ops.swiglu(oarlock.to_tensor(A), None).numpy(),
                               silu(A[:, :2]) * A[:, 2:], rtol=1e-5, atol=1e-6)


def test_every_entry_point_resolves_and_bad_calls_name_the_entry_point(paddle):
    for name, fn in c_ops.entry_points().items():
        assert getattr(oarlock._C_ops, name) is fn
        assert hasattr(paddle._C_ops, name), f"{name} is not one of Paddle's _C_ops"
    for _, path in c_ops.SAME.values():
        c_ops._resolve(path)   # the oarlock function exists
    with pytest.raises(TypeError, match=r"oarlock._C_ops.matmul\(\) takes 4 arguments \(x, y, transpose_x"):
        oarlock._C_ops.matmul(*[oarlock.ones([2, 2])] * 5)
    with pytest.raises(TypeError, match="unexpected or repeated argument 'axis'"):
        oarlock._C_ops.exp(oarlock.ones([2]), axis=0)
