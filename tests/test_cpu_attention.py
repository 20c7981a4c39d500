"""oarlock-cpu's fused attention (oarlock_cpu._gemm's attention_forward / attention_backward, _attention.c)
against oarlock-ops' generic SDPA kernels run in float64: outputs, saved probabilities and the three
gradients, causal and not, grouped-query heads, more or fewer keys than queries, a single query, strided views
(a split of a fused qkv projection), 1 and 2 threads; the op uses it for plain float inputs and hands masks
and dropout to the generic kernel."""

from __future__ import annotations

import math

import numpy as np
import pytest

from oarlock_cpu import attention_kernels, mkl

pytestmark = pytest.mark.skipif(mkl.LIBRARY is None, reason="the mkl wheel is not installed (non-x86-64 Linux)")

from oarlock_ops import attention as generic  # noqa: E402  (the oracle: oarlock-ops' generic kernels)

CASES = [  # B, Sq, Sk, H, Hk, D, Dv, causal
    (2, 100, 100, 4, 4, 16, 16, True), (2, 100, 100, 4, 4, 16, 16, False), (1, 130, 70, 6, 2, 8, 12, True),
    (1, 70, 130, 6, 3, 8, 8, False), (2, 1, 5, 2, 1, 4, 4, True), (1, 200, 200, 2, 2, 32, 32, True),
]


def reference(q, k, v, go, causal):
    q, k, v, go = (x.astype(np.float64) for x in (q, k, v, go))
    out, probs, _ = generic._sdpa(np, q, k, v, is_causal=causal, generator=None)
    grads = generic._sdpa_backward(np, go, q, k, v, out, probs, None, 0.0, None, causal)
    return out, probs, grads


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:-1])) + ("-causal" if c[-1] else ""))
@pytest.mark.parametrize("threads", [1, 2])
def test_against_the_generic_kernel_in_float64(dtype, case, threads):
    b, sq, sk, h, hk, d, dv, causal = case
    rng = np.random.default_rng(sum(case))
    q, k, v = (rng.standard_normal(s).astype(dtype) for s in ((b, sq, h, d), (b, sk, hk, d), (b, sk, hk, dv)))
    go = rng.standard_normal((b, sq, h, dv)).astype(dtype)
    out, probs = mkl._gemm.attention_forward(q, k, v, 1 / math.sqrt(d), causal, threads)
    ref_out, ref_probs, ref_grads = reference(q, k, v, go, causal)
    eps = np.finfo(dtype).eps
    assert out.dtype == probs.dtype == dtype and probs.shape == ref_probs.shape
    np.testing.assert_allclose(probs, ref_probs, atol=16 * eps)
    np.testing.assert_allclose(out, ref_out, atol=64 * eps * np.abs(v).max())
    if causal:   # exactly zero above the diagonal, as the generic backward's skipped blocks assume
        rows, cols = np.indices((sq, sk))
        assert (probs[..., cols > rows] == 0).all()
    grads = mkl._gemm.attention_backward(go, q, k, v, out, probs, 1 / math.sqrt(d), causal, threads)
    for name, got, ref in zip(("dq", "dk", "dv"), grads, ref_grads):
        assert got.dtype == dtype and got.shape == ref.shape and got.flags.c_contiguous
        np.testing.assert_allclose(got, ref, atol=256 * eps * max(1.0, np.abs(ref).max()), err_msg=name)


def test_a_split_of_a_fused_projection_is_read_in_place():
    rng = np.random.default_rng(3)
    qkv = rng.standard_normal((2, 64, 3 * 4 * 16)).astype(np.float32)
    q, k, v = (x.reshape(2, 64, 4, 16) for x in np.split(qkv, 3, axis=-1))
    assert not q.flags.c_contiguous
    out, _ = mkl._gemm.attention_forward(q, k, v, 0.25, True, 2)
    ref_out, _, _ = reference(q, k, v, np.zeros_like(q), True)
    np.testing.assert_allclose(out, ref_out, atol=1e-5)


def test_what_it_does_not_take_goes_to_the_generic_kernel():
    rng = np.random.default_rng(4)
    q = rng.standard_normal((1, 8, 2, 4)).astype(np.float32)
    assert mkl._gemm.attention_forward(q.astype(np.float16), q, q, 0.5, False, 1) is None   # dtype
    assert mkl._gemm.attention_forward(q, q[:, :, :1, :3], q, 0.5, False, 1) is None        # head_dim mismatch
    assert mkl._gemm.attention_forward(q, q[:, :, :, ::-1], q, 0.5, False, 1) is None       # reversed last axis
    mask = np.triu(np.full((8, 8), -np.inf, np.float32), 1)
    out, probs, _ = attention_kernels.sdpa(np, q, q, q, attn_mask=mask, generator=None)      # a mask: generic
    ref, _, _ = generic._sdpa(np, q, q, q, attn_mask=mask, generator=None)
    np.testing.assert_array_equal(out, ref)
    with pytest.raises(ValueError, match="dropout_p"):
        attention_kernels.sdpa(np, q, q, q, dropout_p=1.5, generator=np.random.default_rng(0))
