"""Scaled dot-product attention as one fused op (oarlock.nn.functional.scaled_dot_product_attention).

out = dropout(softmax(scale * Q K^T + bias)) V, with Paddle's layout: query [batch, seq_q, heads_q, head_dim],
key [batch, seq_k, heads_k, head_dim], value [batch, seq_k, heads_k, head_dim_v], out [batch, seq_q, heads_q,
head_dim_v]; 3-D inputs [seq, heads, dim] are one unbatched example. Conventions:
- attn_mask broadcasts to [batch, heads_q, seq_q, seq_k]: a bool mask keeps the True positions (torch and Paddle
  agree), a float mask is added to the scores.
- is_causal masks key j for query i when j > i: the top-left alignment that torch's is_causal and Paddle's CPU
  (math) path use, also when seq_q != seq_k. Unlike Paddle, whose docs say a mask given together with
  is_causal=True is ignored, both apply (a padding mask and causality combine).
- Grouped-query attention: heads_q may be a multiple of heads_k; query head h uses key/value head
  h // (heads_q // heads_k), as Paddle's repeat of the key/value heads does.
- A query row whose keys are all masked gets zero probabilities (out 0, gradient 0), not nan, as in torch.
- Dropout (dropout_p > 0 and training=True) zeroes probabilities with the device generator and scales the
  kept ones by 1 / (1 - dropout_p) (Paddle's upscale_in_train), so oarlock.seed makes it repeatable.
- float16/bfloat16 compute in float32 and cast back.

Speed (numpy on the CPU; the GPT of `oarlock train` runs [16, 128, 4, 32] causal): the kernels walk the queries
in blocks (see _blocks): with is_causal a block multiplies only against the keys it can see, so the fully masked
upper-right blocks cost nothing in QK^T, the softmax, PV or any of the backward's products, and only the diagonal
block is masked. The softmax shifts each row by a Cauchy-Schwarz bound of its scores instead of its max (numpy's
max over short rows is its slowest pass; see _row_bounds), sums rows with einsum (no BLAS: its threads are set
by whatever matmul ran last), and writes the normalised block straight into the saved probabilities. The [seq,
dim] matrices of Paddle's layout are read in place (strided views that numpy's BLAS path accepts); only K^T and
V^T are copied (scaled), since numpy's matmul is twice as slow on a transposed operand. Grouped heads use a 5-D
layout [batch, heads_k, group, seq_q, ...], so keys and values are never repeated. The softmax probabilities and
the dropout mask are intermediate outputs (kept by the graph node, not returned), so backward recomputes
nothing; it runs as the fused op `_scaled_dot_product_attention_grad` (dQ per query block, dK and dV summed over
the blocks while each block's dS is in the cache), or, while a higher-order graph is recorded, as a composition
of public ops (so attention can be differentiated twice). bench/sdpa.py times the kernels against torch.
"""

from __future__ import annotations

import math

import oarlock
from oarlock.plugin_api import xp_function
from oarlock_ops.linalg import compute_dtype
from oarlock_ops.softmax import row_sums

_FN = "scaled_dot_product_attention"


# -- shapes and checks --------------------------------------------------------------------------------

def _check_inputs(q, k, v):
    """Raise unless query, key and value fit together; returns (heads_q, heads_k)."""
    if q.ndim not in (3, 4):
        raise ValueError(f"query must be 4-D [batch, seq_len, num_heads, head_dim] (or 3-D [seq_len, num_heads, "
                         f"head_dim] for one example), got shape {list(q.shape)}")
    if k.ndim != q.ndim or v.ndim != q.ndim:
        raise ValueError(f"query, key and value must have the same rank ([batch, seq_len, num_heads, head_dim]), "
                         f"got shapes {list(q.shape)}, {list(k.shape)} and {list(v.shape)}")
    if q.ndim == 4 and not q.shape[0] == k.shape[0] == v.shape[0]:
        raise ValueError(f"query, key and value must have the same batch size, got shapes {list(q.shape)}, "
                         f"{list(k.shape)} and {list(v.shape)}")
    if k.shape[-3] != v.shape[-3]:
        raise ValueError(f"key and value must have the same seq_len (axis {k.ndim - 3}), got shapes "
                         f"{list(k.shape)} and {list(v.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"query and key must have the same head_dim (last axis), got shapes {list(q.shape)} and "
                         f"{list(k.shape)}")
    hq, hk = q.shape[-2], k.shape[-2]
    if v.shape[-2] != hk:
        raise ValueError(f"key and value must have the same num_heads (axis {k.ndim - 2}), got shapes "
                         f"{list(k.shape)} and {list(v.shape)}")
    if hk == 0 or hq % hk:
        raise ValueError(f"query has {hq} heads and key/value {hk}: the query heads must equal, or be a multiple "
                         f"of, the key/value heads (grouped-query attention); shapes {list(q.shape)} and "
                         f"{list(k.shape)}")
    return hq, hk


def _scale(scale, head_dim):
    if scale is not None:
        return scale
    return 1.0 / math.sqrt(head_dim) if head_dim else 1.0  # Paddle uses 1 for an empty head_dim


def _dropout_rate(dropout_p, training):
    if not 0.0 <= dropout_p <= 1.0:
        raise ValueError(f"dropout_p must be in [0, 1], got {dropout_p}")
    return dropout_p if training else 0.0


def _batched(arrays):
    """Arrays with a batch axis (3-D inputs are one unbatched example)."""
    return [a if a.ndim == 4 else a[None] for a in arrays]


def _heads_view(x, heads_k):
    """[B, S, H, D] -> a [B, Hk, H // Hk, S, D] view: the query heads that share key/value head j form group j.
    No copy: numpy's matmul takes the [S, D] matrices as they are (rows H * D apart) at full speed."""
    b, s, h, d = x.shape
    return x.reshape(b, s, heads_k, h // heads_k, d).transpose(0, 2, 3, 1, 4)


def _transposed_keys(xp, k, dtype, scale=None, work=None):
    """[B, S, Hk, D] -> a new contiguous [B, Hk, 1, D, S] (times `scale`): the right operand of Q K^T. numpy's
    matmul is twice as slow on a transposed view (OpenBLAS's transposed-operand path) as on this copy. The copy
    goes through [B, Hk, S, D] (in `work`, a flat buffer of at least k.size elements, when given): numpy's
    one-step transposing copy reads with a stride of Hk * D floats in its inner loop and costs 3-4x the two
    steps at head_dim 64 or more."""
    b, s, hk, d = k.shape
    staged = (work[:k.size] if work is not None else xp.empty(k.size, dtype=dtype)).reshape(b, hk, s, d)
    if scale is None:
        staged[...] = k.transpose(0, 2, 1, 3)
    else:
        xp.multiply(k.transpose(0, 2, 1, 3), scale, out=staged)
    out = xp.empty((b, hk, d, s), dtype=dtype)
    out[...] = staged.swapaxes(-1, -2)
    return out[:, :, None]


def _output_buffer(xp, shape, heads_k, dtype):
    """A contiguous [B, S, H, D] array and its [B, Hk, G, S, D] view, so a matmul writes straight into Paddle's
    layout."""
    buf = xp.empty(shape, dtype=dtype)
    return buf, _heads_view(buf, heads_k)


def _mask_bias(xp, mask, q_shape, k_shape, dtype):
    """The additive mask as an array that broadcasts against scores [B, Hk, G, Sq, Sk]."""
    if mask.dtype.kind not in "bfV":
        raise TypeError(f"attn_mask must be bool (True = attend) or a floating-point mask added to the scores, got "
                        f"dtype {mask.dtype.name}")
    b, sq, hq, _ = q_shape
    sk, hk = k_shape[1], k_shape[2]
    target = [b, hq, sq, sk]
    shape = [1] * (4 - mask.ndim) + list(mask.shape)
    if mask.ndim > 4 or any(m not in (1, t) for m, t in zip(shape, target)):
        raise ValueError(f"attn_mask of shape {list(mask.shape)} does not broadcast to [batch, num_heads, "
                         f"seq_len_q, seq_len_k] = {target}")
    if mask.dtype.kind == "b":
        bias = xp.where(mask, xp.zeros((), dtype), xp.full((), -xp.inf, dtype))
    else:
        bias = mask.astype(dtype, copy=False)
    heads = shape[1]
    grouped = [shape[0], hk, hq // hk] if heads == hq else [shape[0], 1, 1]
    return bias.reshape(grouped + shape[2:])


def _softmax_into(xp, s, p, masked):
    """p = softmax(s) over the last axis; s is overwritten. With a mask, rows whose scores are all -inf give
    zeros."""
    m = s.max(axis=-1, keepdims=True)
    if masked:
        m = xp.where(xp.isfinite(m), m, xp.zeros((), s.dtype))
    s -= m
    xp_function(xp, "exp")(s, out=s)
    total = row_sums(xp, s)
    if masked:
        total = xp.where(total == 0, xp.ones((), s.dtype), total)
    xp.divide(s, total, out=p)


def _dropout_scale(p):
    return 0.0 if p >= 1.0 else 1.0 / (1.0 - p)


# -- query blocks -------------------------------------------------------------------------------------
#
# Both kernels walk the queries in blocks of BLOCK rows: a block's scores [batch, heads, BLOCK, seq_k] stay in
# the cache through the softmax (or dS) passes instead of streaming the whole [seq_q, seq_k] matrix from memory
# once per pass. With is_causal, query block [r0, r1) sees only keys [0, r1) (top-left aligned), so its
# products, exp and row passes run over those columns: the fully masked upper-right blocks are never computed
# (about half the work at long sequences), and only the diagonal block adds the -inf triangle. The backward
# computes a block's dS, its dQ rows and its terms of dK and dV (keys [0, kend)) while dS is in the cache: key
# rows a block sees first are written, the others get the term added (_accumulate_keys). Without is_causal the
# forward uses blocks of DENSE_BLOCK rows and the backward one block (no terms to add). Tuned on a 2-core
# machine with one BLAS thread: 32-row causal blocks beat 16 and 64 at the GPT's [16, 128, 4, 32].

BLOCK = 32  # query rows per block: small enough for the causal saving, big enough for full-speed products
DENSE_BLOCK = 64  # without is_causal blocks only keep the passes in the cache


def _blocks(sq, sk, causal, dense=DENSE_BLOCK):
    """[(r0, r1, kend)]: query rows [r0, r1) and the keys [0, kend) they may see; `dense` rows per block without
    is_causal."""
    block = BLOCK if causal else dense
    return [(r0, min(r0 + block, sq), min(r0 + block, sq, sk) if causal else sk) for r0 in range(0, sq, block)]


class _Scratch:
    """One buffer for every block's [batch, heads_k, group, rows, cols] scores, reshaped (contiguous) per
    block, so a block's matmul writes into memory that is already mapped and in the cache. It is at least
    `least` elements, so it can hold the staging copy of K^T (or V^T) before the blocks need it: one fresh
    buffer fewer to fault in."""

    def __init__(self, xp, lead, rows, cols, dtype, least=0):
        self.lead = tuple(lead)
        self.flat = xp.empty(max(math.prod(self.lead) * rows * cols, least), dtype=dtype)

    def __call__(self, rows, cols):
        return self.flat[:math.prod(self.lead) * rows * cols].reshape(*self.lead, rows, cols)


def _bias_block(bias, r0, r1, kend):
    """Rows [r0, r1) and columns [0, kend) of a mask bias that may broadcast (size 1) along either."""
    rows = slice(r0, r1) if bias.shape[-2] != 1 else slice(None)
    cols = slice(0, kend) if bias.shape[-1] != 1 else slice(None)
    return bias[..., rows, cols]


def _add_causal_(xp, s, r0, kend, tri):
    """Mask key j > query i in a block of rows starting at r0: only columns [r0 + 1, kend) can hold such keys."""
    if kend > r0 + 1:
        s[..., r0:kend] += tri[:s.shape[-2], :kend - r0]


def _causal_triangle(xp, n, dtype):
    """-inf above the main diagonal of [n, n]."""
    return xp.triu(xp.full((n, n), -xp.inf, dtype=dtype), 1)


def _accumulate_keys(xp, grad5, left, right, filled, kend, partial):
    """grad5[..., :kend, :] += (left^T right summed over the group axis), for one query block: left [B, Hk, G,
    rows, kend], right [B, Hk, G, rows, D], grad5 a [B, Hk, 1, Sk, D] view. Rows [0, filled) already hold a
    sum and get the product added; rows [filled, kend) are seen for the first time and are written directly
    (the product goes straight into them when there is no group to sum)."""
    cols = right.shape[-1]
    for lo, hi, add in ((0, min(filled, kend), True), (filled, kend, False)):
        if hi <= lo:
            continue
        product = left[..., lo:hi].swapaxes(-1, -2)
        if not add and left.shape[2] == 1:
            xp_function(xp, "matmul")(product, right, out=grad5[..., lo:hi, :])
            continue
        term = partial[:math.prod(left.shape[:3]) * (hi - lo) * cols].reshape(*left.shape[:3], hi - lo, cols)
        xp_function(xp, "matmul")(product, right, out=term)
        if left.shape[2] > 1:
            term = term.sum(axis=2, keepdims=True)
        if add:
            grad5[..., lo:hi, :] += term
        else:
            grad5[..., lo:hi, :] = term


def _row_bounds(xp, q, k, scale, float_bias, blocks):
    """An upper bound of each query row's scores (over the keys it sees), [B, Hk, G, Sq, 1], from Cauchy-Schwarz:
    |scale q.k| <= |scale| |q| max |k|, plus the row's largest value of a float mask. The softmax shifts by it
    instead of by the row's exact max, which saves numpy's slowest pass (a max over short rows costs twice a
    subtraction): exp never overflows, and every term stays a normal float unless the row's total falls below
    tiny / eps, which the caller checks (the block is then redone with the exact max). The shift moves the
    rounding of the exponent from eps * (max - s) to eps * (bound - s): a few ulps for the norms attention sees.
    The key norm is the largest over the keys each query block sees (`blocks`, from _blocks)."""
    b, sq, hq, _ = q.shape
    sk, hk = k.shape[1], k.shape[2]
    q_norm = xp.sqrt(xp.einsum("bshd,bshd->bhs", q, q)).reshape(b, hk, hq // hk, sq, 1)
    if sk == 0:  # no keys: no block computes scores
        return q_norm
    k_norm = xp.sqrt(xp.einsum("bshd,bshd->bhs", k, k))  # [B, Hk, Sk]
    bound = xp.empty(q_norm.shape, dtype=q_norm.dtype)
    for r0, r1, kend in blocks:  # kend > 0: there are keys
        top_k = k_norm[..., :kend].max(axis=-1)[:, :, None, None, None]
        xp.multiply(q_norm[..., r0:r1, :], top_k, out=bound[..., r0:r1, :])
    bound *= abs(scale)
    if float_bias is not None:
        top = float_bias.max(axis=-1, keepdims=True)
        bound = bound + xp.where(top > -xp.inf, top, xp.zeros((), top.dtype))  # a fully masked row: no shift
    return bound


def _block_scores(xp, q5, kt, bias, causal, tri, r0, kend, out):
    """The masked scores of the query rows [r0, r0 + rows) against keys [0, kend), written into out."""
    xp_function(xp, "matmul")(q5[..., r0:r0 + out.shape[-2], :], kt[..., :kend], out=out)
    if bias is not None:
        out += _bias_block(bias, r0, r0 + out.shape[-2], kend)
    if causal:
        _add_causal_(xp, out, r0, kend, tri)
    return out


# -- kernels ------------------------------------------------------------------------------------------

def _sdpa(xp, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, training=True, scale=None, *,
          generator):
    """Returns (out, probabilities [B, Hk, G, Sq, Sk] in the compute dtype, dropout keep mask)."""
    hq, hk = _check_inputs(query, key, value)
    rate = _dropout_rate(dropout_p, training)
    unbatched = query.ndim == 3
    ct = compute_dtype(xp, query.dtype)
    q, k, v = (x.astype(ct, copy=False) for x in _batched((query, key, value)))
    b, sq, _, d = q.shape
    sk, dv = k.shape[1], v.shape[3]
    groups = hq // hk
    bias = None if attn_mask is None else _mask_bias(xp, attn_mask, q.shape, k.shape, ct)
    q5, v5 = _heads_view(q, hk), _heads_view(v, hk)
    # the skipped (masked) blocks of a causal product are never written: they start as zeros
    p = (xp.zeros if is_causal else xp.empty)((b, hk, groups, sq, sk), dtype=ct)
    if rate:  # drawn in one call over the whole shape, so a seed gives the same mask whatever the blocking
        keep = generator.random(p.shape, dtype=xp.float32) >= rate
    else:
        keep = xp.ones((), dtype=bool)  # placeholder: backward reads it only when dropout was applied
    out, out5 = _output_buffer(xp, (b, sq, hq, dv), hk, ct)
    blocks = _blocks(sq, sk, is_causal)
    rows = max((r1 - r0 for r0, r1, _ in blocks), default=0)
    scratch = _Scratch(xp, (b, hk, groups), rows, sk, ct, least=k.size)
    kt = _transposed_keys(xp, k, ct, _scale(scale, d), scratch.flat)  # [B, Hk, 1, D, Sk]
    tri = _causal_triangle(xp, rows, ct) if is_causal else None
    # a bool mask adds 0 or -inf: it never raises a row's largest score, so only a float mask enters the bound
    bound = _row_bounds(xp, q, k, _scale(scale, d), None if bias is None or attn_mask.dtype.kind == "b" else bias,
                        blocks)
    tiny = xp.finfo(ct).tiny / xp.finfo(ct).eps
    for r0, r1, kend in blocks:
        if kend == 0:  # no keys at all
            out5[..., r0:r1, :] = 0
            continue
        s = _block_scores(xp, q5, kt, bias, is_causal, tri, r0, kend, scratch(r1 - r0, kend))
        pb = p[..., r0:r1, :kend]
        s -= bound[..., r0:r1, :]
        xp_function(xp, "exp")(s, out=s)
        total = row_sums(xp, s)
        if (total < tiny).any():  # the bound was too loose for some row (or a row is fully masked): exact max
            s = _block_scores(xp, q5, kt, bias, is_causal, tri, r0, kend, s)
            _softmax_into(xp, s, pb, True)
        else:
            xp.divide(s, total, out=pb)
        if rate:
            weights = xp.multiply(pb, keep[..., r0:r1, :kend], out=s)
            weights *= _dropout_scale(rate)
        else:
            weights = pb
        xp_function(xp, "matmul")(weights, v5[..., :kend, :], out=out5[..., r0:r1, :])
    out = out.astype(query.dtype, copy=False)
    return (out[0] if unbatched else out), p, keep


def _sdpa_backward(xp, grad, query, key, value, out, probs, keep, dropout_p=0.0, scale=None, is_causal=False):
    """(d query, d key, d value). With dS the gradient of the scores, dP = dO V^T (times the dropout mask and
    scale), dS = P * (dP - rowsum(dP * P)); rowsum(dP * P) equals rowsum(dO * O) over head_dim, which is much
    smaller. dQ = scale * dS K, dK = scale * dS^T Q, dV = dropout(P)^T dO; the group axis of grouped-query
    attention is summed after dK and dV's products. The scale is folded into the copy of V^T (so into dP and
    dS).
    is_causal=True promises that probs are zero for key j > query i: those blocks are skipped."""
    hq, hk = _check_inputs(query, key, value)
    unbatched = query.ndim == 3
    ct = compute_dtype(xp, query.dtype)
    g, q, k, v, o = (x.astype(ct, copy=False) for x in _batched((grad, query, key, value, out)))
    b, sq, _, d = q.shape
    sk, dv = k.shape[1], v.shape[3]
    groups = hq // hk
    scale = _scale(scale, d)
    if list(probs.shape) != [b, hk, groups, sq, sk]:
        raise ValueError(f"probs must have shape [batch, heads_k, heads_q // heads_k, seq_q, seq_k] = "
                         f"{[b, hk, groups, sq, sk]}, got {list(probs.shape)}")
    p = probs.astype(ct, copy=False)
    keep = keep if dropout_p else None
    g5 = _heads_view(g, hk)
    # rowsum(scale * dO * O): [B, H, Sq] -> [B, Hk, G, Sq, 1]
    delta = xp.einsum("bshd,bshd->bhs", g, o).reshape(b, hk, groups, sq, 1)
    delta *= scale
    k5, q5 = _heads_view(k, hk), _heads_view(q, hk)
    dq_buf, dq5 = _output_buffer(xp, (b, sq, hq, d), hk, ct)
    dk_buf, dk5 = _output_buffer(xp, (b, sk, hk, d), hk, ct)
    dv_buf, dv5 = _output_buffer(xp, (b, sk, hk, dv), hk, ct)
    # without is_causal the backward takes all rows at once: several blocks would add their dK, dV terms into
    # the (strided) outputs, which costs more (about 25% at [16, 128, 4, 32]) than the cache locality gains
    blocks = _blocks(sq, sk, is_causal, dense=max(sq, 1))
    rows = max((r1 - r0 for r0, r1, _ in blocks), default=0)
    scratch = _Scratch(xp, (b, hk, groups), rows, sk, ct, least=v.size)
    vt = _transposed_keys(xp, v, ct, scale, scratch.flat)  # scale * V^T [B, Hk, 1, Dv, Sk]: dO (scale V^T) = scale dP
    weights = _Scratch(xp, (b, hk, groups), rows, sk, ct) if keep is not None else None
    partial = xp.empty(b * hk * groups * sk * max(d, dv), dtype=ct)  # the dK, dV terms of a block's seen keys
    filled = 0  # dK and dV rows [0, filled) hold a sum already; later rows are written by their first block
    for r0, r1, kend in blocks:
        if kend == 0:
            dq5[..., r0:r1, :] = 0
            continue
        ds = scratch(r1 - r0, kend)
        xp_function(xp, "matmul")(g5[..., r0:r1, :], vt[..., :kend], out=ds)  # scale * dP
        pb = p[..., r0:r1, :kend]
        if keep is not None:
            kb = keep[..., r0:r1, :kend]
            ds *= kb
            ds *= _dropout_scale(dropout_p)
            wb = xp.multiply(pb, kb, out=weights(r1 - r0, kend))
            wb *= _dropout_scale(dropout_p)
        else:
            wb = pb
        ds -= delta[..., r0:r1, :]
        ds *= pb
        xp_function(xp, "matmul")(ds, k5[..., :kend, :], out=dq5[..., r0:r1, :])
        for grad5, left, right in ((dv5, wb, g5), (dk5, ds, q5)):
            _accumulate_keys(xp, grad5, left, right[..., r0:r1, :], filled, kend, partial)
        filled = max(filled, kend)
    dk5[..., filled:, :] = 0  # keys no query sees
    dv5[..., filled:, :] = 0
    grads = [x.astype(query.dtype, copy=False) for x in (dq_buf, dk_buf, dv_buf)]
    return tuple(x[0] for x in grads) if unbatched else tuple(grads)


# -- autograd -----------------------------------------------------------------------------------------

def _heads_first(x, heads_k):
    """_heads_view for Tensors: [B, S, H, D] -> [B, Hk, H // Hk, S, D]."""
    b, s, h, d = x.shape
    return oarlock.transpose(oarlock.reshape(x, [b, s, heads_k, h // heads_k, d]), [0, 2, 3, 1, 4])


def _heads_last(x):
    """[B, Hk, G, S, D] -> [B, S, Hk * G, D]."""
    b, hk, groups, s, d = x.shape
    return oarlock.reshape(oarlock.transpose(x, [0, 3, 1, 2, 4]), [b, s, hk * groups, d])


def _composite_grad(ctx, g, g_probs):
    """The gradients with public ops, so a recorded backward can itself be differentiated. g_probs is the
    gradient that reaches the saved probabilities when a higher-order graph used them."""
    q, k, v, _, p, keep = ctx.saved
    a = ctx.attrs
    unbatched = q.ndim == 3
    if unbatched:
        g, q, k, v = (oarlock.unsqueeze(t, 0) for t in (g, q, k, v))
    hk = k.shape[2]
    scale = _scale(a["scale"], q.shape[-1])
    rate = _dropout_rate(a["dropout_p"], a["training"])
    q5, k5, v5, g5 = _heads_first(q, hk) * scale, _heads_first(k, hk), _heads_first(v, hk), \
        _heads_first(g, hk)
    drop = oarlock.cast(keep, p.dtype) * _dropout_scale(rate) if rate else None
    weights = p if drop is None else p * drop
    dv = _heads_last(oarlock.sum(oarlock.matmul(weights, g5, transpose_x=True), axis=2, keepdim=True))
    dp = oarlock.matmul(g5, v5, transpose_y=True)
    if drop is not None:
        dp = dp * drop
    if g_probs is not None:
        dp = dp + g_probs
    ds = p * (dp - oarlock.sum(dp * p, axis=-1, keepdim=True))
    dq = _heads_last(oarlock.matmul(ds, k5)) * scale
    dk = _heads_last(oarlock.sum(oarlock.matmul(ds, q5, transpose_x=True), axis=2, keepdim=True))
    grads = (dq, dk, dv)
    return tuple(oarlock.squeeze(t, 0) for t in grads) if unbatched else grads


def _sdpa_grad(ctx, g, g_probs, _g_keep):
    q, k, v, out, p, keep = ctx.saved
    if g is None:  # only a higher-order graph used the probabilities
        g = oarlock.zeros_like(out)
    if g_probs is None and not oarlock.is_grad_enabled():
        a = ctx.attrs
        dq, dk, dv = _scaled_dot_product_attention_grad(g, q, k, v, out, p, keep,
                                                         _dropout_rate(a["dropout_p"], a["training"]), a["scale"],
                                                         a["is_causal"])
    else:
        dq, dk, dv = _composite_grad(ctx, g, g_probs)
    return dq, dk, dv, None


_scaled_dot_product_attention_grad = None  # the internal backward op (ops.define's callable, set by register)


def register(ops):
    floats = ("float",)
    ops.define(f"{_FN}(query: Tensor, key: Tensor, value: Tensor, attn_mask: OptTensor = None, "
               "dropout_p: float = 0.0, is_causal: bool = False, training: bool = True, scale: float|None = None) "
               "-> Tensor",
               public=[f"oarlock.nn.functional.{_FN}"], promote=("query", "key", "value"), dtypes=floats,
               nondiff=("attn_mask",), random=True, intermediate=2, grad=_sdpa_grad,
               saves=("query", "key", "value", "out", "out1", "out2"), amp="white",
               doc="softmax(scale * query key^T + mask) value over [batch, seq_len, num_heads, head_dim] inputs "
                   "(Paddle's layout), fused; is_causal, bool or additive masks, dropout, grouped-query heads.")
    ops.kernel(_FN)(_sdpa)
    global _scaled_dot_product_attention_grad
    _scaled_dot_product_attention_grad = ops.define(
        f"_{_FN}_grad(grad: Tensor, query: Tensor, key: Tensor, value: Tensor, out: Tensor, probs: Tensor, "
        "keep: Tensor, dropout_p: float = 0.0, scale: float|None = None, is_causal: bool = False) "
        "-> tuple[Tensor, Tensor, Tensor]",
        internal=True, promote=("grad", "query", "key", "value", "out"), dtypes=floats,
        doc="The fused backward of scaled_dot_product_attention: (d query, d key, d value) from the output "
            "gradient, the inputs, the output and the saved probabilities; is_causal=True skips the blocks "
            "above the diagonal, whose probabilities must be zero.")
    ops.kernel(f"_{_FN}_grad")(_sdpa_backward)
