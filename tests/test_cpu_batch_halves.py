"""oarlock_cpu.attention: scaled_dot_product_attention over the two halves of a batch gives the generic
kernel's results (bits, for these inputs), forward and backward, and the op still agrees with PyTorch."""

from __future__ import annotations

import numpy as np
import pytest

import oarlock
from oarlock_cpu import attention, blas
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
