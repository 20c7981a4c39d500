"""Elementwise behaviour the op table can't express: promotion with Python numbers, public names and
aliases, Python operators, gradient conventions (ties, 0^y, clip bounds), erf accuracy, error messages."""

from __future__ import annotations

import math
import operator

import numpy as np
import pytest

import oarlock as paddle
import oarlock.nn.functional as F


def t(values, dtype=None, grad=False):
    return paddle.to_tensor(values, dtype=dtype, stop_gradient=not grad)


def test_true_division_and_scalar_promotion():
    q = t([1, 2, 3]) / 2
    assert q.dtype == paddle.float32 and q.tolist() == [0.5, 1.0, 1.5]
    assert (t([1.0, 2.0]) ** 2).dtype == paddle.float32
    assert (t([1, 2]) ** 2).dtype == paddle.int64 and (t([1, 2]) ** 2.0).dtype == paddle.float32
    assert (t([1, 2]) * 2.5).dtype == paddle.float32
    assert (t([1.0], "float16") * 2.5).dtype == paddle.float16
    assert paddle.divide(t([1], "int32"), t([2], "int32")).dtype == paddle.float32
    assert (t([True]) & True).dtype == paddle.bool and paddle.where(t([True]), 1, 2.5).dtype == paddle.float32


def test_name_keyword_and_aliases():
    x, y = t([1.0, -2.0, 3.0]), t([2.0, 2.0, -1.0])
    assert paddle.add(x, y, name="n").tolist() == [3.0, 0.0, 2.0]
    assert paddle.add(input=x, other=y).tolist() == [3.0, 0.0, 2.0]
    assert paddle.pow(x, exponent=2).tolist() == [1.0, 4.0, 9.0]
    groups = [("subtract", "sub"), ("divide", "div", "true_divide"), ("remainder", "mod", "floor_mod"),
              ("clip", "clamp"), ("equal", "eq"), ("not_equal", "ne"), ("less_than", "lt", "less"),
              ("less_equal", "le"), ("greater_than", "gt", "greater"), ("greater_equal", "ge"),
              ("neg", "negative"), ("bitwise_not", "bitwise_invert")]
    for names in groups:
        functions = {getattr(paddle, n) for n in names} | {getattr(x, n).__func__ for n in names}
        assert len(functions) == 1, names
    for name in ("relu", "gelu", "silu", "sigmoid", "tanh"):
        assert getattr(F, name) is getattr(paddle, name) is getattr(x, name).__func__
    assert x.abs().tolist() == [1.0, 2.0, 3.0] and x.clip(min=0).tolist() == [1.0, 0.0, 3.0]
    with pytest.raises(TypeError, match="both 'x' and its alias 'input'"):
        paddle.exp(x, input=x)


@pytest.mark.parametrize("op", [operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv,
                                operator.mod, operator.pow, operator.lt, operator.le, operator.gt, operator.ge,
                                operator.eq, operator.ne])
def test_python_operators_match_numpy(op):
    a, b = np.array([[1.5, 2.5, 3.0]]), np.array([[2.0], [-1.5]])  # positive bases: no nan powers
    for left, right, nl, nr in ((t(a), t(b), a, b), (t(a), 2, a, 2), (3, t(b), 3, b)):
        np.testing.assert_allclose(op(left, right).numpy(), op(nl, nr), rtol=1e-6)


def test_bitwise_and_unary_operators():
    i, j = t([6, -3, 0]), t([3, 5, 1])
    assert (i & j).tolist() == [2, 5, 0] and (i | j).tolist() == [7, -3, 1] and (i ^ j).tolist() == [5, -8, 1]
    assert (~i).tolist() == [-7, 2, -1] and (~t([True, False])).tolist() == [False, True]
    assert (1 | t([2])).tolist() == [3] and (-i).tolist() == [-6, 3, 0] and abs(i).tolist() == [6, 3, 0]


def test_maximum_minimum_split_ties_like_torch():
    for fn in (paddle.maximum, paddle.minimum):
        x, y = t([1.0, 2.0, 3.0], grad=True), t([2.0, 2.0, 2.0], grad=True)
        fn(x, y).sum().backward()
        first = [0.0, 0.5, 1.0] if fn is paddle.maximum else [1.0, 0.5, 0.0]
        assert x.grad.tolist() == first and y.grad.tolist() == first[::-1]


def test_pow_gradient_at_zero_base():
    x, y = t([0.0, 0.0, 2.0], grad=True), t([2.0, 0.0, 3.0], grad=True)
    paddle.pow(x, y).sum().backward()
    assert x.grad.tolist() == [0.0, 0.0, 12.0]
    np.testing.assert_allclose(y.grad.numpy(), [0.0, 0.0, 8 * math.log(2.0)])


def test_clip_passes_gradient_on_the_bounds():
    x = t([-1.0, 0.0, 0.5, 1.0, 2.0], grad=True)
    paddle.clip(x, 0.0, 1.0).sum().backward()
    assert x.grad.tolist() == [0.0, 1.0, 1.0, 1.0, 0.0]
    assert paddle.clip(t([-3, 0, 3]), -0.5, 1.5).dtype == paddle.float32  # float bounds lift ints
    assert paddle.clip(t([-3, 0, 3], "int32"), -1, 1).dtype == paddle.int32


def test_second_derivatives():
    x = t([-1.2, 0.3, 2.0], "float64", grad=True)
    for fn, second in ((paddle.tanh, lambda v: -2 * np.tanh(v) * (1 - np.tanh(v) ** 2)),
                       (paddle.sigmoid, lambda v: (s := 1 / (1 + np.exp(-v))) * (1 - s) * (1 - 2 * s)),
                       (paddle.erf, lambda v: -4 * v / math.sqrt(math.pi) * np.exp(-v * v)),
                       (lambda v: v ** 3, lambda v: 6 * v)):
        (g,) = paddle.grad(fn(x).sum(), x, create_graph=True)
        (h,) = paddle.grad(g.sum(), x)
        np.testing.assert_allclose(h.numpy(), second(x.numpy()), rtol=1e-12)


def test_erf_accuracy():
    xs = np.concatenate([np.linspace(-9, 9, 20001), np.geomspace(1e-300, 1e-2, 50), [0.0, np.inf, -np.inf]])
    ref = np.array([math.erf(v) for v in xs])
    np.testing.assert_allclose(paddle.erf(t(xs)).numpy(), ref, rtol=2e-15, atol=0)
    x32 = xs.astype(np.float32)
    ref32 = np.array([math.erf(v) for v in x32.astype(np.float64)])
    np.testing.assert_allclose(paddle.erf(t(x32)).numpy(), ref32, rtol=4e-7, atol=1e-38)  # denormals: absolute
    assert math.isnan(paddle.erf(t([math.nan])).item())


def test_gelu_keeps_its_tail():
    # for large negative x, gelu is tiny: it must come from erfc, not from 1 + erf(x) = 0
    x = np.array([-10.0, -20.0, -30.0])
    ref = [v * 0.5 * math.erfc(-v / math.sqrt(2)) for v in x]
    np.testing.assert_allclose(F.gelu(t(x)).numpy(), ref, rtol=1e-12)


def test_activations_stay_finite_at_extremes():
    x = t([-1000.0, -50.0, 0.0, 50.0, 1000.0])
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        assert paddle.sigmoid(x).tolist() == [0.0, pytest.approx(math.exp(-50)), 0.5, 1.0, 1.0]
        assert F.silu(x).tolist()[-1] == 1000.0
        assert paddle.erf(x).tolist() == [-1.0, -1.0, 0.0, 1.0, 1.0]


@pytest.mark.parametrize("call,message", [
    (lambda: paddle.exp(t([True])), r"oarlock\.exp\(\): got dtype bool .*it accepts .*int64.*float32"),
    (lambda: paddle.subtract(t([True]), t([False])), r"oarlock\.subtract\(\): got dtype bool"),
    (lambda: paddle.bitwise_and(t([1.0]), t([2.0])), r"oarlock\.bitwise_and\(\): got dtype float32"),
    (lambda: paddle.where(t([1, 0]), t([1.0, 2.0]), 0.0),
     r"oarlock\.where\(\): argument 'condition' must be a bool tensor, got dtype int64"),
    (lambda: paddle.floor_divide(t([1, 2]), t([1, 0])), r"oarlock\.floor_divide\(\): integer division by zero"),
    (lambda: paddle.remainder(t([1, 2]), 0), r"oarlock\.remainder\(\): integer division by zero"),
    (lambda: F.gelu(t([1.0]), approximate="fast"), r"oarlock\.gelu\(\): argument 'approximate' must be"),
    (lambda: paddle.add(t([1.0]), [1.0]), r"oarlock\.add\(\): argument 'y' must be a Tensor or a Python number"),
    (lambda: paddle.clip(t([1.0]), min="a"), r"oarlock\.clip\(\): argument 'min' must be a Python number"),
])
def test_errors_name_the_op_and_the_argument(call, message):
    with pytest.raises((TypeError, ValueError)) as info:
        call()
    assert info.match(message)
