"""flashmask_attention against a float64 dense reference built straight from the mask table of REFERENCE.md."""

import numpy as np
import pytest

import oarlock
from oarlock_flashmask import kernel

F = oarlock.nn.functional


# -- the dense reference (independent of the plugin) ----------------------------------------------------

def dense_mask(sri, causal, b, hq, sq, sk, window=None):
    """bool [B, Hq, Sq, Sk], True = masked, from the REFERENCE table."""
    rows = np.arange(sq)[:, None]
    cols = np.arange(sk)[None, :]
    masked = np.zeros((b, hq, sq, sk), dtype=bool)
    if sri is not None:
        sri = np.asarray(sri)
        hm, c = sri.shape[1], sri.shape[3]
        if hm != hq:
            sri = np.repeat(sri, hq // hm, axis=1)  # Hm = 1 or Hk: query head h uses mask head h // (Hq // Hm)
        vec = [sri[..., i][:, :, None, :] for i in range(c)]
        if causal and c == 1:
            masked |= rows >= vec[0]
        elif causal and c == 2:
            masked |= (rows >= vec[0]) & (rows < vec[1])
        elif c == 2:
            masked |= (rows >= vec[0]) | (rows < vec[1])
        else:
            masked |= ((rows >= vec[0]) & (rows < vec[1])) | ((rows >= vec[2]) & (rows < vec[3]))
    off = sk - sq
    if causal:
        masked |= cols > rows + off
    if window is not None:
        wl, wr = window
        masked |= (cols < rows + off - wl) | (cols > rows + off + wr)
    return masked


def dense_reference(q, k, v, masked, scale=None, g_out=None):
    """(out, lse, dq, dk, dv) in float64; fully masked rows give out 0, lse -inf, zero gradients."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    b, sq, hq, d = q.shape
    hk = k.shape[2]
    grp = hq // hk
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    kk, vv = np.repeat(k, grp, axis=2), np.repeat(v, grp, axis=2)
    s = np.einsum("bqhd,bkhd->bhqk", q, kk) * scale
    s = np.where(masked, -np.inf, s)
    mx = s.max(-1, keepdims=True)
    mx = np.where(np.isfinite(mx), mx, 0)
    e = np.exp(s - mx)
    tot = e.sum(-1, keepdims=True)
    p = e / np.where(tot == 0, 1, tot)
    with np.errstate(divide="ignore"):
        lse = np.where(tot[..., 0] == 0, -np.inf, np.log(np.where(tot == 0, 1, tot))[..., 0] + mx[..., 0])
    out = np.einsum("bhqk,bkhd->bqhd", p, vv)
    if g_out is None:
        return out, lse
    go = np.asarray(g_out, dtype=np.float64)
    dv = np.einsum("bhqk,bqhd->bkhd", p, go)
    dp = np.einsum("bqhd,bkhd->bhqk", go, vv)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    dq = np.einsum("bhqk,bkhd->bqhd", ds, kk) * scale
    dk = np.einsum("bhqk,bqhd->bkhd", ds, q) * scale
    dk = dk.reshape(b, -1, hk, grp, d).sum(3)
    dv = dv.reshape(b, -1, hk, grp, v.shape[3]).sum(3)
    return out, lse, dq, dk, dv


def rel_err(got, ref):
    got, ref = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    fin = np.isfinite(ref)
    assert np.array_equal(fin, np.isfinite(got)), "non-finite entries differ"
    if not fin.any():
        return 0.0
    return float(np.abs(got[fin] - ref[fin]).max() / max(np.abs(ref[fin]).max(), 1e-30))


# (BLOCK_Q, BLOCK_K, SPAN, SPAN_ELEMS) besides the defaults: tiny tiles (many skipped / partial tiles at small S);
# tiny tiles in runs of two or three tiles, one head per group; runs whose head groups of three split F = 4
# unevenly (and one head per group where G = 2)
TILINGS = {"small": (16, 8, None, None), "runs": (16, 8, 24, 256), "groups": (16, 8, 24, 1152)}


# The fused forward and backward (the backend's flashmask_forward / flashmask_backward: oarlock-cpu's C kernels for
# float32 masks without vectors, plain causal or none) at tiny tiles (FUSED_BLOCK_Q, FUSED_BLOCK_K,
# FUSED_BWD_BLOCK_Q, FUSED_BWD_BLOCK_K): many key blocks, diagonals inside them, blocks that see no key.
FUSED_TILINGS = {"fused_small": (16, 8, 8, 16)}


def _tiling(request, monkeypatch):
    """The tiles of request.param; the TILINGS turn the fused kernels off, so masks without vectors run the
    numpy tiles too."""
    if request.param in TILINGS:
        monkeypatch.setattr(kernel, "_fused_forward", lambda *args: False)
        monkeypatch.setattr(kernel, "_fused_backward", lambda *args: None)
        for name, value in zip(("BLOCK_Q", "BLOCK_K", "SPAN", "SPAN_ELEMS"), TILINGS[request.param]):
            if value is not None:
                monkeypatch.setattr(kernel, name, value)
    elif request.param in FUSED_TILINGS:
        for name, value in zip(("FUSED_BLOCK_Q", "FUSED_BLOCK_K", "FUSED_BWD_BLOCK_Q", "FUSED_BWD_BLOCK_K"),
                               FUSED_TILINGS[request.param]):
            monkeypatch.setattr(kernel, name, value)
    return request.param


@pytest.fixture(params=["default", *TILINGS])
def blocks(request, monkeypatch):
    """Run each case with the default tiles and with the tilings of TILINGS."""
    return _tiling(request, monkeypatch)


@pytest.fixture(params=["default", *TILINGS, *FUSED_TILINGS])
def plain_blocks(request, monkeypatch):
    """blocks, and the fused forward's tiny tiles (for the masks without vectors it takes)."""
    return _tiling(request, monkeypatch)


def run_case(rng, b, sq, sk, hq, hk, d, sri=None, causal=False, window=None, dtype="float32", tol=1e-5,
             window_arg=None, grads=True):
    q = rng.standard_normal((b, sq, hq, d)).astype(np.float32)
    k = rng.standard_normal((b, sk, hk, d)).astype(np.float32)
    v = rng.standard_normal((b, sk, hk, d)).astype(np.float32)
    g = rng.standard_normal((b, sq, hq, d)).astype(np.float32)
    Q, K, V = (oarlock.to_tensor(x).astype(dtype) for x in (q, k, v))
    for t in (Q, K, V):
        t.stop_gradient = False
    if dtype != "float32":  # the reference sees the rounded inputs
        q, k, v = (t.astype("float32").numpy() for t in (Q, K, V))
    S = None if sri is None else oarlock.to_tensor(np.asarray(sri, dtype=np.int32))
    out, lse = F.flashmask_attention(Q, K, V, S, causal=causal, window_size=window_arg, return_softmax_lse=True)
    masked = dense_mask(sri, causal, b, hq, sq, sk, window)
    r_out, r_lse, r_dq, r_dk, r_dv = dense_reference(q, k, v, masked, g_out=g)
    assert out.shape == [b, sq, hq, d] and lse.shape == [b, hq, sq]
    assert str(lse.dtype).endswith("float32")
    assert rel_err(out.astype("float32").numpy(), r_out) <= tol
    assert rel_err(lse.numpy(), r_lse) <= tol
    if grads:
        (out.astype("float32") * oarlock.to_tensor(g)).sum().backward()
        for t, r in ((Q, r_dq), (K, r_dk), (V, r_dv)):
            assert rel_err(t.grad.astype("float32").numpy(), r) <= 3 * tol
    return masked


# -- masks ----------------------------------------------------------------------------------------------

def doc_lts(b, h, s, docs):
    """Causal/bidirectional document vectors: LTS = end of the key's document, UTE = its start."""
    lts = np.zeros(s, np.int32)
    ute = np.zeros(s, np.int32)
    start = 0
    for n in docs:
        lts[start:start + n] = start + n
        ute[start:start + n] = start
        start += n
    return np.broadcast_to(lts, (b, h, s)).copy(), np.broadcast_to(ute, (b, h, s)).copy()


def random_sri(rng, b, hm, sk, sq, kind):
    if kind == "c1":
        j = np.arange(sk)
        return rng.integers(np.minimum(j, sq), sq + 1, size=(b, hm, sk))[..., None].astype(np.int32)
    if kind == "c2_causal":
        lo = rng.integers(0, sq + 1, size=(b, hm, sk))
        hi = rng.integers(lo, sq + 1)
        return np.stack([lo, hi], -1).astype(np.int32)
    if kind == "c2":
        lts = rng.integers(sq // 2, sq + 1, size=(b, hm, sk))
        ute = rng.integers(0, sq // 2 + 1, size=(b, hm, sk))
        return np.stack([lts, ute], -1).astype(np.int32)
    lts = rng.integers(0, sq + 1, size=(b, hm, sk))
    lte = rng.integers(lts, sq + 1)
    uts = rng.integers(0, sq + 1, size=(b, hm, sk))
    ute = rng.integers(uts, sq + 1)
    return np.stack([lts, lte, uts, ute], -1).astype(np.int32)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("d", [32, 64, 128])
def test_plain(plain_blocks, causal, d):
    run_case(np.random.default_rng(d), 2, 37, 37, 2, 2, d, causal=causal)


@pytest.mark.parametrize("kind,causal", [("c1", True), ("c2_causal", True), ("c2", False), ("c4", False)])
@pytest.mark.parametrize("hm", ["1", "hk", "hq"])
def test_random_masks_gqa(blocks, kind, causal, hm):
    rng = np.random.default_rng(len(kind) + len(hm))
    b, s, hq, hk = 2, 45, 4, 2
    nm = {"1": 1, "hk": hk, "hq": hq}[hm]
    run_case(rng, b, s, s, hq, hk, 32, random_sri(rng, b, nm, s, s, kind), causal=causal)


@pytest.mark.parametrize("kind,causal", [("c1", True), ("c2_causal", True), ("c2", False), ("c4", False),
                                         (None, True), (None, False)])
@pytest.mark.parametrize("sq,sk", [(20, 53), (53, 20)])
def test_sq_ne_sk(plain_blocks, kind, causal, sq, sk):
    rng = np.random.default_rng(sq)
    sri = None if kind is None else random_sri(rng, 1, 2, sk, sq, kind)
    run_case(rng, 1, sq, sk, 2, 2, 16, sri, causal=causal)


def test_document_masks_default_blocks():
    rng = np.random.default_rng(3)
    s = 700  # not a multiple of the blocks; several skipped, full and partial tiles
    lts, ute = doc_lts(1, 1, s, [300, 150, 250])
    run_case(rng, 1, s, s, 2, 1, 64, lts[..., None], causal=True)
    run_case(rng, 1, s, s, 2, 1, 64, np.stack([lts, ute], -1), causal=False)
    kernel_mask = kernel._Mask(np, lts[..., None].astype(np.int32), True, -1, -1, 1, s, s, 1, 2, 64, 64)
    assert (kernel_mask.classes == kernel.SKIP).any() and (kernel_mask.classes == kernel.FULL).any()


@pytest.mark.parametrize("window,causal,expect", [(5, True, (5, 0)), ((4, 7), False, (4, 7)), (6, False, (6, 6))])
@pytest.mark.parametrize("sq,sk", [(40, 40), (25, 40)])
def test_window(blocks, window, causal, expect, sq, sk):
    run_case(np.random.default_rng(7), 1, sq, sk, 2, 2, 32, causal=causal, window=expect, window_arg=window)


def test_fully_masked_rows(blocks):
    s = 24
    # non-causal C=2: rows >= 20 masked everywhere (LTS = 20), rows < 2 masked everywhere (UTE = 2)
    sri = np.stack([np.full((1, 1, s), 20), np.full((1, 1, s), 2)], -1).astype(np.int32)
    masked = run_case(np.random.default_rng(1), 1, s, s, 2, 2, 16, sri, causal=False)
    assert masked[0, 0, 21].all() and masked[0, 0, 0].all()
    q = oarlock.to_tensor(np.ones((1, s, 2, 16), np.float32))
    out, lse = F.flashmask_attention(q, q, q, oarlock.to_tensor(sri), return_softmax_lse=True)
    assert (out.numpy()[0, 20:] == 0).all() and np.isneginf(lse.numpy()[0, :, 20:]).all()
    assert np.isfinite(out.numpy()).all()


@pytest.mark.parametrize("dtype,tol", [("bfloat16", 2e-2), ("float16", 2e-3)])
def test_low_precision(dtype, tol):
    rng = np.random.default_rng(11)
    lts, _ = doc_lts(1, 1, 50, [20, 30])
    run_case(rng, 1, 50, 50, 2, 2, 32, lts[..., None], causal=True, dtype=dtype, tol=tol)


# -- the S = 10 examples of REFERENCE.md ---------------------------------------------------------------

T = 10
EXAMPLES = {
    "causal document": (True, [[4, 4, 4, 4, 7, 7, 7, 10, 10, 10]]),
    "sliding window": (True, [[3, 4, 5, 6, 7, 8, 9, 10, 10, 10]]),
    "document bidirectional": (False, [[4, 4, 4, 4, 7, 7, 7, 10, 10, 10], [0, 0, 0, 0, 4, 4, 4, 7, 7, 7]]),
    "shared question": (True, [[10, 10, 10, 10, 7, 7, 7, 10, 10, 10]]),
    "global + sliding window": (False, [[10, 10, 4, 5, 6, 7, 8, 9, 10, 10], [10] * 10,
                                        [0, 0, 0, 0, 2, 2, 2, 2, 2, 2], [0, 0, 0, 0, 3, 4, 5, 6, 7, 8]]),
    "causal blockwise": (True, [[4, 4, 4, 4, 10, 10, 10, 10, 10, 10], [7, 7, 7, 7, 10, 10, 10, 10, 10, 10]]),
    "prefix-LM document": (False, [[3, 3, 3, 5, 5, 10, 10, 10, 10, 10], [0, 0, 2, 3, 3, 5, 5, 7, 8, 9]]),
    "prefix-LM causal": (False, [[10] * 10, [0, 0, 0, 0, 0, 5, 6, 7, 8, 9]]),
    "QK-sparse": (True, [[10, 10, 2, 3, 4, 5, 6, 7, 10, 10], [10, 10, 5, 5, 5, 5, 8, 8, 10, 10]]),
}


def example_sri(cols):
    return np.stack([np.asarray(c, np.int32) for c in cols], -1).reshape(1, 1, T, len(cols))


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_reference_examples(blocks, name):
    causal, cols = EXAMPLES[name]
    run_case(np.random.default_rng(5), 1, T, T, 2, 1, 8, example_sri(cols), causal=causal)


def test_random_eviction_per_head(blocks):
    rng = np.random.default_rng(2)
    evict = rng.integers(np.arange(T), T + 1, size=(1, 3, T)).astype(np.int32)[..., None]
    run_case(rng, 1, T, T, 3, 3, 8, evict, causal=True)


def test_reference_mask_shapes():
    """The reference builder reproduces the intended dense masks of two examples."""
    m = dense_mask(example_sri(EXAMPLES["causal document"][1]), True, 1, 1, T, T)[0, 0]
    allowed = ~m
    assert allowed[5].nonzero()[0].tolist() == [4, 5]
    assert allowed[9].nonzero()[0].tolist() == [7, 8, 9]
    m = dense_mask(example_sri(EXAMPLES["sliding window"][1]), True, 1, 1, T, T)[0, 0]
    assert (~m)[6].nonzero()[0].tolist() == [4, 5, 6]
    m = dense_mask(example_sri(EXAMPLES["prefix-LM causal"][1]), False, 1, 1, T, T)[0, 0]
    assert (~m)[2].nonzero()[0].tolist() == [0, 1, 2, 3, 4]
    assert (~m)[7].nonzero()[0].tolist() == list(range(8))


def test_flashmask_to_densemask():
    for name, (causal, cols) in EXAMPLES.items():
        sri = example_sri(cols)
        got = F.flashmask_to_densemask(oarlock.to_tensor(sri), "float32", causal=causal).numpy()
        ref = np.where(dense_mask(sri, causal, 1, 1, T, T), -np.inf, 0.0)
        np.testing.assert_array_equal(got, ref, err_msg=name)
    assert str(F.flashmask_to_densemask(oarlock.to_tensor(sri), "bfloat16", causal=causal).dtype).endswith("bfloat16")


# -- dropout --------------------------------------------------------------------------------------------

def _qkv(rng, shape_q, shape_k, dtype="float64"):
    return [oarlock.to_tensor(rng.standard_normal(s)).astype(dtype) for s in (shape_q, shape_k, shape_k)]


def test_dropout_reproducible_and_p0(blocks):
    rng = np.random.default_rng(0)
    q, k, v = _qkv(rng, (1, 30, 2, 8), (1, 30, 1, 8), "float32")
    lts, _ = doc_lts(1, 1, 30, [12, 18])
    sri = oarlock.to_tensor(lts[..., None].astype(np.int32))
    a = F.flashmask_attention(q, k, v, sri, causal=True, dropout=0.3, fixed_seed_offset=(7, 3))
    b = F.flashmask_attention(q, k, v, sri, causal=True, dropout=0.3, fixed_seed_offset=(7, 3))
    c = F.flashmask_attention(q, k, v, sri, causal=True, dropout=0.3, fixed_seed_offset=(8, 3))
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert not np.allclose(a.numpy(), c.numpy())
    plain = F.flashmask_attention(q, k, v, sri, causal=True)
    np.testing.assert_array_equal(F.flashmask_attention(q, k, v, sri, causal=True, dropout=0.0).numpy(),
                                  plain.numpy())
    np.testing.assert_array_equal(F.flashmask_attention(q, k, v, sri, causal=True, dropout=0.5,
                                                        training=False).numpy(), plain.numpy())
    out, so = F.flashmask_attention(q, k, v, sri, causal=True, dropout=0.3, return_seed_offset=True)
    again = F.flashmask_attention(q, k, v, sri, causal=True, dropout=0.3, fixed_seed_offset=so)
    np.testing.assert_array_equal(out.numpy(), again.numpy())
    assert so.shape == [2] and "int64" in str(so.dtype)


def test_dropout_rate():
    q = oarlock.to_tensor(np.zeros((1, 64, 1, 4), np.float32))
    v = oarlock.to_tensor(np.ones((1, 64, 1, 4), np.float32))
    out = F.flashmask_attention(q, q, v, dropout=0.25, fixed_seed_offset=(1, 0)).numpy()
    # uniform probabilities: each output is (kept fraction of the row) / 0.75
    assert abs(out.mean() * 0.75 - 0.75) < 0.02


def test_dropout_gradient_matches_finite_differences():
    rng = np.random.default_rng(4)
    q, k, v = _qkv(rng, (1, 9, 2, 4), (1, 9, 1, 4))
    g = rng.standard_normal((1, 9, 2, 4))
    sri = oarlock.to_tensor(np.array([4, 4, 4, 4, 7, 7, 7, 9, 9], np.int32).reshape(1, 1, 9, 1))

    def loss(*xs):
        out = F.flashmask_attention(*xs, sri, causal=True, dropout=0.4, fixed_seed_offset=(123, 5))
        return float((out.numpy() * g).sum())
    ts = [x.detach() for x in (q, k, v)]
    for t in ts:
        t.stop_gradient = False
    out = F.flashmask_attention(*ts, sri, causal=True, dropout=0.4, fixed_seed_offset=(123, 5))
    (out * oarlock.to_tensor(g)).sum().backward()
    eps = 1e-6
    for i, t in enumerate(ts):
        base = t.numpy().copy()
        num = np.zeros_like(base)
        for idx in np.ndindex(base.shape):
            for sign in (1, -1):
                x = base.copy()
                x[idx] += sign * eps
                args = [oarlock.to_tensor(x) if m == i else ts[m].detach() for m in range(3)]
                num[idx] += sign * loss(*args) / (2 * eps)
        np.testing.assert_allclose(t.grad.numpy(), num, rtol=1e-5, atol=1e-7)


def test_lse_gradient():
    rng = np.random.default_rng(9)
    q, k, v = _qkv(rng, (1, 6, 1, 3), (1, 6, 1, 3))
    for t in (q, k, v):
        t.stop_gradient = False
    _, lse = F.flashmask_attention(q, k, v, causal=True, return_softmax_lse=True)
    lse.sum().backward()
    s = np.einsum("qd,kd->qk", q.numpy()[0, :, 0], k.numpy()[0, :, 0]) / np.sqrt(3)
    s = np.where(np.triu(np.ones((6, 6), bool), 1), -np.inf, s)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    np.testing.assert_allclose(q.grad.numpy()[0, :, 0], p @ k.numpy()[0, :, 0] / np.sqrt(3), rtol=1e-9)


# -- errors ---------------------------------------------------------------------------------------------

def _err_case(**over):
    rng = np.random.default_rng(0)
    args = dict(q=(1, 8, 4, 8), k=(1, 8, 2, 8), v=(1, 8, 2, 8))
    args.update({n: over.pop(n) for n in list(over) if n in "qkv"})
    q, k, v = (oarlock.to_tensor(rng.standard_normal(args[n]).astype(np.float32)) for n in "qkv")
    return q, k, v


@pytest.mark.parametrize("sri,causal,match", [
    (np.zeros((1, 1, 8, 1), np.int64), True, "int32"),
    (np.zeros((1, 8, 1), np.int32), True, "4-D"),
    (np.zeros((1, 1, 8, 3), np.int32), True, "C = 3"),
    (np.zeros((1, 1, 8, 4), np.int32), True, "C = 4"),
    (np.zeros((1, 3, 8, 1), np.int32), True, "3 heads"),
    (np.zeros((1, 1, 9, 1), np.int32), True, "seq_len 9"),
    (np.full((1, 1, 8, 1), 9, np.int32), True, r"accepted: values in \[0, 8\]"),
    (np.full((1, 1, 8, 1), -1, np.int32), True, "values in"),
    (np.stack([np.full((1, 1, 8), 5), np.full((1, 1, 8), 3)], -1).astype(np.int32), True, "LTS > LTE"),
    (np.stack([np.full((1, 1, 8), 5), np.full((1, 1, 8), 3)] * 2, -1).astype(np.int32), False, "LTS > LTE"),
    (np.stack([np.full((1, 1, 8), 3), np.full((1, 1, 8), 5), np.full((1, 1, 8), 5), np.full((1, 1, 8), 3)],
              -1).astype(np.int32), False, "UTS > UTE"),
    (np.zeros((2, 1, 8, 1), np.int32), True, "batch"),
])
def test_bad_startend_row_indices(sri, causal, match):
    q, k, v = _err_case()
    with pytest.raises((ValueError, TypeError), match=match) as info:
        F.flashmask_attention(q, k, v, oarlock.to_tensor(sri), causal=causal)
    assert "startend_row_indices" in str(info.value) and "flashmask_attention" in str(info.value)


def test_bad_inputs():
    q, k, v = _err_case()
    with pytest.raises(ValueError, match="not both"):
        F.flashmask_attention(q, k, v, oarlock.to_tensor(np.zeros((1, 1, 8, 1), np.int32)), causal=True,
                              window_size=2)
    with pytest.raises(ValueError, match="multiple"):
        F.flashmask_attention(*_err_case(q=(1, 8, 3, 8)))
    with pytest.raises(ValueError, match="head_dim"):
        F.flashmask_attention(*_err_case(k=(1, 8, 2, 4)))
    with pytest.raises(ValueError, match="batch"):
        F.flashmask_attention(*_err_case(k=(2, 8, 2, 8), v=(2, 8, 2, 8)))
    with pytest.raises((ValueError, TypeError), match="float"):
        F.flashmask_attention(*(oarlock.to_tensor(np.zeros((1, 4, 1, 2), np.int32)),) * 3)
    with pytest.raises(ValueError, match="'block_mask' was given without startend_row_indices"):
        F.flashmask_attention(q, k, v, block_mask=q)
    with pytest.raises(ValueError, match="window_size"):
        F.flashmask_attention(q, k, v, window_size="x")
