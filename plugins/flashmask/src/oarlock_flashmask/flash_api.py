"""oarlock.nn.functional.flash_attention: the functions of Paddle 3.2's paddle/nn/functional/flash_attention.py,
with Paddle's signatures and [batch, seq_len, num_heads, head_dim] layout, on the FlashMask CPU kernel's tiling
(each is flashmask_attention with a mask that describes it, so forward and backward are the kernel's):

- flash_attention / flash_attn_qkvpacked: dense attention, causal bottom-right aligned when seq_len_q != seq_len_k
  (FlashAttention 2's rule); returns (out, softmax or None).
- flash_attn_unpadded / flash_attn_varlen_qkvpacked (FlashAttention 2's varlen) and flash_attn_varlen_func /
  flash_attention_v3_varlen (FlashAttention 3's): packed sequences given by cu_seqlens_q / cu_seqlens_k
  (oarlock_flashmask.varlen), forward and backward. The v3 form returns (out, softmax_lse [num_heads, total_q]).
- flashmask_attention (with FlashMask V2's block_mask) and scaled_dot_product_attention (the attention op
  family's), reachable here as in Paddle; calc_reduced_attention_scores; sdp_kernel.

The softmax that return_softmax=True gives is the attention probabilities [batch, num_heads, seq_len_q,
seq_len_k] (varlen: [num_seqs, num_heads, max_seqlen_q, max_seqlen_k], zero past each sequence), before dropout:
Paddle's CUDA kernel returns them with dropout's sign encoding, its CPU path after dropout.
"""

from __future__ import annotations

import contextlib

import numpy as np

import oarlock

NAMESPACE = "oarlock.nn.functional.flash_attention"


def _F():
    return oarlock.nn.functional


def _check_4d(fn, **tensors):
    for arg, t in tensors.items():
        if not isinstance(t, oarlock.Tensor) or t.ndim != 4:
            got = f"shape {list(t.shape)}" if isinstance(t, oarlock.Tensor) else f"a {type(t).__name__}"
            raise ValueError(f"{fn}(): argument '{arg}' is {got}; accepted: a 4-D [batch, seq_len, num_heads, "
                             f"head_dim] Tensor")


def _check_3d(fn, **tensors):
    for arg, t in tensors.items():
        if not isinstance(t, oarlock.Tensor) or t.ndim != 3:
            got = f"shape {list(t.shape)}" if isinstance(t, oarlock.Tensor) else f"a {type(t).__name__}"
            raise ValueError(f"{fn}(): argument '{arg}' is {got}; accepted: a 3-D [total_seq_len, num_heads, "
                             f"head_dim] Tensor")


def _probabilities(query, key, lse, scale, visible):
    """softmax(scale * Q K^T) [B, Hq, Sq, Sk] from lse [B, Hq, Sq]: exp(s - lse) where `visible` (a bool numpy
    array broadcastable to [B, Hq, Sq, Sk]), 0 elsewhere (and in rows that saw no key)."""
    hq, hk = query.shape[2], key.shape[2]
    q = oarlock.transpose(query, [0, 2, 1, 3])
    k = oarlock.transpose(key, [0, 2, 1, 3])
    if hq != hk:
        k = oarlock.repeat_interleave(k, hq // hk, axis=1)
    s = oarlock.matmul(q, k, transpose_y=True) * scale
    finite = oarlock.isfinite(lse)
    p = oarlock.exp(s - oarlock.unsqueeze(oarlock.where(finite, lse, oarlock.zeros_like(lse)), -1))
    keep = oarlock.to_tensor(np.broadcast_to(visible, p.shape)) & oarlock.unsqueeze(finite, -1)
    return oarlock.where(keep, p, oarlock.zeros_like(p))


def _causal_visible(sq, sk, causal):
    """[1, 1, Sq, Sk] bool: key j visible to query i (causal: j <= i + Sk - Sq)."""
    if not causal:
        return np.ones((1, 1, sq, sk), dtype=bool)
    return (np.arange(sk)[None, :] <= np.arange(sq)[:, None] + (sk - sq))[None, None]


def _scale(scale, d):
    return float(scale) if scale is not None else d ** -0.5


def flash_attention(query, key, value, dropout=0.0, causal=False, return_softmax=False, *, fixed_seed_offset=None,
                    rng_name="", training=True, name=None, softmax_scale=None):
    """softmax(Q K^T * scale) V over [batch, seq_len, num_heads, head_dim] (grouped-query heads allowed); scale is
    softmax_scale or head_dim ** -0.5. Returns (out, softmax if return_softmax else None)."""
    _check_4d("flash_attention", query=query, key=key, value=value)
    out, lse = _F().flashmask_attention(query, key, value, dropout=dropout, causal=causal, return_softmax_lse=True,
                                        fixed_seed_offset=fixed_seed_offset, rng_name=rng_name, training=training,
                                        softmax_scale=softmax_scale)
    if not return_softmax:
        return out, None
    visible = _causal_visible(query.shape[1], key.shape[1], causal)
    return out, _probabilities(query, key, lse, _scale(softmax_scale, query.shape[-1]), visible)


def _unpack_qkv(fn, qkv, ndim):
    """Paddle's packed qkv: [..., num_heads / num_heads_k + 2, num_heads_k, head_dim] -> (query, key, value)."""
    if not isinstance(qkv, oarlock.Tensor) or qkv.ndim != ndim or qkv.shape[-3] < 3:
        got = f"shape {list(qkv.shape)}" if isinstance(qkv, oarlock.Tensor) else f"a {type(qkv).__name__}"
        lead = "[batch, seq_len, " if ndim == 5 else "[total_seq_len, "
        raise ValueError(f"{fn}(): argument 'qkv' is {got}; accepted: a {ndim}-D {lead}num_heads / num_heads_k + 2, "
                         f"num_heads_k, head_dim] Tensor")
    lead = (slice(None),) * (ndim - 3)  # the slot axis follows the batch and sequence (or token) axes
    q = qkv[lead + (slice(None, -2),)]
    q = oarlock.reshape(q, list(qkv.shape[:ndim - 3]) + [-1, qkv.shape[-1]])
    k, v = qkv[lead + (-2,)], qkv[lead + (-1,)]
    return q, k, v


def flash_attn_qkvpacked(qkv, dropout=0.0, causal=False, return_softmax=False, *, fixed_seed_offset=None,
                         rng_name="", training=True, name=None):
    """flash_attention of a packed qkv [batch, seq_len, num_heads / num_heads_k + 2, num_heads_k, head_dim]: the
    first slots are the query heads, then key, then value."""
    q, k, v = _unpack_qkv("flash_attn_qkvpacked", qkv, 5)
    return flash_attention(q, k, v, dropout, causal, return_softmax, fixed_seed_offset=fixed_seed_offset,
                           rng_name=rng_name, training=training)


def _varlen(fn, query, key, value, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, dropout=0.0,
            causal=False, window=(-1, -1), seqused_q=None, seqused_k=None, fixed_seed_offset=None, training=True,
            padded=False):
    """(out [total_q, Hq, Dv], lse [1, Hq, total_q], the mask) of packed sequences (oarlock_flashmask.varlen)."""
    from oarlock_flashmask import varlen
    _check_3d(fn, query=query, key=key, value=value)
    for arg, v in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 0:
            raise ValueError(f"{fn}(): argument '{arg}' = {v!r}; accepted: a non-negative int")
    sri = varlen.startend_rows(fn, query.shape[0], key.shape[0], cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q),
                               int(max_seqlen_k), causal, window, seqused_q, seqused_k, padded)
    out, lse = _F().flashmask_attention(
        oarlock.unsqueeze(query, 0), oarlock.unsqueeze(key, 0), oarlock.unsqueeze(value, 0), sri, dropout=dropout,
        return_softmax_lse=True, fixed_seed_offset=fixed_seed_offset, training=training, softmax_scale=scale)
    return oarlock.squeeze(out, 0), lse, sri


def _varlen_softmax(query, key, lse, scale, sri, cu_q, cu_k, max_q, max_k, padded):
    """[num_seqs, Hq, max_seqlen_q, max_seqlen_k]: each sequence's probabilities, zero past its lengths."""
    cu_q, cu_k = np.asarray(cu_q.numpy() if isinstance(cu_q, oarlock.Tensor) else cu_q, dtype=np.int64), \
        np.asarray(cu_k.numpy() if isinstance(cu_k, oarlock.Tensor) else cu_k, dtype=np.int64)
    rows = np.arange(query.shape[0])[:, None]
    mask = sri.numpy()[0, 0]
    visible = (rows < mask[:, 0][None, :]) & (rows >= mask[:, 1][None, :])  # [total_q, total_k]
    probs = _probabilities(oarlock.unsqueeze(query, 0), oarlock.unsqueeze(key, 0), lse, scale, visible[None, None])
    per_seq = []
    for b in range(cu_q.shape[0] - 1):
        qs, ks = (b * max_q, b * max_k) if padded else (cu_q[b], cu_k[b])
        lq, lk = cu_q[b + 1] - cu_q[b], cu_k[b + 1] - cu_k[b]
        block = probs[0, :, int(qs):int(qs + lq), int(ks):int(ks + lk)]
        per_seq.append(oarlock.nn.functional.pad(block, [0, int(max_k - lk), 0, int(max_q - lq)]))
    return oarlock.stack(per_seq) if per_seq else oarlock.zeros([0, query.shape[1], max_q, max_k], query.dtype)


def flash_attn_unpadded(query, key, value, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale,
                        dropout=0.0, causal=False, return_softmax=False, fixed_seed_offset=None, rng_name="",
                        training=True, name=None):
    """Attention over packed variable-length sequences: query [total_q, num_heads, head_dim], key/value [total_k,
    num_heads_k, head_dim]; sequence b is rows [cu_seqlens_q[b], cu_seqlens_q[b+1]) of query and [cu_seqlens_k[b],
    cu_seqlens_k[b+1]) of key/value. Returns (out [total_q, num_heads, head_dim], softmax or None)."""
    fn = "flash_attn_unpadded"
    out, lse, sri = _varlen(fn, query, key, value, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale,
                            dropout, causal, fixed_seed_offset=fixed_seed_offset, training=training)
    if not return_softmax:
        return out, None
    return out, _varlen_softmax(query, key, lse, float(scale), sri, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q),
                                int(max_seqlen_k), False)


def flash_attn_varlen_qkvpacked(qkv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, dropout=0.0,
                                causal=False, return_softmax=False, fixed_seed_offset=None, rng_name="",
                                varlen_padded=True, training=True, name=None):
    """flash_attn_unpadded of a packed qkv [total_seq_len, num_heads / num_heads_k + 2, num_heads_k, head_dim].
    varlen_padded=True: sequence b starts at row b * max_seqlen (its rows past its length are padding, left out of
    the attention, and zero in out); False: the sequences are packed back to back as cu_seqlens says."""
    fn = "flash_attn_varlen_qkvpacked"
    q, k, v = _unpack_qkv(fn, qkv, 4)
    out, lse, sri = _varlen(fn, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, dropout,
                            causal, fixed_seed_offset=fixed_seed_offset, training=training, padded=bool(varlen_padded))
    if not return_softmax:
        return out, None
    return out, _varlen_softmax(q, k, lse, float(scale), sri, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q),
                                int(max_seqlen_k), bool(varlen_padded))


def flash_attn_varlen_func(query, key, value, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           seqused_q=None, seqused_k=None, softmax_scale=None, causal=False, qv=None, q_descale=None,
                           k_descale=None, v_descale=None, window_size=(-1, -1), softcap=0.0, num_splits=1,
                           pack_gqa=None, sm_margin=0):
    """FlashAttention 3's variable-length attention (packed as in flash_attn_unpadded; seqused_q / seqused_k use
    only the first tokens of each sequence; window_size (left, right), -1 unbounded). Returns (out, softmax_lse
    [num_heads, total_q], float32). num_splits, pack_gqa and sm_margin tune the CUDA kernel and change nothing."""
    fn = "flash_attn_varlen_func"
    for arg, v in (("qv", qv), ("q_descale", q_descale), ("k_descale", k_descale), ("v_descale", v_descale)):
        if v is not None:
            raise NotImplementedError(f"{fn}(): argument '{arg}' is not supported by the oarlock kernels; "
                                      f"accepted: None")
    if softcap != 0.0:
        raise NotImplementedError(f"{fn}(): argument 'softcap' = {softcap!r} is not supported by the oarlock "
                                  f"kernels; accepted: 0.0")
    if not (isinstance(window_size, (tuple, list)) and len(window_size) == 2 and
            all(isinstance(w, int) and not isinstance(w, bool) and w >= -1 for w in window_size)):
        raise ValueError(f"{fn}(): argument 'window_size' = {window_size!r}; accepted: a pair (left, right) of ints "
                         f">= -1 (-1: unbounded)")
    scale = _scale(softmax_scale, query.shape[-1] if isinstance(query, oarlock.Tensor) else 1)
    out, lse, _ = _varlen(fn, query, key, value, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale,
                          causal=causal, window=tuple(window_size), seqused_q=seqused_q, seqused_k=seqused_k)
    return out, oarlock.squeeze(lse, 0)


def flash_attention_v3_varlen(query, key, value, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                              seqused_q=None, seqused_k=None, softmax_scale=None, causal=False, qv=None,
                              q_descale=None, k_descale=None, v_descale=None, window_size=(-1, -1), softcap=0.0,
                              num_splits=1, pack_gqa=None, sm_margin=0):
    """The same as flash_attn_varlen_func (Paddle's other name for it)."""
    return flash_attn_varlen_func(query, key, value, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                  seqused_q, seqused_k, softmax_scale, causal, qv, q_descale, k_descale, v_descale,
                                  window_size, softcap, num_splits, pack_gqa, sm_margin)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, training=True,
                                 name=None, backend=None):
    """Paddle's scaled_dot_product_attention ([batch, seq_len, num_heads, head_dim]); `backend` picks a CUDA
    kernel in Paddle and changes nothing here."""
    return _F().scaled_dot_product_attention(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                                             is_causal=is_causal, training=training)


def flashmask_attention(query, key, value, startend_row_indices=None, *, dropout=0.0, causal=False,
                        window_size=None, return_softmax_lse=False, return_seed_offset=False, fixed_seed_offset=None,
                        rng_name="", training=True, name=None, softmax_scale=None, block_mask=None):
    """oarlock.nn.functional.flashmask_attention (see there)."""
    return _F().flashmask_attention(query, key, value, startend_row_indices, dropout=dropout, causal=causal,
                                    window_size=window_size, return_softmax_lse=return_softmax_lse,
                                    return_seed_offset=return_seed_offset, fixed_seed_offset=fixed_seed_offset,
                                    rng_name=rng_name, training=training, softmax_scale=softmax_scale,
                                    block_mask=block_mask)


def calc_reduced_attention_scores(query, key, softmax_lse):
    """sum over the query rows of softmax(Q K^T / sqrt(head_dim)): [batch, num_heads, 1, seq_len_k] float32, from
    the lse flash attention returned ([batch, num_heads, seq_len_q], or rounded up past seq_len_q)."""
    _check_4d("calc_reduced_attention_scores", query=query, key=key)
    sq = query.shape[1]
    lse = oarlock.cast(softmax_lse[:, :, :sq], "float32")
    probs = _probabilities(oarlock.cast(query, "float32"), oarlock.cast(key, "float32"), lse,
                           query.shape[-1] ** -0.5, _causal_visible(sq, key.shape[1], False))
    return oarlock.sum(probs, axis=2, keepdim=True)


_SDP_FLAGS = {"math": None, "flash": None, "mem_efficient": None}


@contextlib.contextmanager
def sdp_kernel(enable_math=False, enable_flash=True, enable_mem_efficient=True):
    """Paddle's choice of attention backend for the block; oarlock has one (the tiled kernel), so it records the
    flags (Paddle's module-level g_enable_* values) and changes no result."""
    saved = dict(_SDP_FLAGS)
    _SDP_FLAGS.update(math=enable_math, flash=enable_flash, mem_efficient=enable_mem_efficient)
    try:
        yield
    finally:
        _SDP_FLAGS.update(saved)


FUNCTIONS = [flash_attention, flash_attn_qkvpacked, flash_attn_unpadded, flash_attn_varlen_qkvpacked,
             flash_attn_varlen_func, flash_attention_v3_varlen, scaled_dot_product_attention, flashmask_attention,
             calc_reduced_attention_scores, sdp_kernel]


def register_api(api):
    api.namespace(NAMESPACE, doc=__doc__)
    for fn in FUNCTIONS:
        api.export(NAMESPACE, fn.__name__, fn)
