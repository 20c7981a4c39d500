"""FlashMask attention kernels (Paddle's flashmask_attention; FlashMask, arXiv 2410.01359), generic over `xp`.

Layout (Paddle's BSHD): query [B, Sq, Hq, D]; key [B, Sk, Hk, D]; value [B, Sk, Hk, Dv]; out [B, Sq, Hq, Dv];
lse [B, Hq, Sq] (float32; float64 for float64 inputs). Hq is a multiple of Hk (grouped-query attention: query
head h uses key/value head h // (Hq // Hk)).

Mask: startend_row_indices int32 [B, Hm, Sk, C], Hm in {1, Hk, Hq}, C in {1, 2, 4}. Column j describes key j with
query-row indices (half-open intervals, Sq = nothing masked):
- causal, C=1 (LTS): rows >= LTS[j] masked, plus the causal triangle;
- causal, C=2 (LTS, LTE): rows in [LTS[j], LTE[j]) masked, plus causal;
- non-causal, C=2 (LTS, UTE): rows >= LTS[j] and rows < UTE[j] masked;
- non-causal, C=4 (LTS, LTE, UTS, UTE): rows in [LTS, LTE) and rows in [UTS, UTE) masked.
Causal (and window) constraints align the bottom-right corner when Sq != Sk: with off = Sk - Sq, key j is hidden
from query i when j > i + off. A window (wl, wr) lets query i see keys [i + off - wl, i + off + wr] (a causal
window w is (w, 0) plus causality). A fully masked query row gives out 0 and lse -inf.

Algorithm. Internally the query heads of a key/value group are folded into the rows: Q is [B, Hk, Sq * G, D] with
row r * G + g (a copy of the input, pre-multiplied by the softmax scale), so one batched matmul per tile covers all
batches and heads and grouped heads never repeat K/V. Keys are kept as K^T [B, Hk, D, Sk] and V [B, Hk, Sk, Dv];
a tile's operands are column/row slices of these (BLAS-compatible strided views, no copies).
Before the loops, for every key block (BLOCK_K columns) and every mask vector the min and max over the block's
columns (and over batch and mask heads) are computed; with them each (query block, key block) tile is classified
in one vectorised step as
- SKIP: fully masked for every batch and head (no loads, no matmul),
- FULL: no element masked (no mask work),
- PARTIAL: the tile's boolean mask is built from the vectors (rows >= LTS etc.) by broadcasting [bq] row indices
  against the [B, Hm, bk] column vectors, together with the causal / window constraints, and applied as -inf.
Forward: for each query block, online softmax (running max m, running sum l, accumulator) in float32 over the
non-skipped key blocks. Backward (FlashAttention-2): for each key block, over its non-skipped query blocks,
recompute P = exp(S - lse) from the saved lse, dV^T += dO^T P, dP = dO V^T, dS = P (dP - D) with
D = rowsum(dO * O) - dlse, dQ += dS K, dK^T += Q^T dS. Extra memory is O(S) plus a few tiles; no S x S array.

Dropout (training, p > 0) drops attention probabilities (kept ones scaled by 1 / (1 - p)). The keep decision of
element (b, hq, i, j) is a counter-based hash (splitmix64) of (seed, offset, b, hq, i, j), so backward regenerates
the forward's mask tile by tile; the same seed/offset reproduces output and gradients. lse is that of the
undropped scores.
"""

from __future__ import annotations

import math

import numpy

from oarlock_flashmask import _parallel

_FN = "flashmask_attention"
BLOCK_Q = 128
BLOCK_K = 128

SKIP, FULL, PARTIAL = 0, 1, 2
_M64 = (1 << 64) - 1


def _err(arg, got, accepted, cls=ValueError):
    return cls(f"{_FN}(): argument '{arg}' {got}; accepted: {accepted}")


def _compute_dtype(xp, dtype):
    return xp.float64 if numpy.dtype(dtype) == numpy.float64 else xp.float32


# -- checks -------------------------------------------------------------------------------------------

def check_inputs(xp, q, k, v, sri, causal, window):
    """Validate shapes, dtypes and mask values; returns (B, Sq, Hq, Sk, Hk, D, Dv, Hm, C)."""
    for arg, x in (("query", q), ("key", k), ("value", v)):
        if numpy.dtype(x.dtype).kind not in "fV" and str(x.dtype) != "bfloat16":
            raise _err(arg, f"has dtype {x.dtype}", "float16, bfloat16, float32, float64", TypeError)
        if x.ndim != 4:
            raise _err(arg, f"has shape {list(x.shape)}", "a 4-D [batch, seq_len, num_heads, head_dim] tensor")
    b, sq, hq, d = q.shape
    if not (k.shape[0] == b and v.shape[0] == b):
        raise _err("key", f"batch sizes differ: query {list(q.shape)}, key {list(k.shape)}, value {list(v.shape)}",
                   "the same batch size for query, key and value")
    sk, hk = k.shape[1], k.shape[2]
    if v.shape[1] != sk or v.shape[2] != hk:
        raise _err("value", f"has shape {list(v.shape)} but key {list(k.shape)}",
                   "the same seq_len and num_heads for key and value")
    if k.shape[3] != d or v.shape[3] != d:
        raise _err("key", f"head dims differ: query {d}, key {k.shape[3]}, value {v.shape[3]}",
                   "the same head_dim for query, key and value")
    if hk == 0 or hq % hk:
        raise _err("query", f"has {hq} heads and key/value {hk}", "num_heads of query a multiple of key's")
    hm = c = None
    if sri is not None:
        if window is not None:
            raise _err("window_size", f"= {window} given together with startend_row_indices",
                       "window_size or startend_row_indices, not both")
        if sri.dtype != numpy.int32:
            raise _err("startend_row_indices", f"has dtype {sri.dtype}", "int32", TypeError)
        if sri.ndim != 4:
            raise _err("startend_row_indices", f"has shape {list(sri.shape)}", "a 4-D [batch, heads, seq_len_k, C]")
        bm, hm, skm, c = sri.shape
        if c not in (1, 2, 4) or (causal and c == 4) or (not causal and c == 1):
            raise _err("startend_row_indices", f"has C = {c} (last dim) with causal={causal}",
                       "C in {1, 2} when causal, {2, 4} when not causal")
        if bm != b:
            raise _err("startend_row_indices", f"has batch {bm} but query {b}", "the batch size of query")
        if hm not in (1, hk, hq):
            raise _err("startend_row_indices", f"has {hm} heads", f"1, {hk} (key heads) or {hq} (query heads)")
        if skm != sk:
            raise _err("startend_row_indices", f"has seq_len {skm} (dim 2) but key has {sk}", "key's seq_len")
        if sri.size:
            lo, hi = int(sri.min()), int(sri.max())
            if lo < 0 or hi > sq:
                raise _err("startend_row_indices", f"has values in [{lo}, {hi}]", f"values in [0, {sq}] (seq_len_q)")
            if (causal and c == 2) or c == 4:
                if bool((sri[..., 0] > sri[..., 1]).any()):
                    raise _err("startend_row_indices", "has LTS > LTE (column 0 > column 1)", "LTS <= LTE")
            if c == 4 and bool((sri[..., 2] > sri[..., 3]).any()):
                raise _err("startend_row_indices", "has UTS > UTE (column 2 > column 3)", "UTS <= UTE")
    return b, sq, hq, sk, hk, d, v.shape[3], hm, c


# -- the mask -----------------------------------------------------------------------------------------

class _Mask:
    """The mask of one call: constraints from the vectors plus causal / window, tile classification and tiles."""

    def __init__(self, xp, sri, causal, wl, wr, b, sq, sk, hk, g, bq, bk):
        self.xp, self.causal, self.sq, self.sk, self.bq, self.bk = xp, causal, sq, sk, bq, bk
        self.off = sk - sq
        self.window = None if wl < 0 and wr < 0 else (wl if wl >= 0 else sk + sq, wr if wr >= 0 else sk + sq)
        self.cons = []  # (kind, vectors [B, h, 1, g, Sk]) with kind in "ge", "lt", "in"
        if sri is not None:
            hm, c = sri.shape[1], sri.shape[3]
            shape = [b, 1, 1, 1, sk] if hm == 1 else ([b, hk, 1, 1, sk] if hm == hk else [b, hk, 1, g, sk])

            def col(i):
                return xp.ascontiguousarray(sri[..., i].reshape(shape))
            if causal and c == 1:
                self.cons.append(("ge", col(0)))
            elif causal:
                self.cons.append(("in", col(0), col(1)))
            elif c == 2:
                self.cons.append(("ge", col(0)))
                self.cons.append(("lt", col(1)))
            else:
                self.cons.append(("in", col(0), col(1)))
                self.cons.append(("in", col(2), col(3)))
        self.nqb, self.nkb = -(-sq // bq), -(-sk // bk)
        self.classes = self._classify()

    def _block_stats(self, vec):
        """(min, max) over each key block's columns (and batch and heads): two [nkb] arrays."""
        xp = self.xp
        flat = vec.reshape(-1, self.sk)
        pad = self.nkb * self.bk - self.sk
        if pad:
            flat = xp.concatenate([flat, xp.repeat(flat[:, -1:], pad, axis=1)], axis=1)
        blocks = flat.reshape(flat.shape[0], self.nkb, self.bk)
        return blocks.min(axis=(0, 2)).astype(xp.int64), blocks.max(axis=(0, 2)).astype(xp.int64)

    def _classify(self):
        xp = self.xp
        r0 = (xp.arange(self.nqb, dtype=xp.int64) * self.bq)[:, None]
        r1 = xp.minimum(r0 + self.bq, self.sq)
        c0 = (xp.arange(self.nkb, dtype=xp.int64) * self.bk)[None, :]
        c1 = xp.minimum(c0 + self.bk, self.sk)
        shape = (self.nqb, self.nkb)
        full = xp.zeros(shape, dtype=bool)  # fully masked
        clean = xp.ones(shape, dtype=bool)  # nothing masked
        if self.causal:
            full |= c0 > r1 - 1 + self.off
            clean &= c1 - 1 <= r0 + self.off
        if self.window is not None:
            wl, wr = self.window
            full |= (c1 - 1 < r0 + self.off - wl) | (c0 > r1 - 1 + self.off + wr)
            clean &= (c0 >= r1 - 1 + self.off - wl) & (c1 - 1 <= r0 + self.off + wr)
        for con in self.cons:
            if con[0] == "ge":
                lo, hi = self._block_stats(con[1])
                full |= r0 >= hi[None]
                clean &= r1 <= lo[None]
            elif con[0] == "lt":
                lo, hi = self._block_stats(con[1])
                full |= r1 <= lo[None]
                clean &= r0 >= hi[None]
            else:
                slo, shi = self._block_stats(con[1])
                elo, ehi = self._block_stats(con[2])
                full |= (r0 >= shi[None]) & (r1 <= elo[None])
                clean &= (r1 <= slo[None]) | (r0 >= ehi[None]) | (slo >= ehi)[None]
        classes = xp.full(shape, PARTIAL, dtype=xp.int8)
        classes[clean] = FULL
        classes[full] = SKIP
        if self.sq == 0 or self.sk == 0:
            classes[...] = SKIP
        return classes

    def tile(self, r0, r1, c0, c1):
        """The boolean mask (True = masked) of a tile, broadcastable to [B, Hk, bq, G, bk]."""
        xp = self.xp
        rows = xp.arange(r0, r1, dtype=xp.int32)[:, None, None]
        cols = xp.arange(c0, c1, dtype=xp.int32)
        m = None
        if self.causal:
            m = cols > rows + self.off
        if self.window is not None:
            wl, wr = self.window
            w = (cols < rows + (self.off - wl)) | (cols > rows + (self.off + wr))
            m = w if m is None else m | w
        for con in self.cons:
            if con[0] == "ge":
                t = rows >= con[1][..., c0:c1]
            elif con[0] == "lt":
                t = rows < con[1][..., c0:c1]
            else:
                t = (rows >= con[1][..., c0:c1]) & (rows < con[2][..., c0:c1])
            m = t if m is None else m | t
        return m


def _apply_mask(xp, s, mask, shape5):
    s5 = s.reshape(shape5)
    if xp is numpy:
        numpy.copyto(s5, -numpy.inf, where=mask)
        return s
    return xp.where(mask, xp.asarray(-xp.inf, dtype=s.dtype), s5).reshape(s.shape)


# -- dropout ------------------------------------------------------------------------------------------

def _keep_scale(xp, seed, offset, p, b, hq, hk, g, sq, sk, r0, r1, c0, c1, dtype):
    """The dropout multiplier of a tile, [B, Hk, (r1 - r0) * G, c1 - c0]: 1 / (1 - p) where kept, else 0. A
    splitmix64 hash of (seed, offset, batch, query head, row, column)."""
    u64 = xp.uint64
    key = (seed * 0x9E3779B97F4A7C15 + offset * 0xD1B54A32D192ED03 + 0x632BE59BD9B4E019) & _M64
    bterm = (xp.arange(b, dtype=u64) * u64(hq))[:, None, None, None, None]
    hterm = (xp.arange(hk, dtype=u64)[:, None] * u64(g) + xp.arange(g, dtype=u64)[None, :])[None, :, None, :, None]
    rows = xp.arange(r0, r1, dtype=u64)[:, None, None]
    cols = xp.arange(c0, c1, dtype=u64)
    z = ((bterm + hterm) * u64(sq) + rows) * u64(sk) + cols + u64(key)
    z = (z ^ (z >> u64(30))) * u64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> u64(27))) * u64(0x94D049BB133111EB)
    z = z ^ (z >> u64(31))
    u = (z >> u64(40)).astype(xp.float32) * xp.float32(1.0 / (1 << 24))
    scale = 0.0 if p >= 1.0 else 1.0 / (1.0 - p)
    out = xp.where(u >= xp.float32(p), xp.asarray(scale, dtype=dtype), xp.asarray(0, dtype=dtype))
    return out.reshape(b, hk, (r1 - r0) * g, c1 - c0)


def _seed(xp, seed_offset, p, generator):
    if seed_offset is not None:
        flat = seed_offset.reshape(-1)
        if flat.size != 2:
            raise _err("fixed_seed_offset", f"has {flat.size} elements", "2 integers (seed, offset)")
        return int(flat[0]) & _M64, int(flat[1]) & _M64
    if p > 0 and generator is not None:
        return int(generator.integers(0, 2 ** 62)), 0
    return 0, 0


# -- layout helpers -----------------------------------------------------------------------------------

def _rows_layout(xp, x, hk, ct, scale=None):
    """[B, S, H, D] -> a new contiguous [B, Hk, S * G, D] (row s * G + g is query head hk * G + g)."""
    b, s, h, d = x.shape
    out = xp.empty((b, hk, s, h // hk, d), dtype=ct)
    out[...] = x.reshape(b, s, hk, h // hk, d).transpose(0, 2, 1, 3, 4)
    if scale is not None:
        out *= scale
    return out.reshape(b, hk, s * (h // hk), d)


def _from_rows(xp, x, b, s, h, dtype):
    """[B, Hk, S * G, D] -> [B, S, H, D] of `dtype`."""
    hk, d = x.shape[1], x.shape[3]
    y = x.reshape(b, hk, s, h // hk, d).transpose(0, 2, 1, 3, 4).reshape(b, s, h, d)
    return xp.ascontiguousarray(y).astype(dtype, copy=False)


def _keys_t(xp, k, ct):
    """[B, S, Hk, D] -> contiguous [B, Hk, D, S]."""
    out = xp.empty((k.shape[0], k.shape[2], k.shape[3], k.shape[1]), dtype=ct)
    out[...] = k.transpose(0, 2, 3, 1)
    return out


def _keys(xp, k, ct):
    """[B, S, Hk, D] -> contiguous [B, Hk, S, D]."""
    out = xp.empty((k.shape[0], k.shape[2], k.shape[1], k.shape[3]), dtype=ct)
    out[...] = k.transpose(0, 2, 1, 3)
    return out


def _lse_out(xp, lse, b, hk, sq, g):
    """[B, Hk, Sq * G] -> [B, Hq, Sq]."""
    return xp.ascontiguousarray(lse.reshape(b, hk, sq, g).transpose(0, 1, 3, 2).reshape(b, hk * g, sq))


def _lse_rows(xp, lse, hk, ct):
    """[B, Hq, Sq] -> [B, Hk, Sq * G, 1]."""
    b, hq, sq = lse.shape
    g = hq // hk
    return xp.ascontiguousarray(lse.reshape(b, hk, g, sq).transpose(0, 1, 3, 2)).astype(ct).reshape(b, hk, sq * g, 1)


def _scale(softmax_scale, d):
    return softmax_scale if softmax_scale is not None else (1.0 / math.sqrt(d) if d else 1.0)


# -- forward ------------------------------------------------------------------------------------------

def flashmask_forward(xp, query, key, value, startend_row_indices=None, fixed_seed_offset=None, dropout=0.0,
                      causal=False, window_left=-1, window_right=-1, softmax_scale=None, *, generator=None):
    """Returns (out [B, Sq, Hq, Dv], lse [B, Hq, Sq], seed_offset int64 [2])."""
    window = None if window_left < 0 and window_right < 0 else (window_left, window_right)
    b, sq, hq, sk, hk, d, dv, hm, c = check_inputs(xp, query, key, value, startend_row_indices, causal, window)
    if not 0.0 <= dropout <= 1.0:
        raise _err("dropout", f"= {dropout}", "a probability in [0, 1]")
    g = hq // hk
    ct = _compute_dtype(xp, query.dtype)
    scale = _scale(softmax_scale, d)
    seed, offset = _seed(xp, fixed_seed_offset, dropout, generator)
    bq, bk = BLOCK_Q, BLOCK_K
    mask = _Mask(xp, startend_row_indices, causal, window_left, window_right, b, sq, sk, hk, g, bq, bk)
    q = _rows_layout(xp, query, hk, ct, scale)
    kt = _keys_t(xp, key, ct)
    v = _keys(xp, value, ct)
    out = xp.zeros((b, hk, sq * g, dv), dtype=ct)
    lse = xp.full((b, hk, sq * g, 1), -xp.inf, dtype=ct)
    ones = xp.ones((bk, 1), dtype=ct)
    classes = numpy.asarray(mask.classes) if xp is not numpy else mask.classes

    def blocks(_worker, rows):
        for i in rows:
            _forward_block(xp, i, classes, mask, q, kt, v, out, lse, ones, ct, dropout, seed, offset, b, hq, hk, g,
                           sq, sk, dv)
    _parallel.run(xp, blocks, [i for i in range(mask.nqb) if (classes[i] != SKIP).any()])
    out_b = _from_rows(xp, out, b, sq, hq, query.dtype)
    lse_dtype = xp.float64 if ct == xp.float64 else xp.float32
    lse_b = _lse_out(xp, lse.reshape(b, hk, sq * g), b, hk, sq, g).astype(lse_dtype, copy=False)
    so = xp.asarray([seed if seed < 2 ** 63 else seed - 2 ** 64, offset if offset < 2 ** 63 else offset - 2 ** 64],
                    dtype=xp.int64)
    return out_b, lse_b, so


def _forward_block(xp, i, classes, mask, q, kt, v, out, lse, ones, ct, dropout, seed, offset, b, hq, hk, g, sq, sk,
                   dv):
    """One query block: online softmax over its non-skipped key blocks; writes out and lse rows."""
    bq, bk = mask.bq, mask.bk
    r0, r1 = i * bq, min((i + 1) * bq, sq)
    active = [j for j in range(mask.nkb) if classes[i, j] != SKIP]
    n = (r1 - r0) * g
    qi = q[:, :, r0 * g:r1 * g]
    m = xp.full((b, hk, n, 1), -xp.inf, dtype=ct)
    run_sum = xp.zeros((b, hk, n, 1), dtype=ct)
    acc = xp.zeros((b, hk, n, dv), dtype=ct)
    any_partial = False
    for j in active:
        c0, c1 = j * bk, min((j + 1) * bk, sk)
        s = xp.matmul(qi, kt[..., c0:c1])
        partial = classes[i, j] == PARTIAL
        if partial:
            any_partial = True
            s = _apply_mask(xp, s, mask.tile(r0, r1, c0, c1), (b, hk, r1 - r0, g, c1 - c0))
        m_new = xp.maximum(m, s.max(axis=-1, keepdims=True))
        if any_partial:
            m_use = xp.where(xp.isfinite(m_new), m_new, xp.zeros((), ct))
        else:
            m_use = m_new
        alpha = xp.exp(m - m_use)
        s -= m_use
        xp.exp(s, out=s)
        run_sum *= alpha
        run_sum += xp.matmul(s, ones[:c1 - c0])
        if dropout > 0:
            s *= _keep_scale(xp, seed, offset, dropout, b, hq, hk, g, sq, sk, r0, r1, c0, c1, ct)
        acc *= alpha
        acc += xp.matmul(s, v[:, :, c0:c1])
        m = m_new
    empty = run_sum == 0
    l_safe = xp.where(empty, xp.ones((), ct), run_sum)
    xp.divide(acc, l_safe, out=out[:, :, r0 * g:r1 * g])
    lse[:, :, r0 * g:r1 * g] = xp.where(empty, xp.asarray(-xp.inf, dtype=ct), m + xp.log(l_safe))


# -- backward -----------------------------------------------------------------------------------------

def flashmask_backward(xp, grad, query, key, value, out, lse, startend_row_indices=None, seed_offset=None,
                       grad_lse=None, dropout=0.0, causal=False, window_left=-1, window_right=-1,
                       softmax_scale=None):
    """(d query, d key, d value) from the output gradient, the inputs, out and lse (recomputing per tile)."""
    window = None if window_left < 0 and window_right < 0 else (window_left, window_right)
    b, sq, hq, sk, hk, d, dv, hm, c = check_inputs(xp, query, key, value, startend_row_indices, causal, window)
    g = hq // hk
    ct = _compute_dtype(xp, query.dtype)
    scale = _scale(softmax_scale, d)
    seed, offset = _seed(xp, seed_offset, 0.0, None)
    bq, bk = BLOCK_Q, BLOCK_K
    mask = _Mask(xp, startend_row_indices, causal, window_left, window_right, b, sq, sk, hk, g, bq, bk)
    q = _rows_layout(xp, query, hk, ct, scale)                      # [B, Hk, Sq*G, D], scaled
    qt = xp.ascontiguousarray(q.swapaxes(-1, -2))                   # [B, Hk, D, Sq*G]
    do = _rows_layout(xp, grad, hk, ct)                             # [B, Hk, Sq*G, Dv]
    dot = xp.ascontiguousarray(do.swapaxes(-1, -2))                 # [B, Hk, Dv, Sq*G]
    o = _rows_layout(xp, out, hk, ct)
    delta = (do * o).sum(axis=-1, keepdims=True)                    # [B, Hk, Sq*G, 1]
    del o
    if grad_lse is not None:
        delta -= _lse_rows(xp, grad_lse, hk, ct)
    lse_r = _lse_rows(xp, lse, hk, ct)
    lse_r = xp.where(xp.isfinite(lse_r), lse_r, xp.asarray(xp.inf, dtype=ct))  # masked rows: P = 0
    k = _keys(xp, key, ct)                                          # [B, Hk, Sk, D]
    kt = _keys_t(xp, key, ct)                                       # [B, Hk, D, Sk]
    vt = _keys_t(xp, value, ct)                                     # [B, Hk, Dv, Sk]
    dq = xp.zeros((b, hk, sq * g, d), dtype=ct)
    dkt = xp.zeros((b, hk, d, sk), dtype=ct)
    dvt = xp.zeros((b, hk, dv, sk), dtype=ct)
    classes = numpy.asarray(mask.classes) if xp is not numpy else mask.classes
    dq_parts = []

    def blocks(worker, cols):
        dq_w = dq if worker == 0 else xp.zeros_like(dq)
        for j in cols:
            _backward_block(xp, j, classes, mask, q, qt, do, dot, delta, lse_r, k, kt, vt, dq_w, dkt, dvt, ct,
                            dropout, seed, offset, b, hq, hk, g, sq, sk)
        if worker:
            dq_parts.append(dq_w)
    _parallel.run(xp, blocks, [j for j in range(mask.nkb) if (classes[:, j] != SKIP).any()])
    for part in dq_parts:
        dq += part
    dq *= scale
    dq_b = _from_rows(xp, dq, b, sq, hq, query.dtype)
    dk_b = xp.ascontiguousarray(dkt.transpose(0, 3, 1, 2)).astype(key.dtype, copy=False)
    dv_b = xp.ascontiguousarray(dvt.transpose(0, 3, 1, 2)).astype(value.dtype, copy=False)
    return dq_b, dk_b, dv_b


def _backward_block(xp, j, classes, mask, q, qt, do, dot, delta, lse_r, k, kt, vt, dq, dkt, dvt, ct, dropout, seed,
                    offset, b, hq, hk, g, sq, sk):
    """One key block: dK, dV of its columns and its share of dQ, over its non-skipped query blocks."""
    bq, bk = mask.bq, mask.bk
    c0, c1 = j * bk, min((j + 1) * bk, sk)
    ktj, vtj, kj = kt[..., c0:c1], vt[..., c0:c1], k[:, :, c0:c1]
    dktj, dvtj = dkt[..., c0:c1], dvt[..., c0:c1]
    for i in range(mask.nqb):
        cls = classes[i, j]
        if cls == SKIP:
            continue
        r0, r1 = i * bq, min((i + 1) * bq, sq)
        rs = slice(r0 * g, r1 * g)
        s = xp.matmul(q[:, :, rs], ktj)
        if cls == PARTIAL:
            s = _apply_mask(xp, s, mask.tile(r0, r1, c0, c1), (b, hk, r1 - r0, g, c1 - c0))
        s -= lse_r[:, :, rs]
        xp.exp(s, out=s)                                        # P
        dp = xp.matmul(do[:, :, rs], vtj)
        if dropout > 0:
            z = _keep_scale(xp, seed, offset, dropout, b, hq, hk, g, sq, sk, r0, r1, c0, c1, ct)
            dvtj += xp.matmul(dot[:, :, :, rs], s * z)
            dp *= z
        else:
            dvtj += xp.matmul(dot[:, :, :, rs], s)
        dp -= delta[:, :, rs]
        dp *= s                                                 # dS
        dq[:, :, rs] += xp.matmul(dp, kj)
        dktj += xp.matmul(qt[:, :, :, rs], dp)


# -- dense mask ---------------------------------------------------------------------------------------

def densemask(xp, startend_row_indices, dtype=None, causal=True):
    """Paddle's flashmask_to_densemask: [B, Hm, S, S] of `dtype` (S = seq_len of the indices), 0 where attention
    is allowed and -inf where masked (causal: key j hidden from rows < j, top-left = bottom-right for S x S)."""
    sri = startend_row_indices
    if sri.ndim != 4 or sri.shape[3] not in (1, 2, 4):
        raise ValueError(f"flashmask_to_densemask(): argument 'startend_row_indices' has shape {list(sri.shape)}; "
                         "accepted: [batch, heads, seq_len, C] with C in {1, 2, 4}")
    b, h, s, c = sri.shape
    rows = xp.arange(s)[:, None]
    vec = [sri[..., i][:, :, None, :] for i in range(c)]
    has_end = (causal and c == 2) or (not causal and c == 4)
    masked = (rows >= vec[0]) & (rows < vec[1]) if has_end else (rows >= vec[0])
    if causal:
        masked = masked | (xp.arange(s)[None, :] > rows)
    elif c == 4:
        masked = masked | ((rows >= vec[2]) & (rows < vec[3]))
    elif c >= 2:
        masked = masked | (rows < vec[1])
    dtype = dtype if dtype is not None else xp.float32
    zero = xp.zeros((), dtype=dtype)
    return xp.where(masked, xp.asarray(-xp.inf).astype(dtype), zero)
