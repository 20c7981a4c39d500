"""Specs for the attention family: scaled_dot_product_attention (Paddle's [batch, seq, heads, head_dim]
layout) and its fused backward op. The comparisons with torch live in tests/test_attention.py; the dropout
path is random and is checked there too."""

import numpy as np

import oarlock.nn.functional as F
from op_specs.base import FLOATS, Case, In, OpSpec, library_op


def _heads_first(x, heads_k):
    """[B, S, H, D] -> [B, Hk, H // Hk, S, D]: the query heads that share key/value head j form group j."""
    b, s, h, d = x.shape
    return x.reshape(b, s, heads_k, h // heads_k, d).transpose(0, 2, 3, 1, 4)


def _heads_last(x):
    """[B, Hk, G, S, D] -> [B, S, Hk * G, D]."""
    b, hk, g, s, d = x.shape
    return x.transpose(0, 3, 1, 2, 4).reshape(b, s, hk * g, d)


def _default_scale(scale, head_dim):
    return scale if scale is not None else (1 / np.sqrt(head_dim) if head_dim else 1.0)


def sdpa_probs_ref(q, k, attn_mask=None, is_causal=False, scale=None):
    """The attention probabilities [B, Hq, Sq, Sk] in float64; rows with every key masked are zero."""
    hq, hk = q.shape[2], k.shape[2]
    k = np.repeat(k, hq // hk, axis=2)  # query head h uses key head h // (hq // hk)
    scores = _default_scale(scale, q.shape[-1]) * np.einsum("bqhd,bkhd->bhqk", q, k)
    keep = np.ones(scores.shape, dtype=bool)
    if attn_mask is not None:
        if attn_mask.dtype == bool:
            keep = keep & attn_mask
        else:
            scores = scores + attn_mask
    if is_causal:
        keep = keep & np.tril(np.ones(scores.shape[-2:], dtype=bool))
    scores = np.where(keep, scores, -np.inf)
    if scores.shape[-1] == 0:
        return scores
    top = scores.max(axis=-1, keepdims=True)
    e = np.exp(scores - np.where(np.isfinite(top), top, 0.0))
    total = e.sum(axis=-1, keepdims=True)
    return e / np.where(total == 0, 1.0, total)


def sdpa_ref(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, training=True, scale=None):
    """softmax(scale q k^T + mask) v in float64, without dropout (the table's cases have none)."""
    if q.ndim == 3:
        return sdpa_ref(q[None], k[None], v[None], attn_mask, dropout_p, is_causal, training, scale)[0]
    p = sdpa_probs_ref(q, k, attn_mask, is_causal, scale)
    v = np.repeat(v, q.shape[2] // k.shape[2], axis=2)
    return np.einsum("bhqk,bkhd->bqhd", p, v)


def sdpa_grad_ref(g, q, k, v, out, probs, keep, dropout_p=0.0, scale=None, is_causal=False):
    """The fused backward's formula, written with numpy on the same 5-D layout (probs [B, Hk, G, Sq, Sk]):
    dS = P * (dP - rowsum(dO * O)). The formula itself is checked by the finite differences of
    scaled_dot_product_attention, whose backward runs this op. is_causal only tells the kernel that probs are
    zero above the diagonal (it skips those blocks): the formula is the same."""
    if q.ndim == 3:
        return [x[0] for x in sdpa_grad_ref(g[None], q[None], k[None], v[None], out[None], probs, keep, dropout_p,
                                            scale)]
    hk = k.shape[2]
    scale = _default_scale(scale, q.shape[-1])
    drop = keep / (1 - dropout_p) if dropout_p else 1.0
    weights = probs * drop
    g5, q5, k5, v5 = (_heads_first(x, hk) for x in (g, q, k, v))
    dv = _heads_last((weights.swapaxes(-1, -2) @ g5).sum(axis=2, keepdims=True))
    dp = (g5 @ v5.swapaxes(-1, -2)) * drop
    rows = _heads_first((g * out).sum(axis=-1, keepdims=True), hk)
    ds = probs * (dp - rows)
    dq = _heads_last(ds @ k5) * scale
    dk = _heads_last((ds.swapaxes(-1, -2) @ (q5 * scale)).sum(axis=2, keepdims=True))
    return [dq, dk, dv]


def qkv(b, sq, sk, hq, hk=None, d=4, dv=None):
    """Random query, key and value inputs in Paddle's [batch, seq, heads, head_dim] layout."""
    hk = hk or hq
    return [In((b, sq, hq, d)), In((b, sk, hk, d)), In((b, sk, hk, dv or d))]


def bool_mask(values):
    return In(np.shape(values), dtype="bool", values=np.asarray(values, dtype=bool), grad=False)


def float_mask(shape):
    return In(shape, grad=False)


ROW_MASKED = [[True, False, True, True], [False, False, False, False], [True, True, False, True]]
NEG_INF = float("-inf")

SDPA_CASES = [
    Case(qkv(2, 3, 4, 2, dv=3), name="basic"),  # seq_q != seq_k, head_dim_v != head_dim
    Case(qkv(2, 4, 4, 2), {"is_causal": True}, name="causal"),
    Case(qkv(1, 3, 5, 2), {"is_causal": True}, name="causal_short_query"),  # top-left aligned
    Case(qkv(1, 5, 3, 1), {"is_causal": True}, name="causal_long_query"),
    Case([*qkv(2, 12, 12, 1, d=2), bool_mask(np.arange(12) % 5 != 0)], {"is_causal": True},
         name="causal_padding_mask"),
    Case([*qkv(2, 3, 4, 2), bool_mask(ROW_MASKED)], name="bool_mask_fully_masked_row"),
    Case([*qkv(2, 3, 4, 2), In((2, 1, 3, 4), dtype="bool", grad=False)], name="bool_mask_per_batch"),
    Case([*qkv(2, 3, 4, 2), float_mask((2, 2, 3, 4))], name="float_mask"),
    Case([*qkv(1, 3, 3, 2), In((3, 3), values=[[0.0, NEG_INF, 0.5], [NEG_INF, NEG_INF, NEG_INF], [1.0, 0.0, 0.0]],
                                grad=False)], {"is_causal": True}, name="float_mask_inf_and_causal"),
    Case([*qkv(2, 3, 5, 4, hk=2), In((1, 4, 3, 5), dtype="bool", grad=False)], name="grouped_query_mask_per_head"),
    Case(qkv(1, 4, 4, 6, hk=2), {"is_causal": True}, name="grouped_query_causal"),
    Case([In((3, 2, 4)), In((4, 2, 4)), In((4, 2, 4))], {"is_causal": True}, name="unbatched"),
    Case(qkv(1, 3, 4, 2), {"scale": 0.7}, name="scale"),
    Case(qkv(2, 3, 4, 2), {"dropout_p": 0.5, "training": False}, name="dropout_not_training"),
    Case([In((1, 3, 2, 4), domain=(-6.0, 6.0)), In((1, 4, 2, 4), domain=(-6.0, 6.0)), In((1, 4, 2, 4))],
         name="large_scores"),
    Case([In((1, 2, 1, 3)), In((1, 0, 1, 3)), In((1, 0, 1, 3))], name="no_keys", grad=False),
    # several query blocks of the kernels (32 rows causal, 64 dense), sizes not multiples of them
    Case(qkv(1, 37, 37, 2, d=2), {"is_causal": True}, name="causal_two_blocks"),
    Case(qkv(1, 33, 45, 2, hk=1, d=2), {"is_causal": True}, name="causal_blocks_grouped_short_query"),
    Case(qkv(1, 45, 33, 1, d=2), {"is_causal": True}, name="causal_blocks_long_query"),
    Case([*qkv(1, 70, 5, 1, d=2), bool_mask(np.arange(70 * 5).reshape(70, 5) % 7 != 0)], name="dense_blocks_mask"),
]


def _grad_case(b, sq, sk, hq, hk, d, dv, kwargs, name, dropout=False):
    groups = hq // hk
    keep = In((b, hk, groups, sq, sk), dtype="bool", grad=False) if dropout else bool_mask(True)
    args = [In((b, sq, hq, dv)), In((b, sq, hq, d)), In((b, sk, hk, d)), In((b, sk, hk, dv)), In((b, sq, hq, dv)),
            In((b, hk, groups, sq, sk), domain=(0.0, 1.0)), keep]
    return Case(args, kwargs, name=name)


GRAD_CASES = [
    _grad_case(2, 3, 4, 2, 2, 4, 3, {}, "basic"),
    _grad_case(1, 4, 3, 4, 2, 3, 3, {"scale": 0.5}, "grouped_query_scale"),
    _grad_case(2, 3, 3, 2, 1, 2, 2, {"dropout_p": 0.25}, "dropout", dropout=True),
    Case([In((3, 2, 2)), In((3, 2, 4)), In((5, 2, 4)), In((5, 2, 2)), In((3, 2, 2)),
          In((1, 2, 1, 3, 5), domain=(0.0, 1.0)), bool_mask(True)], name="unbatched"),
    # is_causal: probabilities zero above the diagonal (top-left aligned), several blocks, seq_q < seq_k
    Case([In((1, 40, 2, 3)), In((1, 40, 2, 4)), In((1, 45, 1, 4)), In((1, 45, 1, 3)), In((1, 40, 2, 3)),
          In((1, 1, 2, 40, 45), values=np.tril(np.random.default_rng(5).random((1, 1, 2, 40, 45))), grad=False),
          bool_mask(True)], {"is_causal": True}, name="causal_blocks"),
]

SPECS = [
    OpSpec("scaled_dot_product_attention", SDPA_CASES, ref=sdpa_ref, dtypes=FLOATS,
           call=F.scaled_dot_product_attention),
    OpSpec("_scaled_dot_product_attention_grad", GRAD_CASES, ref=sdpa_grad_ref, dtypes=FLOATS, grad=False,
           call=library_op("_scaled_dot_product_attention_grad")),
]
