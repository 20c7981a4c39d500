"""oarlock-flashmask: flashmask_attention_op (forward), flashmask_attention_grad (backward) and
flashmask_to_densemask, checked against a float64 dense reference built from the mask table of REFERENCE.md
(plugins/flashmask/tests/test_flashmask_op.py has the full matrix)."""

import numpy as np

from op_specs.base import INTS, OpSpec, library_op


def _mask(sri, causal, hq, sq, sk):
    rows, cols = np.arange(sq)[:, None], np.arange(sk)[None, :]
    masked = np.zeros((sri.shape[0], hq, sq, sk), dtype=bool)
    sri = np.repeat(sri, hq // sri.shape[1], axis=1)
    vec = [sri[..., i][:, :, None, :] for i in range(sri.shape[3])]
    if causal and len(vec) == 1:
        masked |= rows >= vec[0]
    elif causal:
        masked |= (rows >= vec[0]) & (rows < vec[1])
    elif len(vec) == 2:
        masked |= (rows >= vec[0]) | (rows < vec[1])
    else:
        masked |= ((rows >= vec[0]) & (rows < vec[1])) | ((rows >= vec[2]) & (rows < vec[3]))
    if causal:
        masked |= cols > rows + (sk - sq)
    return masked


def _reference(q, k, v, masked, go):
    b, sq, hq, d = q.shape
    hk = k.shape[2]
    g = hq // hk
    kk, vv = np.repeat(k, g, axis=2), np.repeat(v, g, axis=2)
    s = np.where(masked, -np.inf, np.einsum("bqhd,bkhd->bhqk", q, kk) / np.sqrt(d))
    mx = s.max(-1, keepdims=True)
    mx = np.where(np.isfinite(mx), mx, 0)
    e = np.exp(s - mx)
    tot = e.sum(-1, keepdims=True)
    p = e / np.where(tot == 0, 1, tot)
    lse = np.where(tot[..., 0] == 0, -np.inf, np.log(np.where(tot == 0, 1, tot))[..., 0] + mx[..., 0])
    out = np.einsum("bhqk,bkhd->bqhd", p, vv)
    dp = np.einsum("bqhd,bkhd->bhqk", go, vv)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    dq = np.einsum("bhqk,bkhd->bqhd", ds, kk) / np.sqrt(d)
    dk = (np.einsum("bhqk,bqhd->bkhd", ds, q) / np.sqrt(d)).reshape(b, -1, hk, g, d).sum(3)
    dv = np.einsum("bhqk,bqhd->bkhd", p, go).reshape(b, -1, hk, g, d).sum(3)
    return out, lse, dq, dk, dv


def _case(seed):
    rng = np.random.default_rng(seed)
    b, sq, sk, hq, hk, d = 2, 19, 23, 4, 2, 8
    q, go = rng.standard_normal((2, b, sq, hq, d))
    k, v = rng.standard_normal((2, b, sk, hk, d))
    lts = rng.integers(0, sq + 1, size=(b, hk, sk))
    sri = np.stack([lts, rng.integers(lts, sq + 1)], -1).astype(np.int32)  # C=2 causal, Hm = Hk
    return q, k, v, go, sri


def _close(got, ref, tol):
    got = np.asarray(got, dtype=np.float64)
    fin = np.isfinite(ref)
    assert np.array_equal(fin, np.isfinite(got))
    assert np.abs(got[fin] - ref[fin]).max() <= tol * max(np.abs(ref[fin]).max(), 1.0)


def _check_forward(oarlock):
    q, k, v, go, sri = _case(0)
    ref = _reference(q, k, v, _mask(sri, True, 4, 19, 23), go)
    for dtype, tol in (("float32", 1e-5), ("float64", 1e-12), ("bfloat16", 3e-2)):
        Q, K, V = (oarlock.to_tensor(x).astype(dtype) for x in (q, k, v))
        out, lse, seed = library_op("flashmask_attention_op")(Q, K, V, oarlock.to_tensor(sri), causal=True)
        assert out.dtype == Q.dtype and out.shape == [2, 19, 4, 8] and lse.shape == [2, 4, 19]
        if dtype != "bfloat16":
            _close(out.numpy(), ref[0], tol)
            _close(lse.numpy(), ref[1], tol)
        else:
            _close(out.astype("float32").numpy(), ref[0], tol)
    Qi = oarlock.to_tensor(q.astype(np.int32))
    try:
        library_op("flashmask_attention_op")(Qi, Qi, Qi)
    except (TypeError, ValueError) as e:
        assert "float" in str(e)
    else:
        raise AssertionError("integer inputs were accepted")


def _check_backward(oarlock):
    q, k, v, go, sri = _case(1)
    _, _, dq, dk, dv = _reference(q, k, v, _mask(sri, True, 4, 19, 23), go)
    F = oarlock.nn.functional
    Q, K, V, G = (oarlock.to_tensor(x.astype(np.float32)) for x in (q, k, v, go))
    S = oarlock.to_tensor(sri)
    out, lse, _ = library_op("flashmask_attention_op")(Q, K, V, S, causal=True)
    grads = library_op("flashmask_attention_grad")(G, Q, K, V, out, lse, S, causal=True)
    for got, ref in zip(grads, (dq, dk, dv)):
        _close(got.numpy(), ref, 3e-5)
    for t in (Q, K, V):  # the autograd rule reaches the same op
        t.stop_gradient = False
    (F.flashmask_attention(Q, K, V, S, causal=True) * G).sum().backward()
    for t, ref in zip((Q, K, V), (dq, dk, dv)):
        _close(t.grad.numpy(), ref, 3e-5)


def _check_densemask(oarlock):
    _, _, _, _, sri = _case(2)
    for causal in (True, False):
        s4 = np.concatenate([sri, sri], -1)[:, :, :19] if not causal else sri[:, :, :19]
        s4 = np.minimum(s4, 19).astype(np.int32)
        got = oarlock.nn.functional.flashmask_to_densemask(oarlock.to_tensor(s4), "float32", causal=causal)
        want = np.where(_mask(s4, causal, s4.shape[1], 19, 19), -np.inf, 0.0)
        np.testing.assert_array_equal(got.numpy(), want)


def _check_block(oarlock):
    """FlashMask V2's block_mask: 128 x 128 blocks of a 260 x 300 score matrix masked on top of the vectors."""
    rng = np.random.default_rng(4)
    b, sq, sk, hq, hk, d = 1, 260, 300, 2, 1, 8
    q, go = rng.standard_normal((2, b, sq, hq, d))
    k, v = rng.standard_normal((2, b, sk, hk, d))
    lts = rng.integers(sq // 2, sq + 1, size=(b, 1, sk))
    sri = np.stack([lts, rng.integers(lts, sq + 1)], -1).astype(np.int32)
    bm = np.array([[[[1, 0, 1], [1, 1, 0], [0, 1, 1]]]], dtype=np.int32)  # [1, 1, ceil(260/128), ceil(300/128)]
    masked = _mask(sri, True, hq, sq, sk) | (bm[:, :, np.arange(sq) // 128][:, :, :, np.arange(sk) // 128] == 0)
    ref = _reference(q, k, v, masked, go)
    Q, K, V, G = (oarlock.to_tensor(x) for x in (q, k, v, go))
    S, M = oarlock.to_tensor(sri), oarlock.to_tensor(bm)
    out, lse, _ = library_op("flashmask_block_attention_op")(Q, K, V, S, M, causal=True)
    grads = library_op("flashmask_block_attention_grad")(G, Q, K, V, out, lse, S, M, causal=True)
    for got, want in zip((out, lse) + tuple(grads), ref):
        _close(got.numpy(), want, 1e-11)


SPECS = [
    OpSpec("flashmask_attention_op", [], check=_check_forward),
    OpSpec("flashmask_block_attention_op", [], check=_check_block),
    OpSpec("flashmask_block_attention_grad", [], check=_check_block, grad=False),
    OpSpec("flashmask_attention_grad", [], check=_check_backward, grad=False),
    OpSpec("flashmask_to_densemask", [], dtypes=INTS, check=_check_densemask, grad=False),
]
