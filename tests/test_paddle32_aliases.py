"""Paddle 3.2's torch compatibility on the elementwise, reduction, shape and nn ops: argument aliases
(input/x, other/y, dim/axis...), torch spellings of existing ops (cat, clamp, eq, mul_, swapaxes...),
the extra arguments (add/sub alpha, divide rounding_mode, gelu approximate strings, silu inplace,
softmax dtype and its implicit dim), F.dropout1d, and the AMP policies of these ops.

Each alias gives the canonical name's result, and giving both a name and its alias is an error naming
both. The extra arguments are checked against torch (values, dtypes, gradients) and, where Paddle 3.2
itself defines the behaviour, against paddle; both are optional.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import oarlock
import oarlock.nn.functional as F
from oarlock.registry import default_registry

RNG = np.random.default_rng(32)


def T(values, dtype=None, grad=False):
    array = np.asarray(values) if dtype is None else np.asarray(values).astype(dtype)
    return oarlock.to_tensor(array, stop_gradient=not grad)


def _numpy(out):
    return [o.numpy() for o in out] if isinstance(out, (list, tuple)) else out.numpy()


def _same(a, b):
    a, b = _numpy(a), _numpy(b)
    if isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
    else:
        np.testing.assert_array_equal(a, b)


# -- argument aliases ---------------------------------------------------------------------------------

X = T(RNG.uniform(0.5, 2.0, (3, 4)).astype("float32"))
Y = T(RNG.uniform(0.5, 2.0, (3, 4)).astype("float32"))
COND = T(RNG.random((3, 4)) < 0.5)
X3 = T(RNG.standard_normal((2, 3, 4)).astype("float32"))
ONES = T(np.ones((3, 1, 4), "float32"))


def _unary(name, fn=None):
    return (name, fn or getattr(oarlock, name), [("x", "input", X)], {})


# (label, function, [(name, alias, value), ...] in call order, other keyword arguments)
ALIASED = [
    *[_unary(name) for name in ("sqrt", "cos", "sin", "floor", "ceil", "trunc", "log", "rsqrt", "sign", "exp",
                                "square", "abs", "neg")],
    _unary("gelu", F.gelu), _unary("silu", F.silu), _unary("F.softmax", F.softmax),
    *[(name, getattr(oarlock, name), [("x", "input", X), ("y", "other", Y)], {})
      for name in ("maximum", "minimum", "fmax", "fmin", "multiply", "add", "subtract", "divide", "equal",
                   "greater_than")],
    ("pow", oarlock.pow, [("x", "input", X), ("y", "exponent", Y)], {}),
    ("where", lambda *args, **kw: oarlock.where(COND, *args, **kw), [("x", "input", X), ("y", "other", Y)], {}),
    *[(name, getattr(oarlock, name), [("x", "input", X), ("axis", "dim", 1)], {"keepdim": True})
      for name in ("sum", "mean", "max", "min", "argmax", "argmin", "logsumexp")],
    ("cumsum", oarlock.cumsum, [("x", "input", X), ("axis", "dim", 1)], {}),
    ("softmax", oarlock.softmax, [("x", "input", X3), ("axis", "dim", 1)], {}),
    ("softmax_dtype", F.softmax, [("x", "input", X), ("axis", "dim", 0)], {"dtype": "float64"}),
    ("squeeze", oarlock.squeeze, [("x", "input", ONES), ("axis", "dim", 1)], {}),
    ("unsqueeze", oarlock.unsqueeze, [("x", "input", X), ("axis", "dim", 1)], {}),
    ("stack", oarlock.stack, [("x", "tensors", [X, Y]), ("axis", "dim", 1)], {}),
    ("concat", oarlock.concat, [("x", "tensors", [X, Y]), ("axis", "dim", 1)], {}),
    ("transpose", oarlock.transpose, [("x", "input", X3), ("perm", "dim0", 0)], {"dim1": 2}),
    ("swapaxes", oarlock.swapaxes, [("x", "input", X3), ("perm", "axis0", 0), ("dim1", "axis1", 2)], {}),
    ("expand_as", oarlock.expand_as, [("x", "input", T(np.ones((3, 1), "float32"))), ("y", "other", X)], {}),
    ("clip", oarlock.clip, [("x", "input", X)], {"min": 0.7, "max": 1.5}),
]


@pytest.mark.parametrize("label,fn,params,extra", ALIASED, ids=[a[0] for a in ALIASED])
def test_alias_gives_the_canonical_result(label, fn, params, extra):
    canonical = fn(**{name: value for name, _, value in params}, **extra)
    aliased = fn(**{alias: value for _, alias, value in params}, **extra)
    positional = fn(*[value for *_, value in params], **extra)
    _same(canonical, aliased)
    _same(canonical, positional)


@pytest.mark.parametrize("label,fn,params,extra", ALIASED, ids=[a[0] for a in ALIASED])
def test_name_and_alias_together_is_an_error(label, fn, params, extra):
    for name, alias, value in params:
        call = {n: v for n, _, v in params}
        with pytest.raises(TypeError, match=f"both '{name}' and its alias '{alias}'"):
            fn(**call, **{alias: value}, **extra)


def test_tensor_methods_take_the_aliases_too():
    _same(X.sum(dim=1, keepdim=True), oarlock.sum(X, axis=1, keepdim=True))
    _same(X.mean(dim=0), oarlock.mean(X, 0))
    _same(X.max(dim=1), oarlock.max(X, 1))
    _same(X.argmax(dim=1, keepdim=True), oarlock.argmax(X, 1, keepdim=True))
    _same(X.cumsum(dim=0), oarlock.cumsum(X, 0))
    _same(X.unsqueeze(dim=0), oarlock.unsqueeze(X, 0))
    _same(X.mul(other=Y), X * Y)
    _same(X.pow(exponent=2), X ** 2)
    _same(X3.softmax(dim=2, dtype="float64"), F.softmax(X3, axis=2, dtype="float64"))
    _same(X3.transpose(0, 1), oarlock.transpose(X3, [1, 0, 2]))
    with pytest.raises(TypeError, match="both 'axis' and its alias 'dim'"):
        X.sum(axis=0, dim=1)


def test_split_keeps_paddles_meaning_and_refuses_torchs_dim():
    # Paddle 3.2 refuses split(x, n, dim=...) and points to compat.split: torch.split(x, 2) means parts of
    # size 2, Paddle's split(x, 2) two parts, so a torch spelling would silently change the result
    x = T(np.arange(12.0).reshape(6, 2))
    assert [p.shape for p in oarlock.split(x, 3)] == [[2, 2]] * 3
    with pytest.raises(TypeError, match="unexpected keyword argument.*'dim'.*num_or_sections"):
        oarlock.split(x, 3, dim=0)


# -- torch spellings of existing ops ------------------------------------------------------------------

A = T(RNG.integers(-3, 4, (3, 4)).astype("float32"))
B = T(RNG.integers(-3, 4, (4,)).astype("float32"))

SPELLINGS = [  # (spelling, canonical, arguments)
    ("cat", "concat", ([A, A], 1)), ("concatenate", "concat", ([A, A],)), ("clamp", "clip", (A, -1, 2)),
    ("eq", "equal", (A, B)), ("ne", "not_equal", (A, B)), ("gt", "greater_than", (A, B)),
    ("greater", "greater_than", (A, B)), ("ge", "greater_equal", (A, B)), ("lt", "less_than", (A, B)),
    ("less", "less_than", (A, B)), ("le", "less_equal", (A, B)), ("mul", "multiply", (A, B)),
    ("sub", "subtract", (A, B)), ("div", "divide", (A, X)), ("true_divide", "divide", (A, X)),
    ("absolute", "abs", (A,)), ("negative", "neg", (A,)), ("amax", "max", (A, 1)), ("amin", "min", (A, 0)),
    ("swapaxes", "transpose", (X3, 1, 2)), ("swapdims", "transpose", (X3, 0, 2)),
]


@pytest.mark.parametrize("spelling,canonical,args", SPELLINGS, ids=[s[0] for s in SPELLINGS])
def test_spelling_is_the_same_op(spelling, canonical, args):
    _same(getattr(oarlock, spelling)(*args), getattr(oarlock, canonical)(*args))
    if spelling not in ("cat", "concatenate"):  # the list ops are functions only, as in torch and Paddle
        tensor, *rest = args
        _same(getattr(tensor, spelling)(*rest), getattr(oarlock, canonical)(*args))


def test_special_namespace():
    _same(oarlock.special.logsumexp(X3, dim=1), oarlock.logsumexp(X3, axis=1))
    _same(oarlock.special.softmax(X3, 1), F.softmax(X3, axis=1))
    assert oarlock.special.logsumexp is oarlock.logsumexp


def test_spellings_against_torch(torch):
    x = RNG.standard_normal((3, 4))
    y = RNG.standard_normal((4,))
    x[0, 0], y[1] = np.nan, np.nan
    tx, ty = torch.tensor(x), torch.tensor(y)
    for name in ("fmax", "fmin"):
        np.testing.assert_array_equal(getattr(oarlock, name)(T(x), T(y)).numpy(), getattr(torch, name)(tx, ty).numpy())
    for name in ("floor", "ceil", "trunc", "square", "absolute", "negative"):
        np.testing.assert_array_equal(getattr(oarlock, name)(T(x)).numpy(), getattr(torch, name)(tx).numpy())
    ints = RNG.integers(-9, 9, (5,))
    for name in ("floor", "ceil", "trunc", "square"):
        out, ref = getattr(oarlock, name)(T(ints)), getattr(torch, name)(torch.tensor(ints))
        assert out.dtype == "int64" and str(ref.dtype) == "torch.int64"
        np.testing.assert_array_equal(out.numpy(), ref.numpy())
    np.testing.assert_array_equal(oarlock.swapaxes(X3, 0, 2).numpy(), torch.swapaxes(torch.tensor(X3.numpy()), 0, 2))
    np.testing.assert_array_equal(X3.swapdims(1, 2).numpy(), torch.tensor(X3.numpy()).swapdims(1, 2).numpy())
    small = T(np.arange(3.0).reshape(3, 1))
    np.testing.assert_array_equal(small.expand_as(X).numpy(), torch.tensor(small.numpy()).expand_as(
        torch.tensor(X.numpy())).numpy())


def test_new_ops_gradients_against_torch(torch):
    x = RNG.standard_normal((3, 4))
    y = RNG.standard_normal((4,))
    y[2] = np.nan
    x[1, 1] = y[1]  # a tie: x takes it
    for name in ("fmax", "fmin"):
        ox, oy = T(x, grad=True), T(y, grad=True)
        getattr(oarlock, name)(ox, oy).sum().backward()
        tx, ty = torch.tensor(x, requires_grad=True), torch.tensor(y, requires_grad=True)
        getattr(torch, name)(tx, ty).sum().backward()
        np.testing.assert_array_equal(ox.grad.numpy(), tx.grad.numpy(), err_msg=name)
        np.testing.assert_array_equal(oy.grad.numpy(), ty.grad.numpy(), err_msg=name)
    for name in ("floor", "ceil", "trunc", "square"):
        ox, tx = T(x, grad=True), torch.tensor(x, requires_grad=True)
        (getattr(oarlock, name)(ox) * T(x)).sum().backward()
        (getattr(torch, name)(tx) * torch.tensor(x)).sum().backward()
        np.testing.assert_allclose(ox.grad.numpy(), tx.grad.numpy(), rtol=1e-12, err_msg=name)
    small = T(np.ones((3, 1)), grad=True)
    (small.expand_as(X) * T(X.numpy().astype("float64"))).sum().backward()
    np.testing.assert_allclose(small.grad.numpy(), X.numpy().sum(1, keepdims=True), rtol=1e-6)
    t = T(RNG.standard_normal((2, 3, 4)), grad=True)
    w = RNG.standard_normal((4, 3, 2))
    (oarlock.transpose(t, 0, 2) * T(w)).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), np.swapaxes(w, 0, 2))


def test_transpose_swap_errors():
    with pytest.raises(ValueError, match="one axis to swap"):
        oarlock.transpose(X3, [2, 0, 1], 1)
    with pytest.raises(ValueError, match="dim1 3 is out of range"):
        oarlock.transpose(X3, 0, 3)


# -- in-place arithmetic ------------------------------------------------------------------------------

IN_PLACE = [("add_", np.add), ("sub_", np.subtract), ("subtract_", np.subtract), ("mul_", np.multiply),
            ("multiply_", np.multiply), ("div_", np.divide), ("divide_", np.divide)]


@pytest.mark.parametrize("method,ref", IN_PLACE, ids=[m for m, _ in IN_PLACE])
def test_in_place_writes_into_x_and_returns_it(method, ref):
    host = RNG.uniform(0.5, 2.0, (3, 4))
    y = RNG.uniform(0.5, 2.0, (4,))
    x = T(host)
    out = getattr(x, method)(T(y))
    assert out is x
    np.testing.assert_allclose(x.numpy(), ref(host, y), rtol=1e-15)
    base = T(host)
    view = base[1]
    getattr(view, method)(2.0)  # a view writes through to its base, as in Paddle's stride kernels
    np.testing.assert_allclose(base.numpy()[1], ref(host[1], 2.0), rtol=1e-15)


def test_in_place_top_level_names():
    for name in ("multiply_", "divide_", "div_"):
        x = T([4.0, 6.0])
        assert getattr(oarlock, name)(x, T([2.0, 2.0])) is x
    assert oarlock.div_.opdef is oarlock.divide_.opdef


def test_in_place_against_torch(torch):
    x = RNG.standard_normal((2, 3)).astype("float32")
    y = RNG.standard_normal((3,))  # float64 into a float32 x: computed wide, stored in x's dtype
    for method, kwargs in (("add_", {"alpha": 2.5}), ("sub_", {"alpha": -2}), ("mul_", {}), ("div_", {}),
                           ("div_", {"rounding_mode": "floor"}), ("div_", {"rounding_mode": "trunc"})):
        ours, ref = T(x), torch.tensor(x)
        getattr(ours, method)(T(y), **kwargs)
        getattr(ref, method)(torch.tensor(y), **kwargs)
        assert ours.dtype == "float32"
        np.testing.assert_allclose(ours.numpy(), ref.numpy(), rtol=1e-6, err_msg=f"{method} {kwargs}")
    ints = np.array([7, -7, 8, -9])
    ours, ref = T(ints), torch.tensor(ints)
    ours.div_(T([2, 2, -3, 4]), rounding_mode="trunc")
    ref.div_(torch.tensor([2, 2, -3, 4]), rounding_mode="trunc")
    assert ours.dtype == "int64"
    np.testing.assert_array_equal(ours.numpy(), ref.numpy())


def test_in_place_errors():
    with pytest.raises(TypeError, match=r"multiply_\(\).*dtype float32.*cannot be stored in x of dtype int64"):
        T([1, 2]).mul_(2.5)
    with pytest.raises(TypeError, match=r"divide_\(\).*cannot be stored in x of dtype int64"):
        T([1, 2]).div_(T([2, 2]))  # true division of integers is float
    with pytest.raises(ValueError, match=r"broadcast to \[3, 2\].*must keep x's shape"):
        T([1.0, 2.0]).add_(T(np.ones((3, 2))))
    leaf = T([1.0, 2.0], grad=True)
    with pytest.raises(RuntimeError, match="leaf Tensor that requires grad .* in-place operation"):
        leaf.mul_(2.0)
    with oarlock.no_grad():
        leaf.mul_(2.0)
    np.testing.assert_array_equal(leaf.numpy(), [2.0, 4.0])


# -- extra arguments against torch ----------------------------------------------------------------------

def test_gelu_approximate_against_torch(torch):
    x = RNG.uniform(-5.0, 5.0, (4, 6))
    for ours_mode, torch_mode in ((False, "none"), ("none", "none"), (True, "tanh"), ("tanh", "tanh")):
        ox, tx = T(x, grad=True), torch.tensor(x, requires_grad=True)
        out = F.gelu(ox, approximate=ours_mode)
        ref = torch.nn.functional.gelu(tx, approximate=torch_mode)
        np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-12, atol=1e-14)
        w = RNG.standard_normal(x.shape)
        (out * T(w)).sum().backward()
        (ref * torch.tensor(w)).sum().backward()
        np.testing.assert_allclose(ox.grad.numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-13, err_msg=str(ours_mode))
    f32 = F.gelu(T(x.astype("float32")), approximate="tanh")
    assert f32.dtype == "float32"
    with pytest.raises(ValueError, match=r"gelu\(\).*'approximate'.*'fast'"):
        F.gelu(T(x), approximate="fast")


DIVIDENDS = np.array([7, -7, 7, -7, 6, -6, 0, 9])
DIVISORS = np.array([2, 2, -2, -2, 3, -4, 5, -1])


@pytest.mark.parametrize("mode", [None, "trunc", "floor"])
@pytest.mark.parametrize("dtype", ["int32", "int64", "float32", "float64"])
def test_divide_rounding_mode_against_torch(torch, mode, dtype):
    x, y = DIVIDENDS.astype(dtype), DIVISORS.astype(dtype)
    if dtype.startswith("float"):
        x = x + RNG.uniform(-0.9, 0.9, x.shape).astype(dtype)
    out = oarlock.divide(T(x), T(y), rounding_mode=mode)
    ref = torch.div(torch.tensor(x), torch.tensor(y), rounding_mode=mode)
    assert out.dtype == str(ref.dtype).replace("torch.", ""), (out.dtype, ref.dtype)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-6)
    # every spelling takes it, the in-place ones too
    _same(oarlock.div(T(x), T(y), rounding_mode=mode), out)
    _same(T(x).divide(T(y), rounding_mode=mode), out)
    # a Python number divisor
    scalar = oarlock.divide(T(x), -3, rounding_mode=mode)
    np.testing.assert_allclose(scalar.numpy(), torch.div(torch.tensor(x), -3, rounding_mode=mode).numpy(), rtol=1e-6)


def test_divide_rounding_mode_gradients_against_torch(torch):
    x = RNG.uniform(-4.0, 4.0, (3, 4))
    y = RNG.uniform(0.5, 2.0, (4,))
    for mode in (None, "trunc", "floor"):
        ox, oy = T(x, grad=True), T(y, grad=True)
        tx, ty = torch.tensor(x, requires_grad=True), torch.tensor(y, requires_grad=True)
        (oarlock.divide(ox, oy, rounding_mode=mode) * T(x)).sum().backward()
        (torch.div(tx, ty, rounding_mode=mode) * torch.tensor(x)).sum().backward()
        np.testing.assert_allclose(ox.grad.numpy(), tx.grad.numpy(), rtol=1e-12, err_msg=str(mode))
        np.testing.assert_allclose(oy.grad.numpy(), ty.grad.numpy(), rtol=1e-12, err_msg=str(mode))


def test_divide_rounding_mode_errors():
    with pytest.raises(ValueError, match=r"divide\(\).*integer division by zero"):
        oarlock.divide(T([1, 2]), T([1, 0]), rounding_mode="trunc")
    with pytest.raises(ValueError, match=r"divide\(\).*'rounding_mode' must be None, 'trunc' or 'floor', got 'round'"):
        oarlock.divide(X, Y, rounding_mode="round")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numpy's divide-by-zero warning, as for x / 0.0
        floats = oarlock.divide(T([1.0, -1.0, 0.0]), 0.0, rounding_mode="floor")
    np.testing.assert_array_equal(floats.numpy(), [np.inf, -np.inf, np.nan])  # as torch


def test_divide_rounding_mode_matches_paddle(paddle):
    x, y = DIVIDENDS, DIVISORS
    for mode in ("trunc", "floor"):
        ref = paddle.divide(paddle.to_tensor(x), paddle.to_tensor(y), rounding_mode=mode)
        out = oarlock.divide(T(x), T(y), rounding_mode=mode)
        np.testing.assert_array_equal(out.numpy(), ref.numpy())
        assert out.dtype == str(ref.dtype).replace("paddle.", "")


@pytest.mark.parametrize("name", ["add", "sub", "subtract"])
def test_alpha_against_torch(torch, name):
    torch_fn = torch.add if name == "add" else torch.sub
    x, y = RNG.standard_normal((3, 4)), RNG.standard_normal((4,))
    for alpha in (1, 3, -0.5, 2.5):
        ox, oy = T(x, grad=True), T(y, grad=True)
        tx, ty = torch.tensor(x, requires_grad=True), torch.tensor(y, requires_grad=True)
        out, ref = getattr(oarlock, name)(ox, oy, alpha=alpha), torch_fn(tx, ty, alpha=alpha)
        # torch may fuse alpha * y + x (one rounding instead of two)
        np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-12, atol=1e-15)
        w = RNG.standard_normal((3, 4))
        (out * T(w)).sum().backward()
        (ref * torch.tensor(w)).sum().backward()
        np.testing.assert_allclose(ox.grad.numpy(), tx.grad.numpy(), rtol=1e-15)
        np.testing.assert_allclose(oy.grad.numpy(), ty.grad.numpy(), rtol=1e-15)
    ints = RNG.integers(-5, 5, (4,))
    out = getattr(oarlock, name)(T(ints), T(ints), alpha=3)
    assert out.dtype == "int64"
    np.testing.assert_array_equal(out.numpy(), torch_fn(torch.tensor(ints), torch.tensor(ints), alpha=3).numpy())
    bf16 = getattr(oarlock, name)(T(x).astype("bfloat16"), T(y).astype("bfloat16"), alpha=0.5)
    assert bf16.dtype == "bfloat16"
    with pytest.raises(TypeError, match=r"'alpha' must be an int for int64 input, got float 2\.5"):
        getattr(oarlock, name)(T(ints), T(ints), alpha=2.5)
    with pytest.raises(TypeError, match="'alpha' must be a Python number"):
        getattr(oarlock, name)(X, Y, alpha="2")


def test_silu_accepts_inplace():
    x = T(RNG.standard_normal((3, 4)))
    before = x.numpy().copy()
    for inplace in (False, True):
        _same(F.silu(x, inplace=inplace), F.silu(x))
    _same(F.silu(x, True), F.silu(x))
    np.testing.assert_array_equal(x.numpy(), before)  # always out of place (see unary._silu_kernel)
    with pytest.raises(TypeError, match=r"silu\(\): argument 'inplace' must be a bool"):
        F.silu(x, inplace="yes")


def test_silu_against_torch(torch):
    x = RNG.standard_normal((3, 4))
    ox, tx = T(x, grad=True), torch.tensor(x, requires_grad=True)
    out, ref = F.silu(ox, inplace=False), torch.nn.functional.silu(tx, inplace=False)
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-14)
    out.sum().backward()
    ref.sum().backward()
    np.testing.assert_allclose(ox.grad.numpy(), tx.grad.numpy(), rtol=1e-14)


# -- softmax: dtype= and the implicit dim -----------------------------------------------------------------

def test_softmax_dtype_against_torch(torch):
    x = RNG.standard_normal((2, 3, 4)).astype("float32")
    for call in (lambda t, d: F.softmax(t, axis=-1, dtype=d), lambda t, d: oarlock.softmax(t, dim=-1, dtype=d),
                 lambda t, d: t.softmax(-1, dtype=d)):
        ox = T(x, grad=True)
        out = call(ox, "float64")
        tx = torch.tensor(x, requires_grad=True)
        ref = torch.softmax(tx, dim=-1, dtype=torch.float64)
        assert out.dtype == "float64"
        np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-12)
        w = RNG.standard_normal(x.shape)
        (out * T(w)).sum().backward()
        (ref * torch.tensor(w)).sum().backward()
        assert ox.grad.dtype == "float32"
        np.testing.assert_allclose(ox.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("shape", [(), (5,), (3, 5), (2, 3, 4), (2, 3, 2, 2)])
def test_softmax_implicit_dim_against_torch(torch, shape):
    x = RNG.standard_normal(shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that the implicit dim is deprecated
        ref = torch.nn.functional.softmax(torch.tensor(x), dim=None).numpy()
    for out in (oarlock.softmax(T(x)), T(x).softmax(), oarlock.special.softmax(T(x))):
        np.testing.assert_allclose(out.numpy(), ref, rtol=1e-12)
    # nn.functional.softmax keeps Paddle's axis=-1
    np.testing.assert_allclose(F.softmax(T(x)).numpy(), torch.softmax(torch.tensor(x), dim=-1).numpy(), rtol=1e-12)


def test_softmax_matches_paddle(paddle):
    x = RNG.standard_normal((2, 3, 4)).astype("float32")
    px = paddle.to_tensor(x)
    np.testing.assert_allclose(oarlock.softmax(T(x)).numpy(), paddle.softmax(px).numpy(), rtol=1e-5)
    np.testing.assert_allclose(T(x).softmax(dim=2).numpy(), px.softmax(dim=2).numpy(), rtol=1e-5)
    np.testing.assert_allclose(F.softmax(T(x)).numpy(), paddle.nn.functional.softmax(px).numpy(), rtol=1e-5)


# -- F.dropout1d --------------------------------------------------------------------------------------

def test_dropout1d_zeroes_whole_channels():
    oarlock.seed(3)
    x = T(RNG.uniform(1.0, 2.0, (16, 32, 20)).astype("float32"))
    out = F.dropout1d(x, p=0.25).numpy()
    dropped = (out == 0).all(axis=2)
    kept = (out != 0).all(axis=2)
    assert (dropped | kept).all(), "every channel is either dropped or kept as a whole"
    assert abs(dropped.mean() - 0.25) < 0.05, dropped.mean()
    np.testing.assert_allclose(out[kept], x.numpy()[kept] / 0.75, rtol=1e-6)
    unbatched = F.dropout1d(T(np.ones((64, 10), "float32")), 0.5).numpy()  # [C, L]
    assert ((unbatched == 0) | (unbatched == 2.0)).all() and (unbatched == unbatched[:, :1]).all()
    assert 0.25 < (unbatched[:, 0] == 0).mean() < 0.75


def test_dropout1d_is_seeded_and_has_a_gradient():
    host = RNG.standard_normal((4, 8, 6))
    oarlock.seed(11)
    first = F.dropout1d(T(host), 0.5).numpy()
    oarlock.seed(11)
    x = T(host, grad=True)
    out = F.dropout1d(x, 0.5)
    np.testing.assert_array_equal(out.numpy(), first)
    w = RNG.standard_normal(host.shape)
    (out * T(w)).sum().backward()
    mask = np.where(first == 0, 0.0, 2.0)
    np.testing.assert_allclose(x.grad.numpy(), w * mask, rtol=1e-15)
    _same(F.dropout1d(T(host), 0.5, training=False), T(host))
    _same(F.dropout1d(T(host), 0.0), T(host))
    with pytest.raises(ValueError, match="dropout1d"):
        F.dropout1d(T(np.ones((2, 3, 4, 5))), 0.5)


# -- AMP policies ---------------------------------------------------------------------------------------

BLACK = ("exp", "log", "log_softmax", "softmax", "softmax_compat", "pow", "square", "mean", "sum", "cumsum",
         "logsumexp", "cross_entropy")


def test_amp_policies():
    ops = default_registry().ops
    for name in BLACK:
        assert ops[name].amp == "black", name
    for name in ("add", "multiply", "divide", "maximum", "sqrt", "sin", "gelu", "silu", "max", "argmax",
                 "concat", "transpose", "floor", "fmax", "add_", "multiply_"):
        assert ops[name].amp is None, name


@pytest.mark.parametrize("sections,axis", [(3, 0), ([1, 2, 3], 0), ([2, -1], 1), (2, -1)])
def test_split_matches_paddle(sections, axis):
    paddle = pytest.importorskip("paddle")
    data = np.arange(36.0).reshape(6, 6).astype("float32")
    got = oarlock.split(T(data), sections, axis=axis)
    expected = paddle.split(paddle.to_tensor(data), sections, axis=axis)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g.numpy(), e.numpy())
