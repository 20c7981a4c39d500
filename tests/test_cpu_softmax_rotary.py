"""oarlock-cpu's softmax rows and rotary rows (C, split over the pool) against float64 numpy, PyTorch and the
generic kernels they override; the inputs they leave to the generic kernels get the generic results."""

from __future__ import annotations

import numpy as np
import pytest

import oarlock
import oarlock.nn.functional as F

_kernels = pytest.importorskip("oarlock_cpu._kernels", reason="oarlock-cpu's C extension is not built")
from oarlock_cpu import kernels, rotary_kernels, softmax_kernels  # noqa: E402

torch = pytest.importorskip("torch")
if not hasattr(_kernels, "softmax_rows"):
    pytest.skip("oarlock-cpu was built before its softmax rows", allow_module_level=True)


def _softmax64(x, axis=-1):
    z = np.exp(x - x.max(axis=axis, keepdims=True))
    return z / z.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("shape", [(3, 1), (7, 5), (64, 77), (2, 3, 600, 130)])
def test_softmax_forward_and_backward_against_float64_and_torch(shape):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 6).astype(np.float32)
    g = rng.standard_normal(shape).astype(np.float32)
    xt = oarlock.to_tensor(x, stop_gradient=False)
    y = F.softmax(xt, axis=-1)
    (y * oarlock.to_tensor(g)).sum().backward()
    want = _softmax64(x.astype(np.float64))
    np.testing.assert_allclose(y.numpy(), want, rtol=2e-5, atol=1e-7)
    tx = torch.tensor(x, requires_grad=True)
    (torch.softmax(tx, -1) * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(xt.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=2e-6)
    grad64 = want * (g - (g * want).sum(-1, keepdims=True))
    np.testing.assert_allclose(xt.grad.numpy(), grad64, rtol=1e-4, atol=2e-6)


def test_softmax_rows_with_nan_and_inf_are_nan_as_numpy_makes_them():
    x = np.zeros((4, 20), np.float32)
    x[0, 3] = np.nan
    x[1] = -np.inf
    x[2, 7] = np.inf
    got = F.softmax(oarlock.to_tensor(x)).numpy()
    with np.errstate(invalid="ignore"):
        want = _softmax64(x)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got[3], np.full(20, 0.05, np.float32), rtol=1e-6)


def test_softmax_inputs_left_to_the_generic_kernel():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 9)).astype(np.float32)
    generic = kernels.generic("softmax")
    for args, kwargs in (((x,), {"axis": 0}), ((x.T,), {"axis": -1}), ((x,), {"axis": -1, "dtype": np.float64})):
        got = softmax_kernels.KERNELS["softmax"](np, *args, **kwargs)
        want = generic(np, *args, **kwargs)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    # softmax_compat's axis=None (torch's legacy rule) is the generic kernel's too
    np.testing.assert_array_equal(softmax_kernels.KERNELS["softmax_compat"](np, x, axis=None),
                                  kernels.generic("softmax_compat")(np, x, axis=None))


def _tables(seq, dim, dtype):
    from oarlock_train.model import rotary_arrays
    cos, sin = rotary_arrays(seq, dim)
    return cos.astype(dtype), sin.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("transpose", [False, True])
def test_rotary_rows_give_the_generic_kernels_bits(dtype, transpose):
    rng = np.random.default_rng(2)
    qkv = rng.standard_normal((3, 40, 12, 32)).astype(dtype)
    cos, sin = _tables(40, 32, dtype)
    generic = kernels.generic("fused_rotary_embedding")
    for x in (qkv[:, :, :8], np.ascontiguousarray(qkv[:, :, 8:])):   # a split view and a contiguous array
        got = rotary_kernels.fused_rotary_embedding(np, x, cos, sin, transpose=transpose)
        want = generic(np, x, cos, sin, transpose=transpose)
        assert got.dtype == want.dtype and got.flags.c_contiguous
        np.testing.assert_array_equal(got, want)
    # tables that vary per head, and a 3-D x, are the generic kernel's
    per_head = np.broadcast_to(cos, (1, 40, 12, 32)).copy()
    np.testing.assert_array_equal(rotary_kernels.fused_rotary_embedding(np, qkv, per_head, per_head),
                                  generic(np, qkv, per_head, per_head))


def test_rotary_gradient_against_torch():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 16, 4, 8)).astype(np.float32)
    g = rng.standard_normal(x.shape).astype(np.float32)
    cos, sin = _tables(16, 8, np.float32)
    xt = oarlock.to_tensor(x, stop_gradient=False)
    out = F.fused_rotary_embedding(xt, oarlock.to_tensor(cos), oarlock.to_tensor(sin))
    (out * oarlock.to_tensor(g)).sum().backward()
    tx = torch.tensor(x, requires_grad=True)
    swapped = torch.cat([tx[..., 4:], tx[..., :4]], dim=-1)
    ((tx * torch.tensor(cos) + swapped * torch.tensor(sin)) * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(xt.grad.numpy(), tx.grad.numpy(), rtol=1e-6, atol=1e-6)


def test_row_array_functions_for_cross_entropy():
    from oarlock.plugin_api import xp_function
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((37, 300)) * 8).astype(np.float32)
    x64 = x.astype(np.float64)
    lse = xp_function(np, "logsumexp_rows")(x)
    m = x64.max(1)
    np.testing.assert_allclose(lse, np.log(np.exp(x64 - m[:, None]).sum(1)) + m, rtol=1e-6)
    np.testing.assert_allclose(xp_function(np, "softmax_rows")(x), _softmax64(x64), rtol=2e-5, atol=1e-8)
    # inputs they do not take: the caller computes those itself
    for fn in ("logsumexp_rows", "softmax_rows"):
        assert xp_function(np, fn)(x64) is None and xp_function(np, fn)(x.T) is None
    # cross_entropy on the fused rows against PyTorch, ignored rows included
    label = rng.integers(0, 300, 37)
    label[[3, 9]] = 7   # ignored below (a non-negative ignore_index: Paddle's mean then divides by the kept rows)
    xt = oarlock.to_tensor(x, stop_gradient=False)
    loss = F.cross_entropy(xt, oarlock.to_tensor(label), ignore_index=7)
    loss.backward()
    tx = torch.tensor(x, requires_grad=True)
    tloss = torch.nn.functional.cross_entropy(tx, torch.tensor(label), ignore_index=7)
    tloss.backward()
    np.testing.assert_allclose(float(loss), float(tloss), rtol=1e-6)
    np.testing.assert_allclose(xt.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-8)


def test_embedding_backward_rows_against_torch():
    """The C scatter-add sums each id's rows in the order they come, as PyTorch's CPU kernel: the same bits."""
    from oarlock_cpu import embedding_kernels
    rng = np.random.default_rng(5)
    weight = rng.standard_normal((50, 24)).astype(np.float32)
    ids = rng.integers(0, 50, (6, 70))
    g = rng.standard_normal((6, 70, 24)).astype(np.float32)
    w = oarlock.to_tensor(weight, stop_gradient=False)
    (F.embedding(oarlock.to_tensor(ids), w) * oarlock.to_tensor(g)).sum().backward()
    tw = torch.tensor(weight, requires_grad=True)
    (torch.nn.functional.embedding(torch.tensor(ids), tw) * torch.tensor(g)).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), tw.grad.numpy())
    direct = embedding_kernels.embedding_grad(np, ids, g.astype(np.float64), num_embeddings=50)
    np.testing.assert_allclose(direct, tw.grad.numpy(), rtol=1e-5, atol=1e-5)
    # padding_idx and scale_grad_by_freq are the generic kernel's; an id out of range is an error, not a write
    for kwargs in ({"padding_idx": 3}, {"scale_grad_by_freq": True}):
        np.testing.assert_array_equal(embedding_kernels.embedding_grad(np, ids, g, num_embeddings=50, **kwargs),
                                      kernels.generic("_embedding_grad")(np, ids, g, num_embeddings=50, **kwargs))
    with pytest.raises(IndexError, match="outside"):
        embedding_kernels.embedding_grad(np, ids, g, num_embeddings=10)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("ignore_index", [-100, 5])
@pytest.mark.parametrize("rows, classes, label_dtype", [(64, 10, np.int64), (3000, 40, np.int32), (9, 1, np.int64)])
def test_fused_hard_label_cross_entropy_against_float64_and_torch(reduction, ignore_index, rows, classes,
                                                                   label_dtype):
    """oarlock-cpu's one-call cross-entropy rows (forward, backward; large calls split over the pool) against a
    float64 reference of Paddle's formula and PyTorch, ignored rows included (Paddle's 'mean' divides by every row
    when ignore_index is negative, by the kept rows otherwise)."""
    rng = np.random.default_rng(rows + classes)
    x = (rng.standard_normal((rows, classes)) * 5).astype(np.float32)
    label = rng.integers(0, classes, rows).astype(label_dtype)
    label[::7] = ignore_index
    g_rows = rng.standard_normal(rows).astype(np.float32)
    xt = oarlock.to_tensor(x, stop_gradient=False)
    loss = F.cross_entropy(xt, oarlock.to_tensor(label), ignore_index=ignore_index, reduction=reduction)
    (loss * oarlock.to_tensor(g_rows) if reduction == "none" else loss * 1.5).sum().backward()
    x64, kept = x.astype(np.float64), label != ignore_index
    m = x64.max(1, keepdims=True)
    lse = np.log(np.exp(x64 - m).sum(1)) + m[:, 0]
    per_row = np.where(kept, lse - x64[np.arange(rows), np.where(kept, label, 0)], 0.0)
    divisor = rows if ignore_index < 0 else max(kept.sum(), 1)
    want = {"none": per_row, "sum": per_row.sum(), "mean": per_row.sum() / divisor}[reduction]
    np.testing.assert_allclose(loss.numpy(), want, rtol=2e-6, atol=2e-6)
    coef = g_rows if reduction == "none" else np.full(rows, 1.5 / (divisor if reduction == "mean" else 1))
    onehot = np.eye(classes)[np.where(kept, label, 0)]
    grad64 = (np.exp(x64 - lse[:, None]) - onehot) * (coef * kept)[:, None]
    np.testing.assert_allclose(xt.grad.numpy(), grad64, rtol=1e-5, atol=1e-6)
    tx = torch.tensor(x, requires_grad=True)
    tl = torch.nn.functional.cross_entropy(tx, torch.tensor(label.astype(np.int64)), ignore_index=ignore_index,
                                           reduction=reduction)
    if reduction == "mean" and ignore_index < 0:   # PyTorch divides by the kept rows; Paddle by all of them here
        tl = tl * kept.sum() / rows
    (tl * torch.tensor(g_rows) if reduction == "none" else tl * 1.5).sum().backward()
    np.testing.assert_allclose(loss.numpy(), tl.detach().numpy(), rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(xt.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_fused_hard_label_cross_entropy_refuses_a_bad_label_and_declines_other_inputs():
    from oarlock.plugin_api import xp_function
    x = np.zeros((4, 3), np.float32)
    with pytest.raises(IndexError, match=r"label value 3 is out of range for 3 classes \(valid: 0 to 2, or "
                                         r"ignore_index=-100\)"):
        F.cross_entropy(oarlock.to_tensor(x), oarlock.to_tensor(np.array([0, 1, 3, -100])))
    with pytest.raises(IndexError, match="label value -2 is out of range"):
        F.cross_entropy(oarlock.to_tensor(x), oarlock.to_tensor(np.array([0, -2, 1, 2], np.int32)))
    rows = xp_function(np, "hard_label_cross_entropy_rows")
    grad_rows = xp_function(np, "hard_label_cross_entropy_grad_rows")
    label = np.array([0, 1, 2, 1])
    assert rows(x, label, -100) is not None and rows(x.astype(np.float64), label, -100) is None
    assert rows(x.T.copy().T, label, -100) is None   # not C-contiguous
    assert rows(x, label.astype(np.int16), -100) is None and rows(x, label[::2], -100) is None
    assert grad_rows(x, label, -100, np.ones(4, np.float64), False) is None   # a float64 coef: not taken
    assert grad_rows(x, np.array([0, 1, 2, 9]), -100, 1.0, True) is None      # a bad label: not taken
