"""Paddle 3.2's tensor ops of the scatter, complex, matrix, sampling and linalg families against the
oracles: torch for scatter_reduce (every reduction, with and without the input's own values, values
and first and second order gradients), take_along_dim, repeat_interleave, polar / view_as_* and the
matrix ops; Paddle where the two differ (integer 'mean', put_along_axis and scatter's duplicate
rules, norm's axis rules). Also the spellings (aliases, Tensor methods, linalg names), in-place
forms, dtypes and shapes, and the errors for bad input, which must name the function and argument.

The per-op checks of the op table (tests/op_specs/scatter.py, complex.py, matrix.py, sampling.py)
cover each op against float64 numpy and finite differences; torch and paddle are optional here.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import oarlock
from oarlock.registry import default_registry
from errors import raises_naming as _raises

RNG = np.random.default_rng(2024)
T = oarlock.to_tensor


def _leaf(array):
    return T(np.array(array), stop_gradient=False)


# -- scatter_reduce against torch ----------------------------------------------------------------------------

X = RNG.standard_normal((4, 5))
SRC = RNG.standard_normal((3, 5))
INDEX = np.array([[1, 0, 3, 1, 0], [2, 2, 0, 1, 1], [0, 1, 3, 1, 2]])  # repeats; column 3 gets three values
REDUCES = ("sum", "prod", "mean", "amin", "amax")


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", REDUCES)
def test_scatter_reduce_values_and_gradients_match_torch(torch, reduce, include_self):
    x, src = _leaf(X), _leaf(SRC)
    out = oarlock.scatter_reduce(x, 0, T(INDEX), src, reduce, include_self=include_self)
    tx = torch.tensor(X, requires_grad=True)
    tsrc = torch.tensor(SRC, requires_grad=True)
    tout = tx.scatter_reduce(0, torch.tensor(INDEX), tsrc, reduce, include_self=include_self)
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-12)
    weights = RNG.standard_normal(X.shape)
    (out * T(weights)).sum().backward()
    gx, gsrc = torch.autograd.grad((tout * torch.tensor(weights)).sum(), [tx, tsrc])
    np.testing.assert_allclose(x.grad.numpy(), gx.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(src.grad.numpy(), gsrc.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("reduce", ["sum", "mean", "amax", "prod"])
def test_scatter_reduce_second_order_matches_torch(torch, reduce):
    """The rules are public ops, so grad(create_graph=True) differentiates them again."""
    src_values = SRC[:, :3]  # torch's backward needs src of the index's shape
    x, src = _leaf(X), _leaf(src_values)
    out = oarlock.scatter_reduce(x, 1, T(INDEX[:, :3] % 5), src, reduce, include_self=False)
    (g,) = oarlock.grad([(out * out).sum()], [src], create_graph=True)
    (gg,) = oarlock.grad([(g * g).sum()], [x])
    tx = torch.tensor(X, requires_grad=True)
    tsrc = torch.tensor(src_values, requires_grad=True)
    tout = tx.scatter_reduce(1, torch.tensor(INDEX[:, :3] % 5), tsrc, reduce, include_self=False)
    (tg,) = torch.autograd.grad((tout * tout).sum(), [tsrc], create_graph=True)
    (tgg,) = torch.autograd.grad((tg * tg).sum(), [tx])
    np.testing.assert_allclose(g.numpy(), tg.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gg.numpy(), tgg.numpy(), rtol=1e-9, atol=1e-12)


def test_scatter_reduce_with_zeros_in_prod_matches_torch(torch):
    x = X.copy()
    x[1, 0] = 0.0
    src = SRC.copy()
    src[0, 2] = 0.0  # one zero among column 2's factors at row 3
    ox, osrc = _leaf(x), _leaf(src)
    out = oarlock.scatter_reduce(ox, 0, T(INDEX), osrc, "prod")
    out.sum().backward()
    tx, tsrc = torch.tensor(x, requires_grad=True), torch.tensor(src, requires_grad=True)
    tout = tx.scatter_reduce(0, torch.tensor(INDEX), tsrc, "prod")
    gx, gsrc = torch.autograd.grad(tout.sum(), [tx, tsrc])
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(ox.grad.numpy(), gx.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(osrc.grad.numpy(), gsrc.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", ["int32", "int64", "float32", "bfloat16"])
@pytest.mark.parametrize("reduce", REDUCES)
def test_scatter_reduce_keeps_dtype_and_matches_torch(torch, reduce, dtype):
    x = RNG.integers(0, 6, (4, 5))
    src = RNG.integers(1, 6, (3, 5))  # non-negative: torch floors integer means, Paddle truncates
    out = oarlock.scatter_reduce(T(x).astype(dtype), 0, T(INDEX), T(src).astype(dtype), reduce)
    want = torch.tensor(x).scatter_reduce(0, torch.tensor(INDEX), torch.tensor(src), reduce)
    assert out.dtype == dtype and out.shape == [4, 5]
    if x.dtype.kind == "i" and reduce == "mean" and dtype.startswith("int"):
        want = want.to(torch.float64)
    tol = 3e-2 if dtype == "bfloat16" else 1e-6
    if dtype.startswith("float") or dtype == "bfloat16":
        want = torch.tensor(x, dtype=torch.float64).scatter_reduce(0, torch.tensor(INDEX),
                                                                   torch.tensor(src, dtype=torch.float64), reduce)
    np.testing.assert_allclose(out.numpy().astype(np.float64), want.numpy(), rtol=tol, atol=tol)


def test_integer_mean_truncates_like_paddle(paddle):
    args = ([10, 20, 31], 0, [0, 0, 1], [1, -4, 2], "mean")
    for include_self in (True, False):
        ours = oarlock.scatter_reduce(T(args[0]), 0, T(args[2]), T(args[3]), "mean", include_self=include_self)
        theirs = paddle.scatter_reduce(paddle.to_tensor(args[0]), 0, paddle.to_tensor(args[2]),
                                       paddle.to_tensor(args[3]), "mean", include_self=include_self)
        assert ours.numpy().tolist() == theirs.numpy().tolist()


def test_scatter_reduce_spellings():
    x, src, index = T(X), T(SRC), T(INDEX)
    want = oarlock.scatter_reduce(x, 0, index, src, "amax").numpy()
    np.testing.assert_array_equal(oarlock.scatter_reduce(input=x, dim=0, index=index, src=src, reduce="amax")
                                  .numpy(), want)
    np.testing.assert_array_equal(oarlock.scatter_reduce(x=x, axis=0, index=index, src=src, reduce="amax").numpy(),
                                  want)
    np.testing.assert_array_equal(x.scatter_reduce(0, index, src, "amax").numpy(), want)
    _raises(lambda: oarlock.scatter_reduce(x, 0, index, src, "amax", dim=0), TypeError, "scatter_reduce", "dim")
    np.testing.assert_array_equal(oarlock.scatter_add(x, 0, index, src).numpy(),
                                  oarlock.scatter_reduce(x, 0, index, src, "sum").numpy())


def test_in_place_forms_write_into_the_input_and_return_it(torch):
    ref = torch.tensor(X).scatter_reduce(0, torch.tensor(INDEX), torch.tensor(SRC), "amin", include_self=False)
    x = T(X)
    assert oarlock.scatter_reduce_(x, 0, T(INDEX), T(SRC), "amin", include_self=False) is x
    np.testing.assert_allclose(x.numpy(), ref.numpy())
    y = T(X)
    assert y.scatter_add_(0, T(INDEX), T(SRC)) is y
    np.testing.assert_allclose(y.numpy(), torch.tensor(X).scatter_add(0, torch.tensor(INDEX),
                                                                       torch.tensor(SRC)).numpy())
    z = T(np.zeros((2, 3)))
    assert z.put_along_axis_(T([[2], [0]]), 1.5, 1) is z
    assert z.numpy().tolist() == [[0, 0, 1.5], [1.5, 0, 0]]
    w = T(np.zeros((3, 2)))
    assert oarlock.scatter_(w, T([2]), T(np.array([[1.0, 2.0]]))) is w and w.numpy()[2].tolist() == [1.0, 2.0]
    leaf = _leaf(X)
    _raises(lambda: oarlock.scatter_reduce_(leaf, 0, T(INDEX), T(SRC), "sum"), ValueError, "scatter_reduce_",
            "leaf", "in-place")


def test_scatter_reduce_errors_name_function_and_argument():
    x, src, index = T(X), T(SRC), T(INDEX)
    _raises(lambda: oarlock.scatter_reduce(x, 0, index, src, "max"), ValueError,
            "oarlock.scatter_reduce()", "'reduce'", "'max'", "'sum', 'prod', 'mean', 'amin', 'amax'")
    _raises(lambda: oarlock.scatter_reduce(x, 0, T([[4, 0, 0, 0, 0]]), src, "sum"), IndexError,
            "scatter_reduce", "'index'", "4", "[-4, 4)")
    _raises(lambda: oarlock.scatter_reduce(x, 0, T([[-5, 0, 0, 0, 0]]), src, "sum"), IndexError, "'index'", "-5")
    _raises(lambda: oarlock.scatter_reduce(x, 0, T(np.zeros((1, 6), "int64")), src, "sum"), ValueError,
            "scatter_reduce", "'index'", "[1, 6]", "'src'")
    _raises(lambda: oarlock.scatter_reduce(x, 0, T([0, 1]), src, "sum"), ValueError, "'index'", "dimensions")
    _raises(lambda: oarlock.scatter_reduce(x, 0, T([[0.0]]), src, "sum"), TypeError, "'index'", "int32 or int64")
    _raises(lambda: oarlock.scatter_reduce(x, 0, index, src.astype("float32"), "sum"), TypeError, "'src'", "float32")
    _raises(lambda: oarlock.scatter_reduce(x, 2, index, src, "sum"), ValueError, "scatter_reduce", "dim 2")
    _raises(lambda: oarlock.scatter_reduce(T([True]), 0, T([0]), T([True]), "sum"), ValueError,
            "scatter_reduce", "bool")
    _raises(lambda: oarlock.put_along_axis(x, T([[0]]), 1.0, 0, reduce="max"), ValueError, "put_along_axis",
            "'assign'", "'multiply'")


# -- put_along_axis, take_along_axis, scatter: Paddle's rules ------------------------------------------------

def test_put_along_axis_matches_paddle(paddle):
    arr = RNG.standard_normal((3, 4)).astype("float32")  # Paddle makes a Python value float32

    def values(*shape):
        return RNG.standard_normal(shape).astype("float32")

    cases = [(np.array([[0]]), 9.0, 0, {}),
             (np.array([[1, 1], [0, 3]]), values(2, 2), 1, {"reduce": "add", "broadcast": False}),
             (np.array([[2, 2, 2, 0]]), values(1, 4), 0, {"reduce": "amin"}),
             (np.array([[1, 1, 2, 0]]), values(1, 4), 0, {"reduce": "mean", "include_self": False}),
             (np.array([[0, 0, 1, 0]]), values(1, 4), 0, {"reduce": "multiply"})]
    for indices, value, axis, kwargs in cases:
        ours = oarlock.put_along_axis(T(arr), T(indices), value if np.isscalar(value) else T(value), axis, **kwargs)
        theirs = paddle.put_along_axis(paddle.to_tensor(arr), paddle.to_tensor(indices),
                                       value if np.isscalar(value) else paddle.to_tensor(value), axis, **kwargs)
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6, err_msg=str(kwargs))


def test_repeated_assignments_keep_the_last_value_and_its_gradient_only(paddle):
    """Paddle's put_along_axis: the overwritten value gets no gradient."""
    arr, values = np.arange(6.0).reshape(2, 3), np.array([[1.0, 2.0, 3.0]])
    weights = np.arange(6.0).reshape(2, 3) + 1
    a, v = _leaf(arr), _leaf(values)
    out = oarlock.put_along_axis(a, T([[0, 0, 1]]), v, 1, broadcast=False)
    (out * T(weights)).sum().backward()
    pa = paddle.to_tensor(arr, stop_gradient=False)
    pv = paddle.to_tensor(values, stop_gradient=False)
    pout = paddle.put_along_axis(pa, paddle.to_tensor([[0, 0, 1]]), pv, 1, broadcast=False)
    ga, gv = paddle.grad([(pout * paddle.to_tensor(weights)).sum()], [pa, pv])
    np.testing.assert_array_equal(out.numpy(), pout.numpy())
    np.testing.assert_array_equal(a.grad.numpy(), ga.numpy())
    np.testing.assert_array_equal(v.grad.numpy(), gv.numpy())


def test_row_scatter_matches_paddle(paddle):
    x, updates = np.arange(6.0).reshape(3, 2), np.arange(8.0).reshape(4, 2) + 10
    for overwrite in (True, False):
        for index in ([2, 1, 0, 1], [[2], [1], [-3], [1]]):
            ours = oarlock.scatter(T(x), T(index), T(updates), overwrite=overwrite)
            theirs = paddle.scatter(paddle.to_tensor(x), paddle.to_tensor(index), paddle.to_tensor(updates),
                                    overwrite=overwrite)
            np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    # gradients: the indexed rows of x get none; with overwrite, only the last update of a row counts
    xs, us = _leaf(x), _leaf(updates)
    (oarlock.scatter(xs, T([2, 1, 0, 1]), us) * T(x + 1)).sum().backward()
    assert xs.grad.numpy().tolist() == [[0, 0], [0, 0], [0, 0]]
    assert us.grad.numpy().tolist() == [[5, 6], [0, 0], [1, 2], [3, 4]]
    _raises(lambda: oarlock.scatter(T(x), T([0, 1]), T(updates)), ValueError, "oarlock.scatter()", "'updates'",
            "[2, 2]")
    _raises(lambda: oarlock.scatter(T(x), T([3]), T(updates[:1])), IndexError, "scatter", "'index'", "3")


def test_take_along_axis_matches_paddle(paddle):
    arr = RNG.standard_normal((3, 4))
    for indices, axis, kwargs in (([[-1, 0]], 1, {}), ([[1, 0], [3, 3]], 1, {"broadcast": False}),
                                  ([[2, 0, 2, 1]], 0, {})):
        ours = oarlock.take_along_axis(T(arr), T(indices), axis, **kwargs)
        theirs = paddle.take_along_axis(paddle.to_tensor(arr), paddle.to_tensor(indices), axis, **kwargs)
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    np.testing.assert_array_equal(oarlock.take_along_axis(input=T(arr), indices=T([[1]]), dim=1).numpy(),
                                  arr[:, 1:2])


def test_take_along_dim_matches_torch(torch):
    arr = RNG.standard_normal((3, 4))
    for indices, dim in (([[1, 0, 3]], 1), ([[2, 0, 2, 1]], 0), ([5, 0, 11], None), ([[1], [0], [3]], -1)):
        x = _leaf(arr)
        out = oarlock.take_along_dim(x, T(indices), dim)
        tx = torch.tensor(arr, requires_grad=True)
        tout = torch.take_along_dim(tx, torch.tensor(indices), dim)
        np.testing.assert_array_equal(out.numpy(), tout.detach().numpy())
        weights = RNG.standard_normal(tout.shape)
        (out * T(weights)).sum().backward()
        (g,) = torch.autograd.grad((tout * torch.tensor(weights)).sum(), [tx])
        np.testing.assert_allclose(x.grad.numpy(), g.numpy(), rtol=1e-12)
    assert T(arr).take_along_dim(T([[0]]), dim=1).shape == [3, 1]
    _raises(lambda: oarlock.take_along_dim(T(arr), T([1, 0]), 1), ValueError, "take_along_dim", "'indices'",
            "dimensions")
    _raises(lambda: oarlock.take_along_dim(T(arr), T([[1, 0]]), 0), ValueError, "take_along_dim", "'indices'",
            "broadcast")
    _raises(lambda: oarlock.take_along_dim(T(arr), T([[4]]), 1), IndexError, "take_along_dim", "'indices'", "4")


def test_argwhere_matches_torch(torch):
    for values in (np.array([[0.0, 1.0], [2.0, 0.0]]), np.array([True, False, True]), np.array(3), np.array(0),
                   np.zeros((0, 2))):
        out = oarlock.argwhere(T(values))
        want = torch.argwhere(torch.tensor(values))
        assert out.dtype == "int64" and out.shape == list(want.shape)
        np.testing.assert_array_equal(out.numpy(), want.numpy())
    assert T([[1, 0]]).argwhere().numpy().tolist() == [[0, 0]]


# -- repeat_interleave ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("repeats,dim", [(2, None), ([1, 0, 3], 1), ([3], 1), ([2, 1], 0), (0, 0)])
def test_repeat_interleave_matches_torch(torch, repeats, dim):
    x = RNG.standard_normal((2, 3))
    ox = _leaf(x)
    r_ours = repeats if isinstance(repeats, int) else T(repeats)
    r_torch = repeats if isinstance(repeats, int) else torch.tensor(repeats)
    out = oarlock.repeat_interleave(ox, r_ours, dim=dim)
    tx = torch.tensor(x, requires_grad=True)
    tout = torch.repeat_interleave(tx, r_torch, dim=dim)
    np.testing.assert_array_equal(out.numpy(), tout.detach().numpy())
    weights = RNG.standard_normal(tout.shape)
    (out * T(weights)).sum().backward()
    (g,) = torch.autograd.grad((tout * torch.tensor(weights)).sum(), [tx])
    np.testing.assert_allclose(ox.grad.numpy(), g.numpy(), rtol=1e-12)


def test_repeat_interleave_spellings_and_errors(paddle):
    x = T([[1, 2], [3, 4]])
    want = paddle.repeat_interleave(paddle.to_tensor([[1, 2], [3, 4]]), paddle.to_tensor([1, 2]), 0)
    assert oarlock.repeat_interleave(input=x, repeats=T([1, 2]), dim=0).numpy().tolist() == want.numpy().tolist()
    assert x.repeat_interleave(T([1, 2]), axis=0, output_size=3).shape == [3, 2]
    assert oarlock.repeat_interleave(x, 2).dtype == "int64"
    _raises(lambda: oarlock.repeat_interleave(x, T([1, 2, 3]), 0), ValueError, "repeat_interleave", "'repeats'",
            "3 counts")
    _raises(lambda: oarlock.repeat_interleave(x, T([1, -2]), 0), ValueError, "repeat_interleave", "non-negative")
    _raises(lambda: oarlock.repeat_interleave(x, T([1, 2]), 0, output_size=4), ValueError, "'output_size'", "4")
    _raises(lambda: oarlock.repeat_interleave(x, 1.5, 0), TypeError, "repeat_interleave", "'repeats'")


# -- complex -------------------------------------------------------------------------------------------------------

def test_polar_and_views_match_torch(torch):
    r, t = RNG.uniform(0.5, 2.0, (3, 4)), RNG.uniform(-3, 3, (3, 4))
    orr, ot = _leaf(r), _leaf(t)
    z = oarlock.polar(orr, ot)
    tr, tt = torch.tensor(r, requires_grad=True), torch.tensor(t, requires_grad=True)
    tz = torch.polar(tr, tt)
    assert z.dtype == "complex128"
    np.testing.assert_allclose(z.numpy(), tz.detach().numpy(), rtol=1e-12)
    weights = RNG.standard_normal((3, 4, 2))
    # a real loss of the complex result, through view_as_real
    (oarlock.view_as_real(z) * T(weights)).sum().backward()
    gr, gt = torch.autograd.grad((torch.view_as_real(tz) * torch.tensor(weights)).sum(), [tr, tt])
    np.testing.assert_allclose(orr.grad.numpy(), gr.numpy(), rtol=1e-10)
    np.testing.assert_allclose(ot.grad.numpy(), gt.numpy(), rtol=1e-10)


def test_complex_gradients_follow_torchs_convention(torch):
    parts = RNG.standard_normal((3, 2))
    weights = RNG.standard_normal((3,))
    for name in ("real", "imag"):
        x = _leaf(parts)
        out = getattr(oarlock, name)(oarlock.view_as_complex(x))
        (out * T(weights)).sum().backward()
        tx = torch.tensor(parts, requires_grad=True)
        tout = getattr(torch, name)(torch.view_as_complex(tx))
        (g,) = torch.autograd.grad((tout * torch.tensor(weights)).sum(), [tx])
        np.testing.assert_allclose(x.grad.numpy(), g.numpy(), rtol=1e-12)
    # the gradient of a complex leaf is dL/da + i dL/db, as torch reports it
    z = T(parts[:, 0] + 1j * parts[:, 1], stop_gradient=False)
    (oarlock.imag(z) * T(weights)).sum().backward()
    tz = torch.tensor(parts[:, 0] + 1j * parts[:, 1], requires_grad=True)
    (gz,) = torch.autograd.grad((torch.imag(tz) * torch.tensor(weights)).sum(), [tz])
    np.testing.assert_allclose(z.grad.numpy(), gz.numpy(), rtol=1e-12)


def test_complex_dtypes_shapes_and_names(torch):
    re32, im32 = T([1.0, 2.0], dtype="float32"), T([3.0, 4.0], dtype="float32")
    z = oarlock.complex(re32, im32)
    assert z.dtype == "complex64" and z.real().dtype == "float32" and z.imag().numpy().tolist() == [3.0, 4.0]
    assert oarlock.complex(T([[1.0], [2.0]]), T([1.0, 3.0])).shape == [2, 2]
    assert oarlock.complex(re32, T([1.0, 1.0], dtype="float64")).dtype == "complex128"  # promoted
    pairs = RNG.standard_normal((2, 3, 2)).astype("float32")
    c = oarlock.view_as_complex(T(pairs))
    np.testing.assert_array_equal(c.numpy(), torch.view_as_complex(torch.tensor(pairs)).numpy())
    assert c.dtype == "complex64" and c.shape == [2, 3]
    back = c.view_as_real()
    assert back.dtype == "float32" and back.shape == [2, 3, 2]
    np.testing.assert_array_equal(back.numpy(), pairs)
    np.testing.assert_array_equal(oarlock.as_real(oarlock.as_complex(T(pairs))).numpy(), pairs)
    assert oarlock.view_as_real(oarlock.view_as_complex(T([1.0, 2.0]))).shape == [2]  # through a 0-d complex
    assert oarlock.real(x=T([1.5])).numpy().tolist() == [1.5]  # real of a real tensor: a copy (torch)
    assert oarlock.view_as_complex(input=T(pairs)).shape == [2, 3]


def test_is_complex():
    assert oarlock.is_complex(T([1 + 2j])) and not oarlock.is_complex(T([1.0]))
    assert T([1j]).is_complex() and not T([1]).is_complex()
    _raises(lambda: oarlock.is_complex([1j]), TypeError, "is_complex", "'x'", "list")


def test_complex_errors_name_function_and_argument():
    _raises(lambda: oarlock.complex(T([1, 2]), T([1, 2])), ValueError, "oarlock.complex()", "int64")
    _raises(lambda: oarlock.complex(T([1.0], dtype="bfloat16"), T([1.0], dtype="bfloat16")), TypeError,
            "complex", "'real'", "bfloat16")
    _raises(lambda: oarlock.view_as_complex(T([[1.0, 2.0, 3.0]])), ValueError, "view_as_complex", "'input'",
            "[1, 3]")
    _raises(lambda: oarlock.view_as_real(T([1.0])), ValueError, "view_as_real", "float32")
    _raises(lambda: oarlock.imag(T([1.0])), ValueError, "imag", "float32")
    _raises(lambda: oarlock.polar(T([1]), T([1])), ValueError, "polar", "int64")


# -- matrix ops ----------------------------------------------------------------------------------------------------

MATRIX = RNG.standard_normal((3, 4))
BATCH = RNG.standard_normal((2, 3, 4))


@pytest.mark.parametrize("name,args,torch_call", [
    ("tril", (MATRIX, 1), lambda t, x: t.tril(x, 1)),
    ("triu", (BATCH, -1), lambda t, x: t.triu(x, -1)),
    ("diagonal", (BATCH, 1, 2, 1), lambda t, x: t.diagonal(x, 1, 2, 1)),
    ("trace", (MATRIX,), lambda t, x: t.trace(x)),
    ("diag", (MATRIX, -1), lambda t, x: t.diag(x, -1)),
    ("diag", (MATRIX[0], 2), lambda t, x: t.diag(x, 2)),
    ("diff", (BATCH, 2, 1), lambda t, x: t.diff(x, 2, 1)),
    ("outer", (MATRIX[0], MATRIX[1]), lambda t, x, y: t.outer(x, y)),
])
def test_matrix_ops_match_torch(torch, name, args, torch_call):
    arrays = [a for a in args if isinstance(a, np.ndarray)]
    rest = args[len(arrays):]
    ours = [_leaf(a) for a in arrays]
    out = getattr(oarlock, name)(*ours, *rest)
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    tout = torch_call(torch, *theirs)
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-12)
    weights = RNG.standard_normal(tout.shape)
    (out * T(weights)).sum().backward()
    grads = torch.autograd.grad((tout * torch.tensor(weights)).sum(), theirs)
    for o, g in zip(ours, grads):
        np.testing.assert_allclose(o.grad.numpy(), g.numpy(), rtol=1e-12, atol=1e-14)


def test_matrix_ops_follow_paddle(paddle):
    x = paddle.to_tensor(BATCH)
    np.testing.assert_allclose(oarlock.trace(T(BATCH), 1, 1, 2).numpy(), paddle.trace(x, 1, 1, 2).numpy())
    np.testing.assert_allclose(oarlock.diag(T([1.0, 2.0]), -1, 9).numpy(),
                               paddle.diag(paddle.to_tensor([1.0, 2.0]), -1, 9).numpy())
    got = oarlock.diff(T([1.0, 4.0, 9.0, 16.0]), n=2, prepend=T([0.0]), append=T([25.0]))
    want = paddle.diff(paddle.to_tensor([1.0, 4.0, 9.0, 16.0]), n=2, prepend=paddle.to_tensor([0.0]),
                       append=paddle.to_tensor([25.0]))
    np.testing.assert_allclose(got.numpy(), want.numpy())
    assert oarlock.diff(T([True, False, False, True])).numpy().tolist() == [True, False, True]
    assert oarlock.ger(T([1.0, 2.0]), T([[1.0, 2.0], [3.0, 4.0]])).shape == [2, 4]  # flattened, like Paddle
    assert oarlock.trace(T([[1, 2], [3, 4]], dtype="int32")).dtype == "int32"
    assert T(MATRIX).tril(diagonal=-1).shape == [3, 4] and T(MATRIX).diagonal(dim1=1, dim2=0).shape == [3]
    assert oarlock.outer(input=T([1.0]), vec2=T([2.0, 3.0])).numpy().tolist() == [[2.0, 3.0]]
    assert oarlock.diff(input=T(MATRIX), dim=0).shape == [2, 4]


def test_matrix_op_errors():
    _raises(lambda: oarlock.tril(T([1.0, 2.0])), ValueError, "oarlock.tril()", "'x'", "2 dimensions")
    _raises(lambda: oarlock.diagonal(T(MATRIX), 0, 1, 1), ValueError, "diagonal", "axis1", "axis2")
    _raises(lambda: oarlock.diag(T(BATCH)), ValueError, "diag", "'x'", "[2, 3, 4]")
    _raises(lambda: oarlock.diff(T(MATRIX), prepend=T([1.0, 2.0])), ValueError, "diff", "'prepend'", "[2]")
    _raises(lambda: oarlock.diff(T(MATRIX), n=-1), ValueError, "diff", "'n'", "-1")
    _raises(lambda: oarlock.trace(T([[True]])), ValueError, "trace", "bool")


# -- norms ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs", [
    {}, {"p": 3}, {"p": math.inf}, {"p": 0}, {"p": "fro", "axis": 1}, {"p": 1, "axis": [1, 2]},
    {"p": "nuc", "axis": [1, 2]}, {"p": 2, "axis": [2, 1], "keepdim": True}, {"p": -math.inf, "axis": [0, 1]},
    {"p": 3, "axis": [0, 1, 2]}, {"dtype": "float64"},
])
def test_norm_matches_paddle(paddle, kwargs):
    x = BATCH.astype("float32")
    ours = oarlock.norm(T(x), **kwargs)
    theirs = paddle.norm(paddle.to_tensor(x), **kwargs)
    assert ours.shape == list(theirs.shape) and ours.dtype == str(theirs.dtype).split(".")[-1]
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=2e-5)


@pytest.mark.parametrize("ord_,dim", [(2, -1), (math.inf, (0, 2)), (1, (1, 2)), ("nuc", (1, 2)), (-2, (2, 1)),
                                      ("fro", (0, 1)), (0.5, None)])
def test_norm_gradients_match_torch(torch, ord_, dim):
    x = _leaf(BATCH)
    if dim is None:  # torch.linalg.norm would take a 3-D tensor's ord as a matrix order; Paddle flattens
        out = oarlock.linalg.vector_norm(x, p=ord_)
        tout_fn = lambda t: torch.linalg.vector_norm(t, ord_)  # noqa: E731
    else:
        out = oarlock.linalg.norm(input=x, ord=ord_, dim=list(dim) if isinstance(dim, tuple) else dim)
        tout_fn = lambda t: torch.linalg.norm(t, ord_, dim=dim)  # noqa: E731
    tx = torch.tensor(BATCH, requires_grad=True)
    tout = tout_fn(tx)
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-10)
    weights = RNG.standard_normal(tout.shape)
    (out * T(weights)).sum().backward()
    (g,) = torch.autograd.grad((tout * torch.tensor(weights)).sum(), [tx])
    np.testing.assert_allclose(x.grad.numpy(), g.numpy(), rtol=1e-8, atol=1e-10)


def test_norm_names_and_errors():
    x = T(BATCH)
    np.testing.assert_allclose(x.norm(p=2, axis=-1).numpy(), np.linalg.norm(BATCH, axis=-1))
    np.testing.assert_allclose(oarlock.linalg.matrix_norm(x).numpy(), np.linalg.norm(BATCH, axis=(-2, -1)))
    np.testing.assert_allclose(oarlock.linalg.vector_norm(x, 3, [1, 2]).numpy(),
                               (np.abs(BATCH) ** 3).sum(axis=(1, 2)) ** (1 / 3))
    _raises(lambda: oarlock.norm(x, p="abc"), ValueError, "oarlock.norm()", "'p'", "'abc'")
    _raises(lambda: oarlock.norm(x, p=3, axis=[1, 2]), ValueError, "norm", "'p'", "matrix norm", "3")
    _raises(lambda: oarlock.norm(x, p="nuc"), ValueError, "norm", "two axes")
    _raises(lambda: oarlock.norm(x, axis=3), ValueError, "norm", "'axis'", "3")
    _raises(lambda: oarlock.norm(T([1, 2])), ValueError, "norm", "int64")
    _raises(lambda: oarlock.norm(x, p=2, axis=-1, ord=2), TypeError, "norm", "'p'", "'ord'")
    y = _leaf(BATCH)  # the SVD-based gradients are first order only: a recorded backward refuses them
    _raises(lambda: oarlock.grad([oarlock.norm(y, p="nuc", axis=[1, 2]).sum()], [y], create_graph=True),
            NotImplementedError, "norm", "'nuc'")


def test_linalg_names_and_amp_policy():
    x, y = T(MATRIX), T(MATRIX.T)
    np.testing.assert_allclose(oarlock.linalg.matmul(x, y).numpy(), MATRIX @ MATRIX.T)
    ops = default_registry().ops
    for name in ("matmul", "bmm", "linear"):
        assert ops[name].amp == "white", name
    assert "oarlock.mm" in ops["matmul"].public


# -- sampling --------------------------------------------------------------------------------------------------

def test_multinomial_frequencies_match_torch(torch):
    weights = np.array([[1.0, 3.0, 0.0, 4.0], [2.0, 0.0, 0.0, 2.0]])
    ours = oarlock.multinomial(T(weights), 20000, replacement=True).numpy()
    theirs = torch.multinomial(torch.tensor(weights), 20000, replacement=True).numpy()
    for row in range(2):
        f1 = np.bincount(ours[row], minlength=4) / 20000
        f2 = np.bincount(theirs[row], minlength=4) / 20000
        np.testing.assert_allclose(f1, f2, atol=0.025)
    picked = oarlock.multinomial(input=T(weights), num_samples=2).numpy()
    assert all(len(set(r)) == 2 and all(weights[i, r] > 0) for i, r in enumerate(picked))


def test_prod_scatter_in_rounds_matches_multiply_at():
    """The CuPy path of scatter's prod (no multiply.at there), run with numpy."""
    from oarlock_ops.scatter import _multiply_in_rounds, _positions
    x = RNG.standard_normal((4, 5))
    want = x.copy()
    pos = _positions(np, INDEX, 0)
    np.multiply.at(want, pos, SRC)
    got = x.copy()
    _multiply_in_rounds(np, got, pos, SRC)
    np.testing.assert_allclose(got, want, rtol=1e-14)
