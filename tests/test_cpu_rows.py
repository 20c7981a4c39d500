"""oarlock-cpu's fused RMSNorm / LayerNorm row kernels (oarlock_cpu.rows over the C extension _rows): forward
and backward against PyTorch's F.rms_norm / F.layer_norm run in float64 (the oracle), against the generic
numpy kernels of oarlock-ops they replace on "cpu", and the fallbacks to those for what they do not take."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("oarlock_cpu._rows")
pytest.importorskip("oarlock_ops")
torch = pytest.importorskip("torch")

import oarlock  # noqa: E402
from oarlock.plugin_api import default_registry  # noqa: E402
from oarlock_cpu import rows  # noqa: E402
from oarlock_cpu.kernels import generic  # noqa: E402

F = oarlock.nn.functional
TF = torch.nn.functional
# float32: rounding of the output only (sums in double) against the float64 oracle, relative to the row scale
TOL = {np.float32: dict(rtol=2e-6, atol=2e-6), np.float64: dict(rtol=1e-12, atol=1e-12)}

CASES = [  # shape, normalized_shape
    ((2048, 128), [128]),
    ((3, 5, 129), [129]),   # 3-D, odd row length
    ((1, 7), [7]),          # one row
    ((4, 1), [1]),          # rows of one
    ((2, 3, 4, 6), [4, 6]),  # two normalised axes
]


def _data(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * 2 + 0.5).astype(dtype)


def _oracle(kind, x, w, b, g, shape, eps):
    """The same in torch, float64."""
    t = [None if a is None else torch.from_numpy(a.astype(np.float64)).requires_grad_() for a in (x, w, b)]
    tx, tw, tb = t
    eps64 = eps if eps is not None else (2.0 ** -52 if x.dtype == np.float64 else 2.0 ** -23)
    out = TF.rms_norm(tx, shape, tw, eps64) if kind == "rms" else TF.layer_norm(tx, shape, tw, tb, eps64)
    out.backward(torch.from_numpy(g.astype(np.float64)))
    grad = (lambda a: None if a is None else a.grad.numpy())
    return out.detach().numpy(), tx.grad.numpy(), grad(tw), grad(tb)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,normalized", CASES)
@pytest.mark.parametrize("kind,affine,eps", [("rms", True, 1e-6), ("rms", False, None), ("rms", True, None),
                                            ("layer", True, 1e-5), ("layer", False, 1e-3),
                                            ("layer", "weight", 1e-5), ("layer", "bias", 0.1)])
def test_against_torch_float64(kind, affine, eps, shape, normalized, dtype):
    x, g = _data(shape, dtype), _data(shape, dtype, seed=1)
    n = int(np.prod(normalized))
    w = _data(normalized, dtype, seed=2) if affine in (True, "weight") else None
    b = _data(normalized, dtype, seed=3) if affine in (True, "bias") and kind == "layer" else None
    if kind == "layer" and eps is None:
        eps = 1e-5
    ours = _run_shape(kind, x, w, b, g, normalized, eps)
    ref = _oracle(kind, x, w, b, g, normalized, eps)
    for name, a, r in zip(("out", "dx", "dweight", "dbias"), ours, ref):
        if r is None:
            assert a is None
            continue
        # the weight and bias gradients sum over rows: scale the tolerance by the number of rows
        scale = 1.0 if name in ("out", "dx") else np.sqrt(x.size // n)
        np.testing.assert_allclose(a, r, rtol=TOL[dtype]["rtol"] * scale, atol=TOL[dtype]["atol"] * scale,
                                   err_msg=name)


def _run_shape(kind, x, w, b, g, normalized, eps):
    tx = oarlock.to_tensor(x, stop_gradient=False)
    tw = None if w is None else oarlock.to_tensor(w, stop_gradient=False)
    tb = None if b is None else oarlock.to_tensor(b, stop_gradient=False)
    out = F.rms_norm(tx, normalized, tw, eps) if kind == "rms" else F.layer_norm(tx, normalized, tw, tb, eps)
    (out * oarlock.to_tensor(g)).sum().backward()
    grad = (lambda t: None if t is None else t.grad.numpy())
    return out.numpy(), tx.grad.numpy(), grad(tw), grad(tb)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_agrees_with_the_generic_kernels(dtype):
    """The generic kernels (what "cpu" ran before) give the same results to the dtype's rounding, statistics
    included."""
    x, g = _data((64, 96), dtype), _data((64, 96), dtype, seed=1)
    w, b = _data((96,), dtype, seed=2), _data((96,), dtype, seed=3)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    ours = rows.layer_norm(np, x, w, b, normalized_shape=(96,), epsilon=1e-5)
    theirs = generic("layer_norm")(np, x, w, b, normalized_shape=(96,), epsilon=1e-5)
    for a, r in zip(ours, theirs):
        assert a.dtype == r.dtype and a.shape == r.shape
        np.testing.assert_allclose(a, r, **tol)
    mean, rstd = ours[1:]
    attrs = dict(view=(64, 96), stats=(1,), affine=(1, 96))
    for m, bias in ((mean, True), (None, False)):
        got = rows.normalize_grad(np, x, w, g, m, rstd, **attrs, bias=bias)
        want = generic("_normalize_grad")(np, x, w, g, m, rstd, **attrs, bias=bias)
        for a, r in zip(got, want):
            assert a.dtype == r.dtype and a.shape == r.shape
            np.testing.assert_allclose(a, r, **tol)
    ours = rows.rms_norm(np, x, None, normalized_shape=(96,), eps=None)
    theirs = generic("rms_norm")(np, x, None, normalized_shape=(96,), eps=None)
    for a, r in zip(ours, theirs):
        assert a.dtype == r.dtype and a.shape == r.shape
        np.testing.assert_allclose(a, r, **tol)


def test_registered_for_cpu_and_fallbacks(monkeypatch):
    registry = default_registry()
    for op in ("layer_norm", "rms_norm", "_normalize_grad"):
        for dtype in (oarlock.float32, oarlock.float64):
            assert registry.find_kernel(op, "cpu", dtype) is rows.KERNELS[op]
    calls = []
    monkeypatch.setattr(rows._rows, "norm_grad", lambda *a, _f=rows._rows.norm_grad: calls.append(1) or _f(*a))
    x = _data((8, 16), np.float32)
    # non-contiguous input, batch_norm's and group_norm's plans, an empty input: the generic kernels answer
    strided = np.asfortranarray(x)
    ours = rows.layer_norm(np, strided, None, None, normalized_shape=(16,), epsilon=1e-5)
    theirs = rows.layer_norm(np, np.ascontiguousarray(strided), None, None, normalized_shape=(16,), epsilon=1e-5)
    for a, r in zip(ours, theirs):
        np.testing.assert_allclose(a, r, rtol=1e-6, atol=1e-6)
    t = oarlock.to_tensor(_data((4, 6, 5), np.float32), stop_gradient=False)
    F.group_norm(t, 2).sum().backward()
    assert t.grad is not None and not calls  # group_norm's backward went to the generic kernel
    t = oarlock.to_tensor(_data((4, 6), np.float32), stop_gradient=False)
    F.layer_norm(t, [6]).sum().backward()
    assert calls  # layer_norm's went to the row kernel
    empty = rows.rms_norm(np, np.zeros((0, 4), np.float32), None, normalized_shape=(4,), eps=None)
    assert empty[0].shape == (0, 4)
    with pytest.raises(ValueError, match="normalized_shape"):  # the generic kernel's error
        rows.rms_norm(np, x, None, normalized_shape=(5,), eps=None)


def test_extension_checks_its_arguments():
    x = np.ones((3, 4), np.float32)
    with pytest.raises(ValueError, match="rstd"):
        rows._rows.rms_norm(x, None, 1e-6, np.empty_like(x), np.empty(2, np.float32))
    with pytest.raises(ValueError, match="weight"):
        rows._rows.rms_norm(x, np.ones(4), 1e-6, np.empty_like(x), np.empty(3, np.float32))
    with pytest.raises(TypeError):
        rows._rows.rms_norm(x.astype(np.float16), None, 1e-6, np.empty_like(x), np.empty(3, np.float32))
