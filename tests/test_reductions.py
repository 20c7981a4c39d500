"""Reduction behaviour the op table can't express: ties, errors, dtype rules, numerical edge
cases, 16-bit accumulation and second derivatives."""

from __future__ import annotations

import math

import numpy as np
import pytest

import oarlock


def _t(values, dtype="float64", grad=False):
    t = oarlock.to_tensor(np.asarray(values), dtype=dtype)
    t.stop_gradient = not grad
    return t


@pytest.mark.parametrize("fn", ["max", "amax", "min", "amin"])
def test_ties_share_the_gradient_evenly(fn):
    values = [1.0, 3.0, 3.0, 2.0] if "max" in fn else [2.0, 1.0, 3.0, 1.0]
    x = _t(values, grad=True)
    getattr(oarlock, fn)(x).backward()
    expected = [0.0, 0.5, 0.5, 0.0] if "max" in fn else [0.0, 0.5, 0.0, 0.5]
    np.testing.assert_allclose(x.grad.numpy(), expected)
    y = _t([[5.0, 5.0, 5.0], [1.0, 2.0, 0.0]], grad=True)
    getattr(oarlock, fn)(y, axis=1).sum().backward()
    assert np.allclose(y.grad.numpy().sum(axis=1), 1.0), "each row's pieces must sum to its gradient"


def test_aliases_are_the_same_function():
    assert oarlock.amax is oarlock.max and oarlock.amin is oarlock.min
    x = _t([[1.0, 4.0], [3.0, 2.0]])
    np.testing.assert_array_equal(x.amax(axis=0).numpy(), [3.0, 4.0])
    np.testing.assert_array_equal(oarlock.sum(input=x, dim=1).numpy(), [5.0, 5.0])


@pytest.mark.parametrize("call, words", [
    (lambda: oarlock.max(oarlock.zeros([0, 3]), axis=0), ["oarlock.max", "empty axis"]),
    (lambda: oarlock.min(oarlock.zeros([0]),), ["oarlock.min", "empty axis"]),
    (lambda: oarlock.argmax(oarlock.zeros([2, 0]), axis=1), ["oarlock.argmax", "empty axis"]),
    (lambda: oarlock.argmax(oarlock.zeros([2, 3]), dtype="float32"), ["oarlock.argmax", "dtype", "int32"]),
    (lambda: oarlock.argmin(oarlock.zeros([2, 3]), axis=[0]), ["oarlock.argmin", "axis", "int"]),
    (lambda: oarlock.sum(oarlock.zeros([2, 3]), axis=2), ["oarlock.sum", "axis 2", "[-2, 1]"]),
    (lambda: oarlock.mean(oarlock.zeros([2, 3]), axis=[1, -1]), ["oarlock.mean", "twice"]),
    (lambda: oarlock.var(oarlock.zeros([2, 3]), unbiased=True, correction=0), ["oarlock.var", "correction"]),
    (lambda: oarlock.cumsum(oarlock.zeros([2, 3]), axis=-3), ["oarlock.cumsum", "axis -3"]),
    (lambda: oarlock.sum(oarlock.zeros([2]), dim=0, axis=0), ["oarlock.sum", "alias"]),
])
def test_errors_name_the_op_and_the_problem(call, words):
    with pytest.raises((TypeError, ValueError)) as info:
        call()
    for word in words:
        assert word in str(info.value), f"{word!r} missing from: {info.value}"


def test_paddle_dtype_rules():
    i32 = _t([[1, 2], [3, 4]], dtype="int32")
    assert oarlock.sum(i32).dtype == "int64"
    assert oarlock.sum(_t([True, False], dtype="bool")).dtype == "int64"
    assert oarlock.prod(i32).dtype == "int32"
    assert oarlock.prod(_t([True, True], dtype="bool")).dtype == "int64"
    assert oarlock.cumsum(i32).dtype == "int64"
    assert oarlock.mean(i32).dtype == "float32" and oarlock.mean(i32).item() == 2.5
    assert oarlock.var(i32).dtype == "float32"
    assert oarlock.argmax(i32).dtype == "int64" and oarlock.argmax(i32, dtype="int32").dtype == "int32"
    assert oarlock.all(i32).dtype == "bool"
    assert oarlock.sum(_t([1.0, 2.0], dtype="float32"), dtype="float64").dtype == "float64"


def test_shapes_follow_paddle():
    x = oarlock.zeros([2, 3])
    assert oarlock.argmax(x, keepdim=True).shape == [1, 1]
    assert oarlock.sum(x, axis=[]).shape == []          # an empty list reduces every axis
    scalar = oarlock.to_tensor(2.0)
    assert oarlock.cumsum(scalar).shape == [1]           # axis=None flattens
    assert oarlock.cumsum(scalar, axis=0).shape == []
    assert oarlock.max(scalar, axis=-1).shape == []


def test_empty_reductions_use_the_identities():
    e = oarlock.zeros([0, 3])
    np.testing.assert_array_equal(oarlock.sum(e, axis=0).numpy(), [0, 0, 0])
    np.testing.assert_array_equal(oarlock.prod(e, axis=0).numpy(), [1, 1, 1])
    assert np.isnan(oarlock.mean(e).item()) and np.isnan(oarlock.std(e, axis=0).numpy()).all()
    np.testing.assert_array_equal(oarlock.logsumexp(e, axis=0).numpy(), [-np.inf] * 3)
    assert oarlock.all(e).item() is True and oarlock.any(e).item() is False


def test_logsumexp_is_stable_at_the_extremes():
    np.testing.assert_allclose(oarlock.logsumexp(_t([1000.0, 1000.0])).item(), 1000 + math.log(2))
    assert oarlock.logsumexp(_t([-np.inf, -np.inf])).item() == -np.inf
    assert oarlock.logsumexp(_t([np.inf, 1.0])).item() == np.inf


def test_bfloat16_accumulates_in_float32():
    # accumulating in bfloat16 stalls at 256 (256 + 1 rounds back to 256)
    assert oarlock.ones([1000], dtype="bfloat16").sum().item() == 1000
    assert oarlock.ones([1000], dtype="bfloat16").mean().item() == 1
    assert oarlock.ones([1000], dtype="bfloat16").cumsum().numpy()[-1] == 1000


def test_var_and_std_corrections():
    x = _t([1.0, 2.0, 4.0, 7.0])
    for kwargs, ddof in (({}, 1), ({"unbiased": False}, 0), ({"correction": 0}, 0), ({"correction": 2}, 2)):
        np.testing.assert_allclose(oarlock.var(x, **kwargs).item(), np.var(x.numpy(), ddof=ddof))
        np.testing.assert_allclose(oarlock.std(x, **kwargs).item(), np.std(x.numpy(), ddof=ddof))
    assert np.isnan(oarlock.var(_t([3.0])).item())   # one element, unbiased: no degrees of freedom


def test_std_of_constant_has_zero_gradient():
    x = _t([2.0, 2.0, 2.0], grad=True)
    oarlock.std(x).backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0, 0.0])


SECOND_ORDER = [
    ("sum", {"axis": 1}),
    ("mean", {"axis": 0, "keepdim": True}),
    ("max", {"axis": 1}),
    ("prod", {"axis": 1}),
    ("var", {"axis": 1}),
    ("std", {}),
    ("logsumexp", {"axis": 0}),
    ("cumsum", {"axis": 1}),
]


@pytest.mark.parametrize("fn, kwargs", SECOND_ORDER, ids=[c[0] for c in SECOND_ORDER])
def test_second_derivative_matches_finite_differences(fn, kwargs):
    """The first gradient, built with create_graph=True, differentiated again: compare the
    Hessian-vector product with central differences of the first gradient."""
    rng = np.random.default_rng(0)
    host = rng.uniform(0.5, 2.0, size=(3, 4))
    weights = rng.standard_normal(getattr(oarlock, fn)(_t(host), **kwargs).shape)
    direction = rng.standard_normal(host.shape)

    def first_grad(values, create_graph):
        x = _t(values, grad=True)
        out = getattr(oarlock, fn)(x, **kwargs)
        (g,) = oarlock.grad([out], [x], [_t(weights)], create_graph=create_graph)
        return x, g

    x, g = first_grad(host, True)
    # linear ops (sum, cumsum) and max's piecewise-linear gradient don't depend on x at all
    (hvp,) = oarlock.grad([g], [x], [_t(direction)], allow_unused=True) if not g.stop_gradient else (None,)
    hvp = np.zeros(host.shape) if hvp is None else hvp.numpy()
    eps = 1e-6
    up = first_grad(host + eps * direction, False)[1].numpy()
    down = first_grad(host - eps * direction, False)[1].numpy()
    np.testing.assert_allclose(hvp, (up - down) / (2 * eps), rtol=1e-5, atol=1e-6)
