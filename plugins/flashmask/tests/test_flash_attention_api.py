"""oarlock.nn.functional.flash_attention (Paddle 3.2's module) and FlashMask V2's block_mask: values and gradients
against PyTorch's scaled_dot_product_attention (per sequence for the variable-length functions), a float64 numpy
dense reference for block_mask and lse, and Paddle's own CPU results where Paddle runs them on the CPU."""

from __future__ import annotations

import numpy as np
import pytest

import oarlock
import oarlock.nn.functional as F
import oarlock.nn.functional.flash_attention as fa
from oarlock_flashmask import kernel

RNG = np.random.default_rng(3)


def _tensors(*arrays):
    return [oarlock.to_tensor(a, stop_gradient=False) for a in arrays]


def _torch_attention(torch, q, k, v, causal=False, visible=None):
    """torch SDPA over [S, H, D] or [B, S, H, D] float64 arrays (key heads repeated for grouped queries); causal
    aligns bottom-right; `visible` a bool [.., Sq, Sk] mask. Returns (out in the input layout, leaf tensors)."""
    batched = q.ndim == 4
    qt, kt, vt = (torch.tensor(a if batched else a[None], requires_grad=True) for a in (q, k, v))
    g = q.shape[-2] // k.shape[-2]
    qh = qt.transpose(1, 2)
    kh, vh = (t.transpose(1, 2).repeat_interleave(g, 1) for t in (kt, vt))
    sq, sk = qh.shape[2], kh.shape[2]
    mask = None
    if causal:
        mask = torch.ones(sq, sk, dtype=torch.bool).tril(sk - sq)
    if visible is not None:
        mask = torch.tensor(visible) if mask is None else mask & torch.tensor(visible)
    s = qh @ kh.transpose(-1, -2) / np.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, -float("inf"))
    p = torch.nan_to_num(torch.softmax(s, -1), 0.0)  # rows that see nothing give 0, as flash attention does
    out = (p @ vh).transpose(1, 2)
    return (out if batched else out[0]), (qt, kt, vt), p


def _grads_close(ours, leaves, up, torch_out, tol=1e-10):
    torch_out.backward(up)
    for t, leaf in zip(ours, leaves):
        theirs = leaf.grad.numpy().reshape(t.grad.shape)
        np.testing.assert_allclose(t.grad.numpy(), theirs, rtol=tol, atol=tol)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sq,sk,hq,hk", [(7, 7, 2, 2), (6, 11, 4, 2), (9, 5, 3, 1)])
def test_flash_attention_matches_torch(torch, sq, sk, hq, hk, causal):
    q, k, v = (RNG.standard_normal((2, s, h, 8)) for s, h in ((sq, hq), (sk, hk), (sk, hk)))
    tq, tk, tv = _tensors(q, k, v)
    out, softmax = fa.flash_attention(tq, tk, tv, causal=causal, return_softmax=True)
    ref, leaves, probs = _torch_attention(torch, q, k, v, causal)
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(softmax.numpy(), probs.detach().numpy(), rtol=1e-12, atol=1e-12)
    up = RNG.standard_normal(out.shape)
    (out * oarlock.to_tensor(up)).sum().backward()
    _grads_close((tq, tk, tv), leaves, torch.tensor(up), ref)
    assert fa.flash_attention(tq, tk, tv, causal=causal)[1] is None


def test_flash_attn_qkvpacked_is_flash_attention_of_the_parts():
    qkv = RNG.standard_normal((2, 5, 4, 2, 8))  # 2 query slots per key head + key + value, 2 key heads
    out, _ = fa.flash_attn_qkvpacked(oarlock.to_tensor(qkv), causal=True)
    q = qkv[:, :, :2].reshape(2, 5, 4, 8)
    ref, _ = fa.flash_attention(*(oarlock.to_tensor(a) for a in (q, qkv[:, :, 2], qkv[:, :, 3])), causal=True)
    np.testing.assert_array_equal(out.numpy(), ref.numpy())


def _packed(lengths_q, lengths_k, hq=4, hk=2, d=8):
    cu_q, cu_k = (np.concatenate([[0], np.cumsum(n)]).astype(np.int32) for n in (lengths_q, lengths_k))
    q = RNG.standard_normal((int(cu_q[-1]), hq, d))
    k, v = (RNG.standard_normal((int(cu_k[-1]), hk, d)) for _ in range(2))
    return q, k, v, cu_q, cu_k


def _per_sequence(torch, q, k, v, cu_q, cu_k, causal, visible=None):
    outs, leaves = [], []
    for b in range(len(cu_q) - 1):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        out, leaf, _ = _torch_attention(torch, q[qs], k[ks], v[ks], causal, None if visible is None else visible[b])
        outs.append(out)
        leaves.append(leaf)
    return torch.cat(outs), leaves


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attn_unpadded_matches_torch_per_sequence(torch, causal):
    q, k, v, cu_q, cu_k = _packed([3, 6, 1, 5], [4, 6, 3, 2])  # Lq < Lk, =, <, > : bottom-right causal each
    tq, tk, tv = _tensors(q, k, v)
    out, softmax = fa.flash_attn_unpadded(tq, tk, tv, oarlock.to_tensor(cu_q), oarlock.to_tensor(cu_k), 6, 6,
                                          8 ** -0.5, causal=causal, return_softmax=True)
    ref, leaves = _per_sequence(torch, q, k, v, cu_q, cu_k, causal)
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-12, atol=1e-12)
    assert softmax.shape == [4, 4, 6, 6]
    np.testing.assert_allclose(softmax.numpy().sum(-1)[1, :, :6], 1.0, rtol=1e-12)  # sequence 1 fills 6 x 6
    up = RNG.standard_normal(out.shape)
    (out * oarlock.to_tensor(up)).sum().backward()
    ref.backward(torch.tensor(up))
    grads = {name: np.concatenate([leaf[i].grad.numpy()[0] for leaf in leaves]) for i, name in enumerate("qkv")}
    for t, name in zip((tq, tk, tv), "qkv"):
        np.testing.assert_allclose(t.grad.numpy(), grads[name], rtol=1e-10, atol=1e-10)


def test_flash_attn_varlen_func_lse_window_and_seqused(torch):
    q, k, v, cu_q, cu_k = _packed([5, 7, 4], [5, 9, 6])
    used_k = np.array([5, 6, 2], dtype=np.int32)  # only the first seqused_k keys of each sequence
    window = (2, 1)
    tq, tk, tv = _tensors(q, k, v)
    out, lse = fa.flash_attn_varlen_func(tq, tk, tv, oarlock.to_tensor(cu_q), oarlock.to_tensor(cu_k), 7, 9,
                                         seqused_k=oarlock.to_tensor(used_k), causal=True, window_size=window)
    assert lse.shape == [4, int(cu_q[-1])]
    visible, lse_ref = [], np.full((4, int(cu_q[-1])), -np.inf)
    for b in range(3):
        lq, lk = cu_q[b + 1] - cu_q[b], cu_k[b + 1] - cu_k[b]
        i, j = np.arange(lq)[:, None], np.arange(lk)[None, :]
        off = used_k[b] - lq  # the alignment uses the keys in use
        vis = (j <= i + off) & (j >= i + off - window[0]) & (j < used_k[b])
        visible.append(vis)
        kk = np.repeat(k[cu_k[b]:cu_k[b + 1]], 2, axis=1)
        s = np.einsum("qhd,khd->hqk", q[cu_q[b]:cu_q[b + 1]], kk) / np.sqrt(8)
        s = np.where(vis[None], s, -np.inf)
        mx = s.max(-1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            lse_b = np.log(np.exp(s - np.where(np.isfinite(mx), mx, 0)).sum(-1)) + np.where(np.isfinite(mx), mx, 0)[
                ..., 0]
        lse_ref[:, cu_q[b]:cu_q[b + 1]] = lse_b
    np.testing.assert_allclose(lse.numpy(), lse_ref, rtol=1e-12, atol=1e-12)
    ref, leaves = _per_sequence(torch, q, k, v, cu_q, cu_k, False, visible)
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-12, atol=1e-12)
    up = RNG.standard_normal(out.shape)
    (out * oarlock.to_tensor(up)).sum().backward()
    ref.backward(torch.tensor(up))
    dq = np.concatenate([leaf[0].grad.numpy()[0] for leaf in leaves])
    np.testing.assert_allclose(tq.grad.numpy(), dq, rtol=1e-10, atol=1e-10)
    fa3 = fa.flash_attention_v3_varlen(tq, tk, tv, oarlock.to_tensor(cu_q), oarlock.to_tensor(cu_k), 7, 9,
                                       seqused_k=oarlock.to_tensor(used_k), causal=True, window_size=window)[0]
    np.testing.assert_array_equal(fa3.numpy(), out.numpy())


def test_flash_attn_varlen_qkvpacked_padded_layout(torch):
    lengths, max_len = [3, 5, 2], 5
    qkv = RNG.standard_normal((3 * max_len, 3, 2, 8))   # sequence b at rows b * 5 .. b * 5 + len - 1
    cu = oarlock.to_tensor(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    out, _ = fa.flash_attn_varlen_qkvpacked(oarlock.to_tensor(qkv), cu, cu, max_len, max_len, 8 ** -0.5, causal=True)
    for b, n in enumerate(lengths):
        rows = slice(b * max_len, b * max_len + n)
        ref, _, _ = _torch_attention(torch, qkv[rows, 0], qkv[rows, 1], qkv[rows, 2], causal=True)
        np.testing.assert_allclose(out.numpy()[rows], ref.detach().numpy(), rtol=1e-12, atol=1e-12)
        assert not out.numpy()[b * max_len + n:(b + 1) * max_len].any()  # padding rows are zero


def test_scaled_dot_product_attention_and_reduced_scores(torch):
    q, k, v = (RNG.standard_normal((2, 6, 2, 8)) for _ in range(3))
    out = fa.scaled_dot_product_attention(*(oarlock.to_tensor(a) for a in (q, k, v)), is_causal=True)
    ref, _, probs = _torch_attention(torch, q, k, v, causal=True)
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-12, atol=1e-12)
    _, lse = F.flashmask_attention(*(oarlock.to_tensor(a) for a in (q, k, v)), return_softmax_lse=True)
    reduced = fa.calc_reduced_attention_scores(oarlock.to_tensor(q), oarlock.to_tensor(k), lse)
    _, _, full = _torch_attention(torch, q, k, v)
    np.testing.assert_allclose(reduced.numpy(), full.detach().numpy().sum(2, keepdims=True), rtol=1e-5, atol=1e-6)
    with fa.sdp_kernel(enable_math=True, enable_flash=False):
        again = fa.scaled_dot_product_attention(*(oarlock.to_tensor(a) for a in (q, k, v)), is_causal=True)
    np.testing.assert_array_equal(again.numpy(), out.numpy())


def test_matches_paddle_cpu(paddle):
    """Paddle runs flash_attention on the CPU through its math path (scale head_dim ** -0.5; non-causal only: its
    causal CPU path needs a GPU-only fused softmax), and scaled_dot_product_attention with an additive mask."""
    q, k, v = (RNG.standard_normal((2, 9, 2, 16)).astype(np.float32) for _ in range(3))
    ours_in, theirs_in = _tensors(q, k, v), [paddle.to_tensor(a, stop_gradient=False) for a in (q, k, v)]
    ours, our_sm = fa.flash_attention(*ours_in, return_softmax=True)
    theirs, their_sm = paddle.nn.functional.flash_attention.flash_attention(*theirs_in, return_softmax=True)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(our_sm.numpy(), their_sm.numpy(), rtol=1e-5, atol=1e-6)
    up = RNG.standard_normal(ours.shape).astype(np.float32)
    (ours * oarlock.to_tensor(up)).sum().backward()
    (theirs * paddle.to_tensor(up)).sum().backward()
    for a, b in zip(ours_in, theirs_in):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-4, atol=1e-5)
    mask = RNG.standard_normal((2, 2, 9, 9)).astype(np.float32)
    ours = fa.scaled_dot_product_attention(*(oarlock.to_tensor(a) for a in (q, k, v)), oarlock.to_tensor(mask))
    theirs = paddle.nn.functional.flash_attention.scaled_dot_product_attention(
        *(paddle.to_tensor(a) for a in (q, k, v)), paddle.to_tensor(mask))
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-6)


def test_paddle_module_path_under_the_alias():
    """`import paddle.nn.functional.flash_attention` (Paddle's module path) gives this module under the alias."""
    with oarlock.compat.paddle_alias():
        import paddle.nn.functional.flash_attention as aliased
        from paddle.nn.functional.flash_attention import flash_attn_unpadded
    assert aliased is fa and flash_attn_unpadded is fa.flash_attn_unpadded


# -- FlashMask V2's block_mask -------------------------------------------------------------------------------

def _block_case(b, sq, sk, hq, hk, hm, causal, seed):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((b, s, h, 8)) for s, h in ((sq, hq), (sk, hk), (sk, hk)))
    lts = rng.integers(sq // 2, sq + 1, size=(b, hm, sk))
    other = rng.integers(lts, sq + 1) if causal else rng.integers(0, sq // 4 + 1, size=(b, hm, sk))
    sri = np.stack([lts, other], -1).astype(np.int32)
    bm = rng.integers(0, 2, size=(b, hm, -(-sq // 128), -(-sk // 128))).astype(np.int32)
    bm[0, 0, 0, 0] = 1
    rows, cols = np.arange(sq)[:, None], np.arange(sk)[None, :]
    srih, bmh = np.repeat(sri, hq // hm, axis=1), np.repeat(bm, hq // hm, axis=1)
    lo, hi = srih[..., 0][:, :, None, :], srih[..., 1][:, :, None, :]
    masked = ((rows >= lo) & (rows < hi)) if causal else ((rows >= lo) | (rows < hi))
    if causal:
        masked |= cols > rows + (sk - sq)
    masked |= bmh[:, :, rows[:, 0] // 128][:, :, :, cols[0] // 128] == 0
    return q, k, v, sri, bm, masked


@pytest.fixture(params=["default", "unaligned"])
def tiling(request, monkeypatch):
    """The kernel's own tiles (128 x 128, aligned with block_mask's) and tiles that straddle its blocks."""
    if request.param == "unaligned":
        monkeypatch.setattr(kernel, "BLOCK_Q", 48)
        monkeypatch.setattr(kernel, "BLOCK_K", 80)
    return request.param


@pytest.mark.parametrize("causal,hm", [(True, 2), (False, 1), (False, 4)])
def test_block_mask_matches_dense_reference(torch, tiling, causal, hm):
    q, k, v, sri, bm, masked = _block_case(2, 300, 260, 4, 2, hm, causal, seed=hm + 10 * causal)
    tq, tk, tv = _tensors(q, k, v)
    out, lse = F.flashmask_attention(tq, tk, tv, oarlock.to_tensor(sri), causal=causal, return_softmax_lse=True,
                                     block_mask=oarlock.to_tensor(bm))
    ref, leaves, probs = _torch_attention(torch, q, k, v, visible=~masked)
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-11, atol=1e-11)
    s = np.where(masked, -np.inf, np.einsum("bqhd,bkhd->bhqk", q, np.repeat(k, 2, axis=2)) / np.sqrt(8))
    with np.errstate(divide="ignore"):
        lse_ref = np.log(np.exp(s).sum(-1))
    np.testing.assert_allclose(lse.numpy(), lse_ref, rtol=1e-11, atol=1e-11)
    up = RNG.standard_normal(out.shape)
    (out * oarlock.to_tensor(up)).sum().backward()
    _grads_close((tq, tk, tv), leaves, torch.tensor(up), ref, tol=1e-9)


def test_block_mask_of_zeros_masks_everything_and_ones_change_nothing():
    q, k, v, sri, bm, _ = _block_case(1, 130, 140, 2, 2, 1, False, seed=5)
    args = [oarlock.to_tensor(a) for a in (q, k, v, sri)]
    zeros = F.flashmask_attention(*args, block_mask=oarlock.to_tensor(np.zeros_like(bm)))
    assert not zeros.numpy().any()
    ones = F.flashmask_attention(*args, block_mask=oarlock.to_tensor(np.full_like(bm, 7)))
    np.testing.assert_array_equal(ones.numpy(), F.flashmask_attention(*args).numpy())


def test_bad_arguments_are_named():
    q, k, v, sri, bm, _ = _block_case(1, 20, 20, 2, 2, 1, True, seed=1)
    args = [oarlock.to_tensor(a) for a in (q, k, v, sri)]
    with pytest.raises(ValueError, match=r"'block_mask' has shape \[1, 1, 2, 1\]; accepted: \[1, 1, 1, 1\]"):
        F.flashmask_attention(*args, causal=True, block_mask=oarlock.to_tensor(np.ones((1, 1, 2, 1), np.int32)))
    with pytest.raises(TypeError, match="'block_mask' has dtype int64; accepted: int32"):
        F.flashmask_attention(*args, causal=True, block_mask=oarlock.to_tensor(bm.astype(np.int64)))
    q3, k3, v3, cu, _ = _packed([3, 4], [3, 4])
    t = [oarlock.to_tensor(a) for a in (q3, k3, v3)]
    with pytest.raises(ValueError, match=r"flash_attn_unpadded\(\): a sequence of 4 tokens .* longer than "
                                         r"max_seqlen 3"):
        fa.flash_attn_unpadded(*t, oarlock.to_tensor(cu), oarlock.to_tensor(cu), 3, 4, 0.5)
    with pytest.raises(ValueError, match=r"flash_attn_varlen_func\(\): argument 'cu_seqlens_q' = \[0, 5, 3\]"):
        fa.flash_attn_varlen_func(*t, oarlock.to_tensor(np.array([0, 5, 3], np.int32)), oarlock.to_tensor(cu), 5, 5)
    with pytest.raises(NotImplementedError, match="'softcap' = 1.0"):
        fa.flash_attn_varlen_func(*t, oarlock.to_tensor(cu), oarlock.to_tensor(cu), 4, 4, softcap=1.0)
    with pytest.raises(ValueError, match=r"flash_attention\(\): argument 'query' is shape \[7, 4, 8\]"):
        fa.flash_attention(*t)


def test_varlen_dropout_is_seeded_and_off_outside_training():
    q, k, v, cu_q, cu_k = _packed([4, 6], [4, 6])
    args = [oarlock.to_tensor(a) for a in (q, k, v, cu_q, cu_k)] + [6, 6, 8 ** -0.5]
    seed = oarlock.to_tensor(np.array([7, 3], dtype=np.int64))
    first, _ = fa.flash_attn_unpadded(*args, dropout=0.4, fixed_seed_offset=seed)
    again, _ = fa.flash_attn_unpadded(*args, dropout=0.4, fixed_seed_offset=seed)
    plain, _ = fa.flash_attn_unpadded(*args)
    np.testing.assert_array_equal(first.numpy(), again.numpy())
    assert np.abs(first.numpy() - plain.numpy()).max() > 1e-3
    evaluated, _ = fa.flash_attn_unpadded(*args, dropout=0.4, training=False)
    np.testing.assert_array_equal(evaluated.numpy(), plain.numpy())
