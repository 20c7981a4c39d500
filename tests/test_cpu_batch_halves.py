"""oarlock_cpu.batch_halves: scaled_dot_product_attention and fused_rotary_embedding over the two halves of
a batch give the generic kernels' results (bits, for these inputs), forward and backward, and the ops
still agree with PyTorch."""

from __future__ import annotations

import numpy as np
import pytest

import oarlock
from oarlock_cpu import batch_halves as attention, blas
from oarlock_cpu.kernels import generic


@pytest.fixture(params=[1, 2], ids=["one_core", "two_cores"])
def cores(request):
    previous = blas.set_policy(blas.ThreadPolicy(forced=request.param))
    yield request.param
    blas.set_policy(previous)


CASES = {
    # name: (batch, seq_q, seq_k, heads_q, heads_k, head_dim, causal, mask)
    "causal": (4, 128, 128, 4, 4, 32, True, None),
    "odd_batch_gqa": (5, 96, 96, 8, 2, 32, True, None),
    "batch_mask": (4, 64, 128, 4, 4, 64, False, "batch"),
    "broadcast_float_mask": (3, 128, 128, 4, 4, 32, False, "float"),
}


def _inputs(case, dtype):
    b, sq, sk, hq, hk, d, causal, mask_kind = CASES[case]
    rng = np.random.default_rng(7)
    q = rng.standard_normal((b, sq, hq, d)).astype(dtype)
    k = rng.standard_normal((b, sk, hk, d)).astype(dtype)
    v = rng.standard_normal((b, sk, hk, d)).astype(dtype)
    mask = None
    if mask_kind == "batch":
        mask = rng.random((b, 1, sq, sk)) > 0.3
        mask[..., 0] = True
    elif mask_kind == "float":
        mask = (rng.standard_normal((sq, sk)) * 2).astype(dtype)
    return q, k, v, mask, causal


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_halves_match_one_call(cores, case, dtype):
    q, k, v, mask, causal = _inputs(case, dtype)
    assert attention._worth_splitting(q, k, False) == (cores == 2)
    gen = np.random.default_rng(0)
    out, probs, keep = attention.sdpa(np, q, k, v, mask, 0.0, causal, True, None, generator=gen)
    want_out, want_probs, _ = generic(attention.OP)(np, q, k, v, mask, 0.0, causal, True, None, generator=gen)
    np.testing.assert_array_equal(out, want_out)
    np.testing.assert_array_equal(probs, want_probs)
    g = np.random.default_rng(3).standard_normal(out.shape).astype(dtype)
    got = attention.sdpa_grad(np, g, q, k, v, out, probs, keep, 0.0, None, causal)
    want = generic(attention.GRAD)(np, g, q, k, v, want_out, want_probs, keep, 0.0, None, causal)
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


def test_dropout_and_small_calls_stay_whole(cores):
    q, k, _, _, _ = _inputs("causal", "float32")
    assert not attention._worth_splitting(q, k, True)          # one mask draw over the whole batch
    assert not attention._worth_splitting(q[:1], k[:1], False)  # nothing to split
    assert not attention._worth_splitting(q[:, :8], k[:, :8], False)  # too little work
    assert not attention._worth_splitting(q[0], k[0], False)   # unbatched


def test_the_op_on_halves_agrees_with_torch(cores):
    torch = pytest.importorskip("torch")
    q, k, v, _, _ = _inputs("causal", "float32")
    qt, kt, vt = (oarlock.to_tensor(a, stop_gradient=False) for a in (q, k, v))
    out = oarlock.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=True)
    (out * out).sum().backward()
    tq, tk, tv = (torch.tensor(a.transpose(0, 2, 1, 3), dtype=torch.float64, requires_grad=True) for a in (q, k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
    (ref * ref).sum().backward()
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy().transpose(0, 2, 1, 3), rtol=1e-4, atol=1e-5)
    for mine, theirs in ((qt, tq), (kt, tk), (vt, tv)):
        np.testing.assert_allclose(mine.grad.numpy(), theirs.grad.numpy().transpose(0, 2, 1, 3), rtol=1e-3,
                                   atol=1e-4)


@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("table", ["shared", "per_batch"])
def test_rotary_halves_match_one_call(cores, transpose, table):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 128, 8, 32)).astype(np.float32)
    lead = 6 if table == "per_batch" else 1
    cos, sin = (rng.standard_normal((lead, 128, 1, 32)).astype(np.float32) for _ in range(2))
    got = attention.rotary(np, x, cos, sin, transpose=transpose)
    want = generic(attention.ROTARY)(np, x, cos, sin, transpose=transpose)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    # the op through the dispatcher against float64 numpy: x * cos + rotate_half(x) * sin
    half = 16
    x64, c64, s64 = (a.astype(np.float64) for a in (x, cos, sin))
    turned = np.concatenate([x64[..., half:], x64[..., :half]], axis=-1)
    if transpose:
        ref = x64 * c64 + np.concatenate([(x64 * s64)[..., half:], (x64 * s64)[..., :half]], axis=-1)
    else:
        ref = x64 * c64 + turned * s64
    out = oarlock.nn.functional.fused_rotary_embedding(oarlock.to_tensor(x), oarlock.to_tensor(cos),
                                                       oarlock.to_tensor(sin), transpose=transpose)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5, atol=1e-5)


def _norm_results(kind):
    """layer_norm / rms_norm forward and backward through oarlock_cpu.rows on 2^18 elements (split in halves)."""
    from oarlock_cpu import rows
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2048, 128)).astype(np.float32) * 3 + 1
    w, b = rng.standard_normal(128).astype(np.float32), rng.standard_normal(128).astype(np.float32)
    g = rng.standard_normal(x.shape).astype(np.float32)
    if kind == "layer_norm":
        out, mean, rstd = rows.layer_norm(np, x, w, b, normalized_shape=[128], epsilon=1e-5)
    else:
        (out, rstd), mean = rows.rms_norm(np, x, w, normalized_shape=[128], eps=1e-6), None
    grads = rows.normalize_grad(np, x, w, g, mean, rstd, view=(2048, 128), stats=(1,), affine=(1, 128),
                                bias=kind == "layer_norm")
    return (x, w, b, g), (out, *grads)


@pytest.mark.parametrize("kind", ["layer_norm", "rms_norm"])
def test_norm_rows_in_halves_agree_with_float64_and_do_not_depend_on_load(kind):
    results = {}
    for cores in (1, 2):
        previous = blas.set_policy(blas.ThreadPolicy(forced=cores))
        try:
            (x, w, b, g), results[cores] = _norm_results(kind)
        finally:
            blas.set_policy(previous)
    for one, two in zip(results[1], results[2]):   # split over two cores or not: the same bits
        np.testing.assert_array_equal(one, two)
    x64, w64, g64 = (a.astype(np.float64) for a in (x, w, g))
    centred = x64 - x64.mean(-1, keepdims=True) if kind == "layer_norm" else x64
    rstd = 1 / np.sqrt((centred ** 2).mean(-1, keepdims=True) + (1e-5 if kind == "layer_norm" else 1e-6))
    xhat = centred * rstd
    out, dx, dweight, dbias = results[2]
    np.testing.assert_allclose(out, xhat * w64 + (b if kind == "layer_norm" else 0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dweight, (g64 * xhat).sum(0), rtol=1e-4, atol=1e-3)
    if kind == "layer_norm":
        np.testing.assert_allclose(dbias, g64.sum(0), rtol=1e-4, atol=1e-3)
    gw = g64 * w64
    proj = (gw * xhat).mean(-1, keepdims=True)
    want_dx = rstd * (gw - (gw.mean(-1, keepdims=True) if kind == "layer_norm" else 0) - xhat * proj)
    np.testing.assert_allclose(dx, want_dx, rtol=1e-3, atol=1e-4)
