"""Sorting/selection ops and oarlock.compat beyond the op table: float64 numpy references for every
function, the installed Paddle 3.2 for Paddle's semantics (sort, argsort, msort, topk, kthvalue, median,
nanmedian: values, dtypes, shapes, return structures, tie gradients), torch for the compat functions and
topk (values, indices, gradients), 16-bit inputs, higher-order gradients, out= and error messages.

Tie-breaking: oarlock sorts stably. Paddle's and torch's unstable kernels may pick another of several
equal entries, so indices are compared with the oracles on distinct values (or with stable=True)."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest

import oarlock
from oarlock import compat
from oarlock_ops.sorting import return_types

NAN = float("nan")
RNG = np.random.default_rng(20250321)
DISTINCT = RNG.permutation(60).reshape(3, 4, 5).astype(np.float64) / 7 - 4  # no ties anywhere
WITH_NAN = np.array([[1.0, NAN, 3.0, NAN], [1.0, 2.0, 3.0, 4.0], [NAN, 1.0, 2.0, 3.0], [NAN, NAN, NAN, NAN]])


def _t(values, dtype="float64", grad=False):
    t = oarlock.to_tensor(np.asarray(values), dtype=dtype)
    t.stop_gradient = not grad
    return t


def _np(t):
    return t.numpy() if hasattr(t, "numpy") else np.asarray(t)


def _same(ours, theirs, dtype=True):
    """Equal values (NaN where NaN), shapes and (optionally) dtype names."""
    a, b = _np(ours), (theirs.detach().cpu().numpy() if hasattr(theirs, "detach") else _np(theirs))
    assert list(a.shape) == list(b.shape), f"shape {a.shape} != {b.shape}"
    if dtype:
        assert str(ours.dtype).replace("paddle.", "") == str(theirs.dtype).replace("paddle.", "").replace(
            "torch.", ""), f"dtype {ours.dtype} != {theirs.dtype}"
    np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=1e-6, atol=1e-7)


# -- float64 numpy, every function -------------------------------------------------------------------------

def test_sort_family_matches_numpy():
    x = _t(DISTINCT)
    for axis in (0, 1, -1):
        np.testing.assert_array_equal(oarlock.sort(x, axis=axis).numpy(), np.sort(DISTINCT, axis=axis))
        np.testing.assert_array_equal(oarlock.argsort(x, axis=axis).numpy(), np.argsort(DISTINCT, axis=axis))
        np.testing.assert_array_equal(oarlock.sort(x, axis=axis, descending=True).numpy(),
                                      np.flip(np.sort(DISTINCT, axis=axis), axis=axis))
        values, indices = compat.sort(x, axis)
        np.testing.assert_array_equal(values.numpy(), np.sort(DISTINCT, axis=axis))
        np.testing.assert_array_equal(indices.numpy(), np.argsort(DISTINCT, axis=axis))
    np.testing.assert_array_equal(oarlock.msort(x).numpy(), np.sort(DISTINCT, axis=0))


def test_selection_matches_numpy():
    x = _t(DISTINCT)
    values, indices = oarlock.topk(x, 3, axis=1)
    np.testing.assert_array_equal(values.numpy(), np.flip(np.sort(DISTINCT, axis=1), axis=1)[:, :3])
    np.testing.assert_array_equal(np.take_along_axis(DISTINCT, indices.numpy(), 1), values.numpy())
    values, indices = oarlock.kthvalue(x, 2, axis=-1)
    np.testing.assert_array_equal(values.numpy(), np.sort(DISTINCT, axis=-1)[..., 1])
    np.testing.assert_array_equal(indices.numpy(), np.argsort(DISTINCT, axis=-1)[..., 1])
    for name, fn, arg in (("max", np.max, np.argmax), ("min", np.min, np.argmin)):
        reduce = getattr(compat, name)
        np.testing.assert_array_equal(reduce(x).numpy(), fn(DISTINCT))
        values, indices = reduce(x, 2, keepdim=True)
        np.testing.assert_array_equal(values.numpy(), fn(DISTINCT, axis=2, keepdims=True))
        np.testing.assert_array_equal(indices.numpy(), arg(DISTINCT, axis=2, keepdims=True))
        other = _t(DISTINCT[::-1].copy())
        np.testing.assert_array_equal(reduce(x, other).numpy(), getattr(np, f"{name}imum")(DISTINCT, DISTINCT[::-1]))


def test_medians_match_numpy():
    x = _t(DISTINCT)
    np.testing.assert_allclose(oarlock.median(x).numpy(), np.median(DISTINCT), rtol=1e-15)
    assert oarlock.median(x).dtype == "float64" and oarlock.median(x.astype("float32")).dtype == "float32"
    np.testing.assert_allclose(oarlock.median(x, axis=1).numpy(), np.median(DISTINCT, axis=1))
    lower = np.sort(DISTINCT, axis=1)[:, 1]  # 4 entries: the lower middle is the second
    values, indices = oarlock.median(x, axis=1, mode="min")
    np.testing.assert_array_equal(values.numpy(), lower)
    np.testing.assert_array_equal(indices.numpy(), np.argsort(DISTINCT, axis=1)[:, 1])
    np.testing.assert_array_equal(compat.median(x, 1).values.numpy(), lower)
    np.testing.assert_array_equal(compat.median(x).numpy(), np.sort(DISTINCT, axis=None)[29])
    expected = [np.median(row[~np.isnan(row)]) if (~np.isnan(row)).any() else NAN for row in WITH_NAN]
    np.testing.assert_allclose(oarlock.nanmedian(_t(WITH_NAN), axis=1).numpy(), expected)  # NaN for all-NaN
    np.testing.assert_allclose(oarlock.nanmedian(x, axis=[0, 2], keepdim=True).numpy(),
                               np.median(DISTINCT, axis=(0, 2), keepdims=True))
    valid = WITH_NAN[~np.isnan(WITH_NAN)]
    assert compat.nanmedian(_t(WITH_NAN)).item() == np.sort(valid)[(len(valid) - 1) // 2]


def test_split_and_softmax_match_numpy():
    x = _t(DISTINCT)
    pieces = compat.split(x, 2, dim=2)
    assert isinstance(pieces, tuple) and [p.shape[2] for p in pieces] == [2, 2, 1]
    for got, want in zip(pieces, np.split(DISTINCT, [2, 4], axis=2)):
        np.testing.assert_array_equal(got.numpy(), want)
    for got, want in zip(compat.split(x, [1, 0, 3], dim=-2), np.split(DISTINCT, [1, 1], axis=1)):
        np.testing.assert_array_equal(got.numpy(), want)
    e = np.exp(DISTINCT - DISTINCT.max(axis=0, keepdims=True))
    np.testing.assert_allclose(compat.softmax(x).numpy(), e / e.sum(axis=0, keepdims=True), rtol=1e-12)


# -- Paddle 3.2 semantics ------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs", [{}, {"axis": 0}, {"axis": 1, "descending": True}, {"axis": -1, "stable": True}])
def test_sort_argsort_like_paddle(paddle, kwargs):
    for data in (DISTINCT.astype(np.float32), RNG.integers(-3, 4, size=(4, 6)).astype(np.int64)):
        ours, theirs = _t(data, dtype=str(data.dtype)), paddle.to_tensor(data)
        _same(oarlock.sort(ours, **kwargs), paddle.sort(theirs, **kwargs))
        if data.dtype.kind == "f" or "stable" in kwargs:  # paddle's unstable argsort orders ties arbitrarily
            _same(oarlock.argsort(ours, **kwargs), paddle.argsort(theirs, **kwargs))
    x = WITH_NAN.astype(np.float32)
    _same(oarlock.sort(_t(x, "float32"), axis=1), paddle.sort(paddle.to_tensor(x), axis=1))
    _same(oarlock.sort(_t(x, "float32"), axis=1, descending=True),
          paddle.sort(paddle.to_tensor(x), axis=1, descending=True))


def test_msort_like_paddle(paddle):
    for data in (DISTINCT[0].astype(np.float32), np.float32(3.0), WITH_NAN):
        _same(oarlock.msort(_t(data, str(np.asarray(data).dtype))), paddle.msort(paddle.to_tensor(data)))
    _same(_t(DISTINCT).msort(), paddle.to_tensor(DISTINCT).msort())


@pytest.mark.parametrize("args, kwargs", [((2,), {}), ((3,), {"axis": 0, "largest": False}), ((1,), {"axis": None}),
                                          ((4,), {"axis": 1, "sorted": True})])
def test_topk_like_paddle(paddle, args, kwargs):
    data = DISTINCT[1].astype(np.float32)
    ours, theirs = oarlock.topk(_t(data, "float32"), *args, **kwargs), paddle.topk(paddle.to_tensor(data), *args,
                                                                                    **kwargs)
    assert ours._fields == theirs._fields == ("values", "indices")
    _same(ours.values, theirs.values)
    _same(ours.indices, theirs.indices)


def test_topk_tensor_k_and_nan_like_paddle(paddle):
    x = WITH_NAN[:3].astype(np.float32)
    k = oarlock.to_tensor(2)
    _same(oarlock.topk(_t(x, "float32"), k).values, paddle.topk(paddle.to_tensor(x), paddle.to_tensor(2)).values)
    values, indices = _t(DISTINCT).topk(k=2, dim=0)
    _same(values, paddle.topk(paddle.to_tensor(DISTINCT), 2, axis=0).values)


def test_kthvalue_like_paddle(paddle):
    data = DISTINCT.astype(np.float32)
    for k, kwargs in ((1, {}), (3, {"axis": 0, "keepdim": True}), (2, {"axis": 1})):
        ours, theirs = oarlock.kthvalue(_t(data, "float32"), k, **kwargs), paddle.kthvalue(paddle.to_tensor(data), k,
                                                                                           **kwargs)
        _same(ours[0], theirs[0])
        _same(ours[1], theirs[1])
    _same(_t(WITH_NAN[:3]).kthvalue(2)[0], paddle.kthvalue(paddle.to_tensor(WITH_NAN[:3]), 2)[0])


MEDIAN_CALLS = [
    ((), {}), ((), {"axis": 1}), ((), {"axis": 0, "keepdim": True}), ((), {"axis": 1, "mode": "min"}),
    ((), {"axis": None, "keepdim": True, "mode": "min"}), ((), {"mode": "min"}), ((1,), {}),
    ((), {"dim": 1}), ((), {"dim": 0, "keepdim": True}),  # torch's names: mode 'min', (values, indices)
]


@pytest.mark.parametrize("args, kwargs", MEDIAN_CALLS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_median_like_paddle(paddle, args, kwargs, dtype):
    data = (DISTINCT[0] * 7).astype(dtype)  # 4 x 5: even and odd counts
    ours, theirs = oarlock.median(_t(data, dtype), *args, **kwargs), paddle.median(paddle.to_tensor(data), *args,
                                                                                   **kwargs)
    assert isinstance(ours, tuple) == isinstance(theirs, tuple), (type(ours), type(theirs))
    for a, b in zip(ours if isinstance(ours, tuple) else [ours], theirs if isinstance(theirs, tuple) else [theirs]):
        _same(a, b)
    assert _t(data, dtype).median(*args, **kwargs).__class__ is ours.__class__


@pytest.mark.parametrize("args, kwargs", [c for c in MEDIAN_CALLS if "dim" not in c[1]]
                         + [((), {"axis": [0, 1]}), ((), {"axis": [1], "mode": "min"})])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_nanmedian_like_paddle(paddle, args, kwargs, dtype):
    data = (DISTINCT[2] * 7).astype(dtype)
    if dtype != "int64":
        data[1, 2] = data[3, 0] = NAN
    ours = oarlock.nanmedian(_t(data, dtype), *args, **kwargs)
    theirs = paddle.nanmedian(paddle.to_tensor(data), *args, **kwargs)
    assert isinstance(ours, tuple) == isinstance(theirs, tuple)
    for a, b in zip(ours if isinstance(ours, tuple) else [ours], theirs if isinstance(theirs, tuple) else [theirs]):
        _same(a, b)


def test_median_nan_rules_like_paddle(paddle):
    x, px = _t(WITH_NAN), paddle.to_tensor(WITH_NAN)
    for ours, theirs in ((oarlock.median(x, axis=1, mode="min"), paddle.median(px, axis=1, mode="min")),
                         (oarlock.nanmedian(x, axis=1, mode="min"), paddle.nanmedian(px, axis=1, mode="min"))):
        _same(ours[0], theirs[0])
        _same(ours[1], theirs[1])  # the first NaN's index; -1 for an all-NaN row (nanmedian)
    _same(oarlock.median(x, axis=1), paddle.median(px, axis=1))
    _same(oarlock.nanmedian(x), paddle.nanmedian(px))
    _same(oarlock.nanmedian(_t([-1, -2], "int64")), paddle.nanmedian(paddle.to_tensor([-1, -2])))  # truncates


def test_median_16bit_and_dtype_rules():
    data = np.array([[1.5, -2.25, 3.0, 0.125], [7.0, 5.0, 6.0, 8.0]])
    for dtype in ("bfloat16", "float16"):
        x = _t(data, dtype)
        assert oarlock.median(x).dtype == "float32"  # Paddle: mode 'avg' computes in float32
        np.testing.assert_array_equal(oarlock.median(x, axis=1).numpy(), [0.8125, 6.5])
        values, _ = oarlock.median(x, axis=1, mode="min")
        assert values.dtype == dtype and values.numpy().astype(np.float64).tolist() == [0.125, 6.0]
        assert oarlock.nanmedian(x, axis=1).dtype == dtype
        np.testing.assert_array_equal(oarlock.nanmedian(x, axis=1).numpy().astype(np.float64), [0.8125, 6.5])


def test_sort_16bit_matches_numpy_on_the_rounded_values():
    data = RNG.standard_normal((5, 40))
    data[0, :3] = NAN
    for dtype in ("bfloat16", "float16"):
        x = _t(data, dtype)
        rounded = x.numpy().astype(np.float64)  # bfloat16 rounding makes ties: the order must stay stable
        np.testing.assert_array_equal(oarlock.sort(x).numpy().astype(np.float64), np.sort(rounded))
        np.testing.assert_array_equal(oarlock.argsort(x).numpy(), np.argsort(rounded, kind="stable"))
        values, indices = oarlock.topk(x, 5, largest=False)
        np.testing.assert_array_equal(indices.numpy(), np.argsort(rounded, kind="stable")[:, :5])
        assert values.dtype == dtype


@pytest.mark.parametrize("values, call", [
    ([1.0, 2.0, 2.0, 3.0], lambda m, x: m.median(x)),
    ([2.0, 2.0, 2.0, 3.0], lambda m, x: m.median(x)),
    ([5.0, 2.0, 1.0, 2.0], lambda m, x: m.median(x, mode="min")),
    ([1.0, 2.0, 2.0, 2.0, 5.0], lambda m, x: m.median(x, axis=0)),
    ([4.0, 1.0, 3.0, 2.0], lambda m, x: m.median(x, axis=0, mode="min")[0]),
    ([1.0, NAN, 2.0, 3.0], lambda m, x: m.median(x)),
    ([2.0, NAN, 2.0, 2.0, 3.0], lambda m, x: m.nanmedian(x)),
    ([[1.0, 4.0, 4.0], [2.0, 0.0, 3.0]], lambda m, x: m.nanmedian(x, axis=1)),
    ([1.0, 4.0, 2.0, 3.0], lambda m, x: m.topk(x, 2)[0]),
    ([1.0, 4.0, 2.0, 3.0], lambda m, x: m.kthvalue(x, 3)[0]),
    ([1.0, 4.0, 2.0, 3.0], lambda m, x: m.sort(x) * m.to_tensor([1.0, 2.0, 3.0, 4.0], dtype="float64")),
    ([[1.0, 4.0], [2.0, 3.0]], lambda m, x: m.msort(x) * m.to_tensor([[1.0, 2.0], [3.0, 4.0]], dtype="float64")),
])
def test_gradients_like_paddle(paddle, values, call):
    """Ties share a median's gradient evenly (Paddle's rule); the index form sends it to the index; a NaN
    median sends it to the first NaN."""
    x = _t(values, grad=True)
    call(oarlock, x).sum().backward()
    px = paddle.to_tensor(values, dtype="float64", stop_gradient=False)
    call(paddle, px).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), px.grad.numpy(), rtol=1e-12)


# -- torch semantics: oarlock.compat and topk ---------------------------------------------------------------

def _torch_pair(torch, data, grad=True):
    ours = _t(data, grad=grad)
    theirs = torch.tensor(data, requires_grad=grad)
    return ours, theirs


def _backward_both(torch, ours_out, theirs_out, ours, theirs):
    weights = RNG.standard_normal(_np(ours_out).shape)
    (ours_out * _t(weights)).sum().backward()
    (theirs_out * torch.tensor(weights)).sum().backward()
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("kwargs", [{}, {"dim": 0}, {"dim": 1, "descending": True}, {"stable": True}])
def test_compat_sort_like_torch(torch, kwargs):
    x, tx = _torch_pair(torch, DISTINCT)
    ours, theirs = compat.sort(x, **kwargs), torch.sort(tx, **kwargs)
    assert type(ours).__name__ == type(theirs).__name__ == "sort" and ours._fields == ("values", "indices")
    _same(ours.values, theirs.values)
    _same(ours.indices, theirs.indices)
    _backward_both(torch, ours.values, theirs.values, x, tx)
    ties = RNG.integers(0, 3, size=(3, 8)).astype(np.float64)
    for descending in (False, True):
        ours = compat.sort(_t(ties), 1, descending, stable=True)
        theirs = torch.sort(torch.tensor(ties), dim=1, descending=descending, stable=True)
        _same(ours.indices, theirs.indices)


def test_compat_sort_out(torch):
    x = _t(DISTINCT[0])
    values, indices = oarlock.zeros([4, 5], dtype="float64"), oarlock.zeros([4, 5], dtype="int64")
    result = compat.sort(x, 0, out=(values, indices))
    assert result.values is values and result.indices is indices
    theirs = torch.sort(torch.tensor(DISTINCT[0]), 0)
    _same(values, theirs.values)
    _same(indices, theirs.indices)


@pytest.mark.parametrize("sections, dim", [(2, 0), (3, 2), (5, -1), (7, 1), ([1, 3], 1), ((2, 0, 3), 2), ([3], 0)])
def test_compat_split_like_torch(torch, sections, dim):
    x, tx = _torch_pair(torch, DISTINCT)
    ours, theirs = compat.split(x, sections, dim), torch.split(tx, sections, dim)
    assert isinstance(ours, tuple) and len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        _same(a, b)
    weights = [RNG.standard_normal(p.shape) for p in theirs]
    sum((a * _t(w)).sum() for a, w in zip(ours, weights)).backward()
    sum((b * torch.tensor(w)).sum() for b, w in zip(theirs, weights)).backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())
    _same(compat.split(x, oarlock.to_tensor(2), dim=oarlock.to_tensor(1))[0], torch.split(tx, 2, 1)[0])


@pytest.mark.parametrize("name", ["max", "min"])
def test_compat_min_max_like_torch(torch, name):
    ours_fn, theirs_fn = getattr(compat, name), getattr(torch, name)
    x, tx = _torch_pair(torch, DISTINCT)
    _same(ours_fn(x), theirs_fn(tx))                                       # (input)
    for args, kwargs in (((1,), {}), ((-1, True), {}), ((), {"dim": 0, "keepdim": True}), ((2,), {"keepdim": False})):
        ours, theirs = ours_fn(x, *args, **kwargs), theirs_fn(tx, *args, **kwargs)
        assert type(ours).__name__ == name and ours._fields == ("values", "indices")
        _same(ours.values, theirs.values)
        _same(ours.indices, theirs.indices)
    x, tx = _torch_pair(torch, DISTINCT)
    _backward_both(torch, ours_fn(x, 1).values, theirs_fn(tx, 1).values, x, tx)
    y, ty = _torch_pair(torch, DISTINCT[::-1].copy())
    x, tx = _torch_pair(torch, DISTINCT)
    _same(ours_fn(x, y), theirs_fn(tx, ty))                                # (input, other)
    _same(ours_fn(x, other=y), theirs_fn(tx, other=ty))
    ints = RNG.integers(-5, 5, size=(3, 4))
    _same(ours_fn(_t(ints, "int64"), _t(ints[::-1].copy(), "int32")),
          theirs_fn(torch.tensor(ints), torch.tensor(ints[::-1].copy(), dtype=torch.int32)))


@pytest.mark.parametrize("name", ["max", "min"])
def test_compat_min_max_ties_nan_and_gradients_like_torch(torch, name):
    ours_fn, theirs_fn = getattr(compat, name), getattr(torch, name)
    ties = np.array([[1.0, 3.0, 3.0, 1.0], [2.0, 2.0, 2.0, 2.0]])
    x, tx = _torch_pair(torch, ties)
    ours, theirs = ours_fn(x, 1), theirs_fn(tx, 1)
    _same(ours.indices, theirs.indices)  # the first occurrence
    _backward_both(torch, ours.values, theirs.values, x, tx)
    x, tx = _torch_pair(torch, ties)
    _backward_both(torch, ours_fn(x), theirs_fn(tx), x, tx)  # the full reduction shares among ties
    x, tx = _torch_pair(torch, WITH_NAN, grad=False)
    ours, theirs = ours_fn(x, 1), theirs_fn(tx, 1)
    _same(ours.values, theirs.values)
    _same(ours.indices, theirs.indices)
    scalar = _t(2.5)
    assert ours_fn(scalar, 0).indices.item() == 0 and ours_fn(scalar, -1, True).values.shape == []


@pytest.mark.parametrize("name", ["median", "nanmedian"])
def test_compat_median_like_torch(torch, name):
    ours_fn, theirs_fn = getattr(compat, name), getattr(torch, name)
    for data in (DISTINCT, DISTINCT[:, :3]):
        x, tx = _torch_pair(torch, data)
        _same(ours_fn(x), theirs_fn(tx))
        _backward_both(torch, ours_fn(x), theirs_fn(tx), x, tx)
        for dim, keepdim in ((0, False), (-1, True), (1, False)):
            x, tx = _torch_pair(torch, data)
            ours, theirs = ours_fn(x, dim, keepdim), theirs_fn(tx, dim, keepdim)
            assert type(ours).__name__ == name and ours._fields == ("values", "indices")
            _same(ours.values, theirs.values)
            _same(ours.indices, theirs.indices)
            _backward_both(torch, ours.values, theirs.values, x, tx)
    ints = (DISTINCT[0] * 7).astype(np.int64)
    _same(ours_fn(_t(ints, "int64")), theirs_fn(torch.tensor(ints)))  # the lower median, in int64
    x, tx = _torch_pair(torch, WITH_NAN[:3], grad=False)
    ours, theirs = ours_fn(x, 1), theirs_fn(tx, 1)
    _same(ours.values, theirs.values)
    _same(ours.indices, theirs.indices)


def test_compat_median_ties_share_the_full_gradient_like_torch(torch):
    for fn in ("median", "nanmedian"):
        x, tx = _torch_pair(torch, [1.0, 2.0, 2.0, 3.0, 2.0, 0.0])
        getattr(compat, fn)(x).backward()
        getattr(torch, fn)(tx).backward()
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())


def test_compat_nanmedian_all_nan_index_is_zero():
    result = compat.nanmedian(_t(WITH_NAN), 1)
    assert np.isnan(result.values.numpy()[3]) and result.indices.numpy()[3] == 0  # torch's; Paddle's op says -1
    assert oarlock.nanmedian(_t(WITH_NAN), axis=1, mode="min")[1].numpy()[3] == -1


@pytest.mark.parametrize("shape", [(), (5,), (3, 4), (2, 3, 4), (2, 3, 2, 2)])
def test_compat_softmax_like_torch(torch, shape):
    data = RNG.standard_normal(shape)
    x, tx = _torch_pair(torch, data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that an implicit dim is deprecated
        theirs = torch.nn.functional.softmax(tx, dim=None)
    ours = compat.softmax(x)
    _same(ours, theirs)
    _backward_both(torch, ours, theirs, x, tx)
    if data.ndim:
        _same(compat.softmax(_t(data), -1, dtype="float32"), torch.softmax(torch.tensor(data), -1, dtype=torch.float32))
    ints = oarlock.to_tensor(np.arange(6).reshape(2, 3))
    _same(compat.softmax(ints, dim=1, dtype="float64"), torch.softmax(torch.arange(6).reshape(2, 3), 1,
                                                                      dtype=torch.float64))


@pytest.mark.parametrize("k, kwargs", [(2, {}), (3, {"dim": 0}), (1, {"dim": 1, "largest": False}), (0, {})])
def test_topk_like_torch(torch, k, kwargs):
    x, tx = _torch_pair(torch, DISTINCT)
    ours, theirs = oarlock.topk(x, k, **kwargs), torch.topk(tx, k, **kwargs)
    assert type(ours).__name__ == type(theirs).__name__ == "topk"
    values, indices = ours  # unpacks as a tuple
    _same(values, theirs.values)
    _same(indices, theirs.indices)
    if k:
        _backward_both(torch, values, theirs.values, x, tx)


def test_kthvalue_like_torch(torch):
    x, tx = _torch_pair(torch, DISTINCT)
    ours, theirs = oarlock.kthvalue(x, 3, 1, True), torch.kthvalue(tx, 3, 1, True)
    _same(ours[0], theirs.values)
    _same(ours[1], theirs.indices)
    _backward_both(torch, ours[0], theirs.values, x, tx)


def test_second_order_gradients_like_torch(torch):
    """The backward rules are public ops: the gradient differentiates again."""
    for ours_fn, theirs_fn in ((lambda t: compat.sort(t, 1).values, lambda t: torch.sort(t, 1).values),
                               (lambda t: oarlock.topk(t, 2).values, lambda t: torch.topk(t, 2).values),
                               (lambda t: compat.max(t, 0).values, lambda t: torch.max(t, 0).values),
                               (lambda t: compat.median(t, 1).values, lambda t: torch.median(t, 1).values)):
        x, tx = _torch_pair(torch, DISTINCT[0])
        (g,) = oarlock.grad([(ours_fn(x) ** 3).sum()], [x], create_graph=True)
        (tg,) = torch.autograd.grad((theirs_fn(tx) ** 3).sum(), tx, create_graph=True)
        np.testing.assert_allclose(g.numpy(), tg.detach().numpy(), rtol=1e-12)
        (g * g).sum().backward()
        (tg * tg).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)


# -- structures, methods, out= ---------------------------------------------------------------------------

def test_named_tuples_are_tuples_one_type_per_function():
    x = _t(DISTINCT[0])
    results = {"topk": oarlock.topk(x, 2), "sort": compat.sort(x), "max": compat.max(x, 0), "min": compat.min(x, 0),
               "median": compat.median(x, 0), "nanmedian": compat.nanmedian(x, 0)}
    for name, result in results.items():
        assert type(result) is getattr(return_types, name) and isinstance(result, tuple)
        values, indices = result
        assert values is result.values is result[0] and indices is result.indices is result[1]
        assert indices.dtype == "int64" and repr(result).startswith(f"{name}(values=")
    assert pickle.loads(pickle.dumps(return_types.sort(1, 2))) == (1, 2)
    assert compat.max(x, 0).__class__ is not compat.min(x, 0).__class__


def test_tensor_methods():
    x = _t(DISTINCT[0])
    np.testing.assert_array_equal(x.sort(axis=0).numpy(), oarlock.sort(x, 0).numpy())
    np.testing.assert_array_equal(x.argsort(descending=True).numpy(), oarlock.argsort(x, descending=True).numpy())
    np.testing.assert_array_equal(x.msort().numpy(), oarlock.msort(x).numpy())
    assert type(x.topk(2)) is return_types.topk
    assert x.kthvalue(2)[0].shape == [4] and x.median().shape == [] and x.nanmedian(axis=1).shape == [4]


def test_out_writes_in_place_and_refuses_what_does_not_fit():
    x = _t(DISTINCT[0])
    values, indices = oarlock.zeros([4, 2], dtype="float64"), oarlock.zeros([4, 2], dtype="int64")
    result = oarlock.topk(x, 2, out=[values, indices])
    assert result.values is values and np.array_equal(indices.numpy(), oarlock.topk(x, 2).indices.numpy())
    target = oarlock.zeros([], dtype="float64")
    assert compat.max(x, out=target) is target and target.item() == DISTINCT[0].max()
    assert compat.median(x, out=target) is target
    softmax = oarlock.zeros([4, 5], dtype="float64")
    assert compat.softmax(x, out=softmax) is softmax
    for bad, words in (((values,), ["compat.sort", "out", "tuple of 2"]), (values, ["compat.sort", "out"]),
                       ((oarlock.zeros([4, 5], dtype="int64"), oarlock.zeros([4, 5], dtype="int64")),
                        ["compat.sort", "out[0]", "float64", "int64"]),
                       ((oarlock.zeros([4, 4], dtype="float64"), oarlock.zeros([4, 5], dtype="int64")),
                        ["compat.sort", "out[0]", "[4, 4]"])):
        with pytest.raises((TypeError, ValueError)) as info:
            compat.sort(x, out=bad)
        for word in words:
            assert word in str(info.value), f"{word!r} missing from: {info.value}"
    with pytest.raises(RuntimeError, match="compat.max.*out= does not support autograd"):
        compat.max(_t(DISTINCT[0], grad=True), out=target)
    sorted_values = oarlock.zeros([4, 5], dtype="float32")  # a same-kind cast is allowed, as in torch
    assert oarlock.sort(x, axis=0, out=sorted_values) is sorted_values
    np.testing.assert_allclose(sorted_values.numpy(), np.sort(DISTINCT[0], axis=0), rtol=1e-6)
    pair = (oarlock.zeros([5], dtype="float64"), oarlock.zeros([5], dtype="int64"))
    assert oarlock.median(x, axis=0, mode="min", out=pair) is pair
    msorted = oarlock.zeros([4, 5], dtype="float64")
    assert oarlock.msort(x, out=msorted) is msorted and np.array_equal(msorted.numpy(), np.sort(DISTINCT[0], 0))


# -- errors -------------------------------------------------------------------------------------------------

X = np.arange(12.0).reshape(3, 4)


@pytest.mark.parametrize("call, words", [
    (lambda x: oarlock.topk(x, 5), ["oarlock.topk", "'k'", "[0, 4]", "got 5"]),
    (lambda x: oarlock.topk(x, -1, axis=0), ["oarlock.topk", "'k'", "[0, 3]", "got -1"]),
    (lambda x: oarlock.topk(x, 1.5), ["oarlock.topk", "'k'", "int", "1.5"]),
    (lambda x: oarlock.topk(x, 2, axis=2), ["oarlock.topk", "axis 2", "[-2, 1]"]),
    (lambda x: oarlock.topk(x, 2, axis=0, dim=0), ["oarlock.topk", "alias"]),
    (lambda x: oarlock.kthvalue(x, 0), ["oarlock.kthvalue", "'k'", "[1, 4]", "got 0"]),
    (lambda x: oarlock.kthvalue(x, 5, axis=1), ["oarlock.kthvalue", "'k'", "got 5"]),
    (lambda x: oarlock.sort(x, axis=-3), ["oarlock.sort", "axis -3", "[-2, 1]"]),
    (lambda x: oarlock.sort(x, dim=0, axis=0), ["oarlock.sort", "alias"]),
    (lambda x: oarlock.sort(x, descending="yes"), ["oarlock.sort", "'descending'", "bool"]),
    (lambda x: oarlock.argsort(x, axis=5), ["oarlock.argsort", "axis 5"]),
    (lambda x: oarlock.msort(x, axis=1), ["oarlock.msort", "'axis'"]),
    (lambda x: oarlock.median(x, mode="max"), ["oarlock.median", "'mode'", "'avg' or 'min'", "'max'"]),
    (lambda x: oarlock.median(x, axis=[]), ["oarlock.median", "'axis'", "empty"]),
    (lambda x: oarlock.median(x, axis=2), ["oarlock.median", "axis 2"]),
    (lambda x: oarlock.median(x, 0, input=x), ["oarlock.median", "alias 'input'"]),
    (lambda x: oarlock.nanmedian(x, axis=[0, 0]), ["oarlock.nanmedian", "twice"]),
    (lambda x: oarlock.median(oarlock.zeros([2, 0], dtype="int64"), axis=1, mode="min"),
     ["oarlock.median", "empty axis"]),
    (lambda x: oarlock.topk(x.astype("bool"), 1), ["oarlock.topk", "bool"]),
    (lambda x: compat.split(x, [1, 1], dim=0), ["compat.split", "'split_size_or_sections'", "up to 3"]),
    (lambda x: compat.split(x, [5, -1], dim=0), ["compat.split", "'split_size_or_sections'", "non-negative"]),
    (lambda x: compat.split(x, 0), ["compat.split", "'split_size_or_sections'", "positive", "got 0"]),
    (lambda x: compat.split(x, 2.5), ["compat.split", "'split_size_or_sections'", "float"]),
    (lambda x: compat.split(x, 2, dim=2), ["compat.split", "'dim'", "[-2, 1]"]),
    (lambda x: compat.split(x, 2, axis=1), ["compat.split", "'axis'", "oarlock.split"]),
    (lambda x: compat.split(oarlock.to_tensor(1.0), 1), ["compat.split", "0-D"]),
    (lambda x: compat.sort(x, dim=2), ["compat.sort", "'dim'", "[-2, 1]"]),
    (lambda x: compat.sort(x=x), ["compat.sort", "'x'", "oarlock.sort"]),
    (lambda x: compat.max(x=x, axis=0), ["compat.max", "'axis', 'x'", "oarlock.max"]),
    (lambda x: compat.nanmedian(dim=0), ["compat.nanmedian", "missing", "'input'"]),
    (lambda x: compat.split(x), ["compat.split", "missing", "'split_size_or_sections'"]),
    (lambda x: compat.sort(np.ones(3)), ["compat.sort", "'input'", "Tensor"]),
    (lambda x: compat.max(x, 1.5), ["compat.max", "int dim", "Tensor other", "float"]),
    (lambda x: compat.max(x, 1, True, 2), ["compat.max", "at most 3"]),
    (lambda x: compat.min(x, x, keepdim=True), ["compat.min", "'other'", "keepdim"]),
    (lambda x: compat.min(x, keepdim=True), ["compat.min", "keepdim needs dim"]),
    (lambda x: compat.min(x, 1, dim=0), ["compat.min", "multiple values", "'dim'"]),
    (lambda x: compat.max(x, axis=1), ["compat.max", "'axis'", "oarlock.max"]),
    (lambda x: compat.max(x, 1, keepdim=1), ["compat.max", "'keepdim'", "bool"]),
    (lambda x: compat.max(x, 3), ["compat.max", "'dim'", "[-2, 1]"]),
    (lambda x: compat.median(x, 2), ["compat.median", "'dim'"]),
    (lambda x: compat.nanmedian(x, 1.0), ["compat.nanmedian", "'dim'", "int"]),
    (lambda x: compat.median(x, axis=0), ["compat.median", "oarlock.median"]),
    (lambda x: compat.softmax(x, dim=3), ["compat.softmax", "'dim'"]),
    (lambda x: compat.softmax(x, foo=1), ["compat.softmax", "'foo'", "input, dim=None"]),
])
def test_errors_name_the_function_and_the_argument(call, words):
    with pytest.raises((TypeError, ValueError)) as info:
        call(_t(X))
    for word in words:
        assert word in str(info.value), f"{word!r} missing from: {info.value}"
