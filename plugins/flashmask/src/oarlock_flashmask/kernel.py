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
window w is (w, 0) plus causality). A fully masked query row gives out 0 and lse -inf. FlashMask V2's block_mask
(int32 [B, Hm, ceil(Sq / 128), ceil(Sk / 128)], Hm that of the vectors) masks besides the 128 x 128 blocks of scores
whose entry is 0 (BLOCK_MASK); a tile all of whose blocks are 0 for every batch and head is skipped.

Algorithm. Batch and key heads are flattened into one axis f = b * Hk + h ("heads"), and the query heads of a
key/value group are folded into the rows: head f's query rows are [Sq * G, D] with row s * G + g, so grouped heads
never repeat K/V. The working layouts are made per head on the workers: Q (pre-multiplied by scale * log2(e):
scores are in base 2), K^T, V^T with one extra row of ones (the backward's dO V^T against dO's column of -D)
(the score matmuls read K^T; their rows padded off power-of-two strides), K, and V. They and the other O(S) working
arrays are reused across calls (_scratch), as fresh multi-MiB arrays pay a page fault per page every call.
Before the loops, for every key block (BLOCK_K columns) and every mask vector the min and max over the block's
columns (and over batch and mask heads) are computed; with them each (query block, key block) tile is classified
in one vectorised step as
- SKIP: fully masked for every batch and head (no loads, no matmul),
- FULL: no element masked (no mask work),
- PARTIAL: the tile's boolean mask is built from the vectors (rows >= LTS etc.) by broadcasting [bq] row indices
  against the [B, Hm, bk] column vectors, together with the causal / window constraints (cached by offset when
  there are no vectors), and applied as -inf.
Consecutive non-skipped tiles of a tile row (or column) form runs, cut into pieces of up to SPAN; one matmul covers
a piece for a group of heads (the piece's score array of about SPAN_ELEMS elements stays in L2), and only its
PARTIAL tiles get mask work. Work items are (head group, block), head-group major; the numpy kernels run them on a
thread pool (_parallel).
Forward: for each query block, online softmax in base 2 over its runs. A row's reference m starts at 0 and stays
there unless scores pass ~64 (base 2), so the usual step is exp2 and the two matmuls only (no max or subtraction
pass), with overflow detected from the row sums and redone exactly, and underflowed blocks redone with the standard
online softmax (see _forward_rows). exp2 with the row sums is the backend's exp2_rows (plugin_api.xp_function:
oarlock-cpu's one-pass float32 loop), the products its matmul_serial (MKL on the worker's thread), where it has them.
Fused kernels: for masks without vectors (plain causal, or none), float32 and no dropout, the forward after the
preparation is one call of the backend's `flashmask_forward` where it has one (oarlock-cpu: C over MKL, units of
FUSED_BLOCK_Q query positions on its worker pool, the standard online softmax per row; see its _flash.c), and the
backward's accumulation one call of its `flashmask_backward` (units of FUSED_BWD_BLOCK_K keys, the same five
products per tile as below, dQ shares per pool piece): the tiles cost Python per run and several numpy passes
per score block, which left plain causal slower than PyTorch's C++ is_causal kernel. Everything else runs the
tiles below.
Backward (FlashAttention-2): for each key block, over its runs of query blocks, P = exp2(S - lse) (lse
subtracted after the score matmul, so every score rounds as in the forward; oarlock-cpu's exp2_rows does the
subtraction and exp2 in one pass), dP - D straight from dO V^T with -D in dO's extra
column (D = rowsum(dO * O) - dlse), dV += P^T dO, dS = P (dP - D), dQ += dS (K - c) + c dlse with c the mean key
(rowsum(dS) = dlse; keys' common part then does not amplify dS's rounding), dK += dS^T Q. Extra memory is O(S) plus
a few tiles; no S x S array.

Dropout (training, p > 0) drops attention probabilities (kept ones scaled by 1 / (1 - p)). The keep decision of
element (b, hq, i, j) is a counter-based hash (splitmix64) of (seed, offset, b, hq, i, j), so backward regenerates
the forward's mask tile by tile; the same seed/offset reproduces output and gradients. lse is that of the
undropped scores.
"""

from __future__ import annotations

import contextlib
import math

import numpy
from oarlock.plugin_api import xp_function

from oarlock_flashmask import _parallel, _scratch

_FN = "flashmask_attention"
BLOCK_Q = 128
BLOCK_K = 128

SKIP, FULL, PARTIAL = 0, 1, 2
_M64 = (1 << 64) - 1
LOG2E, LN2 = 1.0 / math.log(2.0), math.log(2.0)
# Tiles are classified BLOCK_Q x BLOCK_K; runs of them are computed together. A run's score array (a group of
# heads x its rows x its columns) holds about SPAN_ELEMS elements (512 KiB of float32, so it and the run's K
# and V stay in a core's 1 MiB L2), with runs of up to SPAN rows or columns (long enough for BLAS to run near its
# peak, and few Python calls) before heads are grouped.
SPAN_ELEMS = 1 << 17
SPAN = 512
_HUGE = 1e30
_RENORM = 2.0 ** 64  # the forward's fast step re-centres a row's reference once its sum passes this
# A row whose sum of 2^(s - m) ends below this may have lost precision to underflow (terms under 2^-126 each, up
# to 2^20 of them, must stay below float32's 2^-24 of the sum): its block is redone with exact steps.
_TINY = 2.0 ** -80
_TILE_CACHE = 16 << 20
BLOCK_MASK = 128  # the rows and columns of one block_mask entry (FlashMask V2's, fixed at 128 in Paddle)


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


def check_block_mask(bm, sri, b, sq, sk):
    """FlashMask V2's block_mask: int32 [B, Hm, ceil(Sq / 128), ceil(Sk / 128)], Hm that of startend_row_indices
    (which it needs, as in Paddle)."""
    if sri is None:
        raise _err("block_mask", "was given without startend_row_indices", "block_mask together with "
                   "startend_row_indices (as in Paddle)")
    if bm.dtype != numpy.int32:
        raise _err("block_mask", f"has dtype {bm.dtype}", "int32", TypeError)
    want = (b, sri.shape[1], -(-sq // BLOCK_MASK), -(-sk // BLOCK_MASK))
    if tuple(bm.shape) != want:
        raise _err("block_mask", f"has shape {list(bm.shape)}", f"{list(want)}: [batch, heads of "
                   f"startend_row_indices, ceil(seq_len_q / {BLOCK_MASK}), ceil(seq_len_k / {BLOCK_MASK})]")


# -- the mask -----------------------------------------------------------------------------------------

class _Mask:
    """The mask of one call: constraints from the vectors plus causal / window, tile classification and tiles."""

    def __init__(self, xp, sri, causal, wl, wr, b, sq, sk, hk, g, bq, bk, block_mask=None):
        self.xp, self.causal, self.sq, self.sk, self.bq, self.bk = xp, causal, sq, sk, bq, bk
        self.off = sk - sq
        # block_mask: True where a BLOCK_MASK x BLOCK_MASK block is masked (entry 0), per (batch, key head) f as
        # [F | 1, g', NQB, NKB] (g' = 1 or the group's query heads)
        self.block = None
        if block_mask is not None:
            hm, tail = block_mask.shape[1], list(block_mask.shape[2:])
            gm = g if hm == hk * g and g > 1 else 1  # query heads per key head the entries distinguish
            masked = (block_mask == 0).reshape([b, hm // gm, gm] + tail)
            if b * (hm // gm) == 1:
                self.block = masked.reshape([1, gm] + tail)  # one block mask for every (batch, key head)
            else:
                self.block = xp.ascontiguousarray(xp.broadcast_to(masked, [b, hk, gm] + tail)).reshape(
                    [b * hk, gm] + tail)
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
        # the kernels flatten (batch, key head) into one axis f = b * Hk + h; tiles take the vectors per f
        self.flat = [(con[0],) + tuple(self._per_f(vec, b, hk) for vec in con[1:]) for con in self.cons]
        # Tile masks the same for every head are kept: causal / window only by (r0 - c0, rows, cols) (the same
        # for every block on a diagonal), else by the tile (built once, not once per head group), up to
        # _TILE_CACHE bytes (masks with partial tiles everywhere would otherwise keep S^2 bytes)
        self._shared = all(x.shape[0] == 1 for con in self.flat for x in con[1:]) and \
            (self.block is None or self.block.shape[0] == 1)
        self._tiles, self._tile_bytes = {}, 0

    def _per_f(self, vec, b, hk):
        """[B, h, 1, g', Sk] -> [B * Hk, 1, g', Sk], or [1, 1, g', Sk] when the same for every (batch, head)."""
        xp, gm, sk = self.xp, vec.shape[3], vec.shape[4]
        if vec.shape[0] == 1 and vec.shape[1] == 1:
            return vec.reshape(1, 1, gm, sk)
        return xp.ascontiguousarray(xp.broadcast_to(vec, (b, hk, 1, gm, sk))).reshape(b * hk, 1, gm, sk)

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
        if self.block is not None:
            all_masked, any_masked = self._block_tiles()
            full |= all_masked
            clean &= ~any_masked
        classes = xp.full(shape, PARTIAL, dtype=xp.int8)
        classes[clean] = FULL
        classes[full] = SKIP
        if self.sq == 0 or self.sk == 0:
            classes[...] = SKIP
        return classes

    def _block_tiles(self):
        """([nqb, nkb], [nqb, nkb]): whether every / any block_mask entry a tile overlaps is masked for every /
        some (batch, head). Reduced over each tile row's blocks, then each tile column's (tiles and blocks need
        not align)."""
        xp = self.xp
        flat = self.block.reshape(-1, *self.block.shape[2:])

        def reduce(a, n, size, axis, fn):
            """fn (all / any) over the blocks each tile of `size` along `axis` (n elements) overlaps."""
            parts = []
            for i in range(-(-n // size)):
                lo, hi = i * size // BLOCK_MASK, (min((i + 1) * size, n) - 1) // BLOCK_MASK + 1
                parts.append(fn(a[lo:hi] if axis == 0 else a[:, lo:hi], axis=axis))
            return xp.stack(parts, axis=axis)
        every = reduce(reduce(flat.all(axis=0), self.sq, self.bq, 0, xp.all), self.sk, self.bk, 1, xp.all)
        some = reduce(reduce(flat.any(axis=0), self.sq, self.bq, 0, xp.any), self.sk, self.bk, 1, xp.any)
        return every, some

    def tile(self, f0, f1, r0, r1, c0, c1):
        """The boolean mask (True = masked) of a tile of the flattened (batch, key head) range [f0, f1), rows
        [r0, r1) and columns [c0, c1), broadcastable to [f1 - f0, r1 - r0, G, c1 - c0]."""
        if not self._shared:
            return self._tile(f0, f1, r0, r1, c0, c1)
        key = (r0 - c0, r1 - r0, c1 - c0) if not self.flat and self.block is None else (r0, r1, c0, c1)
        m = self._tiles.get(key)
        if m is None:
            m = self._tile(f0, f1, r0, r1, c0, c1)
            if self._tile_bytes + m.nbytes <= _TILE_CACHE:
                self._tiles[key] = m
                self._tile_bytes += m.nbytes
        return m

    def _tile(self, f0, f1, r0, r1, c0, c1):
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
        for con in self.flat:
            vec = [x[f0:f1, ..., c0:c1] if x.shape[0] > 1 else x[..., c0:c1] for x in con[1:]]
            if con[0] == "ge":
                t = rows >= vec[0]
            elif con[0] == "lt":
                t = rows < vec[0]
            else:
                t = (rows >= vec[0]) & (rows < vec[1])
            m = t if m is None else m | t
        if self.block is not None:
            blk = self.block[f0:f1] if self.block.shape[0] > 1 else self.block
            rb = xp.arange(r0, r1) // BLOCK_MASK
            cb = xp.arange(c0, c1) // BLOCK_MASK
            t = xp.moveaxis(blk[:, :, rb][:, :, :, cb], 1, 2)  # [F, rows, g', cols]
            m = t if m is None else m | t
        return m


def _apply_mask(xp, s, mask, g):
    """Sets the masked scores of `s` ([F, rows * G, cols]: an array or a view into one) to -inf in place."""
    s4 = s.reshape(s.shape[0], -1, g, s.shape[2])  # splits rows * G only: a view, also of a row or column range
    if xp is numpy:
        numpy.copyto(s4, -numpy.inf, where=mask)
    else:
        s4[...] = xp.where(mask, xp.asarray(-xp.inf, dtype=s.dtype), s4)


def _mask_cols(xp, mask, s, f0, f1, r0, r1, c0, partials, g):
    """Masks the partial column ranges `partials` of the scores s of rows [r0, r1) and columns from c0."""
    for p0, p1 in partials:
        _apply_mask(xp, s[..., p0 - c0:p1 - c0], mask.tile(f0, f1, r0, r1, p0, p1), g)


def _mask_rows(xp, mask, s, f0, f1, r0, c0, c1, partials, g):
    """Masks the partial row ranges `partials` of the scores s of rows from r0 and columns [c0, c1)."""
    for p0, p1 in partials:
        _apply_mask(xp, s[:, (p0 - r0) * g:(p1 - r0) * g], mask.tile(f0, f1, p0, p1, c0, c1), g)


# -- dropout ------------------------------------------------------------------------------------------

def _keep_scale(xp, seed, offset, p, g, sq, sk, f0, f1, r0, r1, c0, c1, dtype):
    """The dropout multiplier of a tile, [f1 - f0, (r1 - r0) * G, c1 - c0] (f = batch * Hk + key head): 1 / (1 - p)
    where kept, else 0. A splitmix64 hash of (seed, offset, batch * Hq + query head, row, column); the query head
    of (f, g) is f * G + g counted over the batch."""
    u64 = xp.uint64
    key = (seed * 0x9E3779B97F4A7C15 + offset * 0xD1B54A32D192ED03 + 0x632BE59BD9B4E019) & _M64
    heads = (xp.arange(f0, f1, dtype=u64)[:, None] * u64(g) + xp.arange(g, dtype=u64)[None, :])[:, None, :, None]
    rows = xp.arange(r0, r1, dtype=u64)[:, None, None]
    cols = xp.arange(c0, c1, dtype=u64)
    z = (heads * u64(sq) + rows) * u64(sk) + cols + u64(key)
    z = (z ^ (z >> u64(30))) * u64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> u64(27))) * u64(0x94D049BB133111EB)
    z = z ^ (z >> u64(31))
    u = (z >> u64(40)).astype(xp.float32) * xp.float32(1.0 / (1 << 24))
    scale = 0.0 if p >= 1.0 else 1.0 / (1.0 - p)
    out = xp.where(u >= xp.float32(p), xp.asarray(scale, dtype=dtype), xp.asarray(0, dtype=dtype))
    return out.reshape(f1 - f0, (r1 - r0) * g, c1 - c0)


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

# The kernels work per flattened (batch, key head) f = b * Hk + h ("head" below): head f's query rows are
# [Sq * G, D] (row s * G + g is query head h * G + g at position s), its keys [Sk, D]. The layouts are made per
# head on the workers (numpy releases the GIL in copies), so they do not run on one core while the other waits.

def _per_head(xp, nf, fn):
    """fn(f) for every head f = 0 .. nf - 1, on the workers."""
    def work(_worker, fs):
        for f in fs:
            fn(f)
    _parallel.run(xp, work, list(range(nf)))


def _rows_into(dst, x, f, hk, g, scale=None):
    """dst [Sq * G, D + extra] <- head f of x [B, Sq, Hq, D] (times `scale`); the extra columns are left alone."""
    b, h = divmod(f, hk)
    src = x[b, :, h * g:(h + 1) * g]
    view = dst.reshape(x.shape[1], g, dst.shape[-1])[..., :x.shape[3]]
    if scale is None:
        view[...] = src
    elif isinstance(view, numpy.ndarray):
        numpy.multiply(src, scale, out=view)  # one pass (a lower-precision input is cast on the fly)
    else:
        view[...] = src * scale


def _rows_from(dst, x, f, hk, g):
    """Head f of dst [B, Sq, Hq, D] <- x [Sq * G, D] (cast to dst's dtype)."""
    b, h = divmod(f, hk)
    dst[b, :, h * g:(h + 1) * g] = x.reshape(dst.shape[1], g, x.shape[-1])


def _heads_function(xp, name, x, dst):
    """The backend's array function `name` (one call for every head) where it has one and x and dst share a dtype;
    None otherwise (the caller then works per head)."""
    try:
        fn = xp_function(xp, name)
    except AttributeError:
        return None
    return fn if x.dtype == dst.dtype else None


def _gather_heads(xp, dst, x, hk, scale):
    """dst [F, Sq * G, >= D] <- scale * the rows of every head of x [B, Sq, Hq, D] (_rows_into's layout) by the
    backend's one call where it has one and takes these arrays; False otherwise (nothing written)."""
    fn = _heads_function(xp, "flashmask_gather_heads", x, dst)
    return fn is not None and fn(x, dst, hk, scale, _parallel.workers())


def _scatter_heads(xp, dst, x, parts, hk, scale):
    """The finish's dst [B, S, H, D] <- (x + parts[0] + parts[1] + ...) * scale for every head of x [F, S * G, D]
    (_rows_from's layout; the terms added in that order, so the bits of finish's numpy sums) by the backend's one call
    where it has one and takes these arrays; False otherwise (nothing written)."""
    fn = _heads_function(xp, "flashmask_scatter_heads", x, dst)
    return fn is not None and fn(x, parts, dst, hk, scale, _parallel.workers())


def _transpose_heads(xp, dst, k, hk):
    """dst [F, >= D, Sk] <- K^T of every head of k [B, Sk, Hk, D] by the backend's one call where it has one and
    takes these arrays (oarlock-cpu: C, on its pool); False otherwise (nothing written: _keys_t_into per head)."""
    fn = _heads_function(xp, "flashmask_transpose_heads", k, dst)
    return fn is not None and fn(k, dst, hk, _parallel.workers())


def _keys_t_into(xp, dst, k, f, hk):
    """dst [D or D + 1, Sk] <- K^T of head f of k [B, Sk, Hk, D], with a last row of ones when dst has D + 1 rows
    (V^T in the backward, against dO's column of -D). The score matmuls read K^T:
    BLAS is about 10% faster on this layout than on a transposed view of [Sk, D + 1]. A contiguous copy of the
    head first, then a 2-D transpose (twice as fast as one strided transpose)."""
    b, h = divmod(f, hk)
    d = k.shape[3]
    dst[:d] = xp.ascontiguousarray(k[b, :, h]).T
    if dst.shape[0] > d:
        dst[d] = 1


def _take_t(xp, nf, rows, s, ct):
    """A scratch [nf, rows, s] for K^T or V^T (a view; `.base` goes back to _scratch). Its rows are padded to
    16 elements past a multiple of 16: with a row stride of a large power of two (S = 2048, 4096, ...) the
    rows of a panel BLAS packs all fall into the same cache sets, and the score matmul runs 5-7% slower."""
    return _scratch.take(xp, (nf, rows, -(-s // 16) * 16 + 16), ct)[..., :s]


def _scale(softmax_scale, d):
    return softmax_scale if softmax_scale is not None else (1.0 / math.sqrt(d) if d else 1.0)


# -- spans --------------------------------------------------------------------------------------------

def _spans(line, block, length, max_len):
    """Runs of the non-skipped tiles of one tile row (or column) `line` (classes per block of `block` indices,
    `length` in all), each cut into near-equal pieces of at most `max_len`: [(start, end, partials)] with
    `partials` the [(start, end)] ranges of its PARTIAL tiles (the only ones that need mask work). One matmul
    covers a piece: BLAS is efficient on bigger products and Python pays per call, not per element."""
    active = numpy.flatnonzero(line != SKIP).tolist()
    out = []
    per = max(1, max_len // block)
    i = 0
    while i < len(active):
        e = i + 1
        while e < len(active) and active[e] == active[e - 1] + 1:
            e += 1
        run = active[i:e]
        pieces = -(-len(run) // per)
        for p in range(pieces):
            tiles = run[p * len(run) // pieces:(p + 1) * len(run) // pieces]
            partials = [(j * block, min((j + 1) * block, length)) for j in tiles if line[j] == PARTIAL]
            out.append((tiles[0] * block, min((tiles[-1] + 1) * block, length), partials))
        i = e
    return out


def _split(nf, rows, block, lines):
    """(heads per group, run length) for F = `nf` flattened (batch, key head) pairs, tiles of `rows` x `block`
    and the tile classes `lines` (one line per work item): groups of heads and runs (a multiple of `block`)
    whose score array of about SPAN_ELEMS elements stays in a core's L2 cache. Runs of up to SPAN indices first
    (few calls, efficient BLAS), as long as the lines' non-skipped tiles reach that far on average; where they
    are short (sliding windows, documents) more heads go into a group instead, so an item still carries enough
    work to amortise its fixed Python cost."""
    counts = (lines != SKIP).sum(axis=1)
    used = counts[counts > 0]
    width = min(SPAN, block * max(1, -(-int(used.sum()) // used.size) if used.size else 1))  # mean, rounded up
    heads = max(1, min(nf, SPAN_ELEMS // max(1, rows * width)))
    return heads, max(block, SPAN_ELEMS // max(1, heads * rows) // block * block)


def _heaviest_first(classes):
    """The rows of `classes` with a non-skipped tile, by decreasing count of them (ties in order)."""
    counts = (classes != SKIP).sum(axis=1)
    return [int(i) for i in numpy.argsort(-counts, kind="stable") if counts[i]]


def _matmul(xp):
    """The backend's single-threaded matmul where it has one (oarlock-cpu: MKL on the calling thread, 10-15% less
    CPU time than numpy's OpenBLAS for a causal forward here, same bits at D = 64), else xp.matmul. The tile pool
    is the parallelism (_parallel), so each product must stay on the thread that runs it."""
    try:
        return xp_function(xp, "matmul_serial")
    except AttributeError:
        return xp.matmul


def _exp2_rows(xp):
    """exp2_rows(x, bias, sums): x [A, R, N] <- 2^(x - bias) in place (bias [A, R, 1]), sums <- its row sums
    (None: not wanted). The backend's one-pass version where it has one (oarlock-cpu, float32), else passes."""
    try:
        return xp_function(xp, "exp2_rows")
    except AttributeError:
        exp2 = xp_function(xp, "exp2")

        def passes(x, bias=None, sums=None):
            if bias is not None:
                x -= bias
            exp2(x, out=x)
            if sums is not None:
                xp.sum(x, axis=-1, keepdims=True, out=sums)
            return x
        return passes


def _view(flat, shape):
    """A contiguous array of `shape` on the front of the flat buffer `flat` (a reused scratch array)."""
    return flat[:math.prod(shape)].reshape(shape)


def _quiet(xp):
    """exp2 overflows to inf on purpose in the forward's fast step (detected, then redone exactly)."""
    return numpy.errstate(over="ignore", invalid="ignore") if xp is numpy else contextlib.nullcontext()


# -- forward ------------------------------------------------------------------------------------------

def flashmask_forward(xp, query, key, value, startend_row_indices=None, fixed_seed_offset=None, dropout=0.0,
                      causal=False, window_left=-1, window_right=-1, softmax_scale=None, *, generator=None,
                      block_mask=None):
    """Returns (out [B, Sq, Hq, Dv], lse [B, Hq, Sq], seed_offset int64 [2]). block_mask (FlashMask V2): int32
    [B, Hm, ceil(Sq / 128), ceil(Sk / 128)], entry 0 masking its 128 x 128 block of scores on top of the rest."""
    window = None if window_left < 0 and window_right < 0 else (window_left, window_right)
    b, sq, hq, sk, hk, d, dv, hm, c = check_inputs(xp, query, key, value, startend_row_indices, causal, window)
    if block_mask is not None:
        check_block_mask(block_mask, startend_row_indices, b, sq, sk)
    if not 0.0 <= dropout <= 1.0:
        raise _err("dropout", f"= {dropout}", "a probability in [0, 1]")
    g = hq // hk
    nf = b * hk
    ct = _compute_dtype(xp, query.dtype)
    scale = _scale(softmax_scale, d)
    seed, offset = _seed(xp, fixed_seed_offset, dropout, generator)
    bq, bk = BLOCK_Q, BLOCK_K
    mask = _Mask(xp, startend_row_indices, causal, window_left, window_right, b, sq, sk, hk, g, bq, bk, block_mask)
    # Scores in base 2 (exp2 is cheaper than exp): Q carries scale * log2(e). The score matmul's inner dimension
    # is D itself (an odd 65 ran OpenBLAS's kernels 7% slower): a row's reference m, while not 0, is subtracted
    # by a pass (see _forward_rows).
    q = _scratch.take(xp, (nf, sq * g, d), ct)
    kt = _take_t(xp, nf, d, sk, ct)
    v = _scratch.take(xp, (nf, sk, dv), ct)   # (the weights' row sums come from exp2_rows: P V stays D wide)
    vabs = xp.zeros((nf,), dtype=ct)   # max |V| per head (NaN propagates), for the fast step's overflow bound
    # The fused forward (masks without vectors, float32) reads a C-ordered float32 value in place (no copy of V,
    # no max |V|) and writes every row of out and lse
    fused = _fusable(mask, dropout) and \
        query.dtype == numpy.float32 and ct == xp.float32
    value_in_place = fused and isinstance(value, numpy.ndarray) and value.dtype == numpy.float32 and \
        value.flags.c_contiguous

    def prepare_v(f):
        _rows_into(v[f], value, f, hk, 1)
        if sk and dv:
            vabs[f] = xp.maximum(v[f].max(), -v[f].min())

    # every head at once by the backend where it can (oarlock-cpu: C on its pool), else per head below
    gathered = _gather_heads(xp, q, query, hk, scale * LOG2E)
    transposed = _transpose_heads(xp, kt, key, hk)

    def prepare(f):
        if not gathered:
            _rows_into(q[f], query, f, hk, g, scale * LOG2E)
        if not transposed:
            _keys_t_into(xp, kt[f], key, f, hk)
        if not value_in_place:
            prepare_v(f)
    if not (gathered and transposed and value_in_place):
        _per_head(xp, nf, prepare)
    if fused:
        out = xp.empty((b, sq, hq, dv), dtype=query.dtype)
        lse = xp.empty((b, hq, sq), dtype=xp.float32)
        if _fused_forward(xp, q, kt, value if value_in_place else v, out, lse, hk, causal):
            _scratch.give(q, kt.base, v)
            return out, lse, _seed_offset(xp, seed, offset)
        if value_in_place:
            _per_head(xp, nf, prepare_v)
    # blocks write their rows straight into the results; rows no block covers saw no key
    out = xp.zeros((b, sq, hq, dv), dtype=query.dtype)
    lse = xp.full((b, hq, sq), -xp.inf, dtype=xp.float64 if ct == xp.float64 else xp.float32)
    classes = numpy.asarray(mask.classes) if xp is not numpy else mask.classes
    heads, span = _split(nf, bq * g, bk, classes)
    runs = [_spans(classes[i], bk, sk, span) for i in range(mask.nqb)]
    ctx = (xp, runs, mask, q, kt, v, vabs, out, lse, ct, dropout, seed, offset, hk, g, sq, sk, d, dv)

    def blocks(_worker, items):
        flat = _scratch.take(xp, (heads * bq * g * span,), ct)
        with _quiet(xp):
            for item in items:
                _forward_rows(ctx, item, flat, span)
        _scratch.give(flat)
    # (head group, query block) items, head-group major (the workers share one group's K and V in the caches),
    # the blocks with the most tiles first
    order = _heaviest_first(classes)
    _parallel.run(xp, blocks, [(f0, min(f0 + heads, nf), i) for f0 in range(0, nf, heads) for i in order])
    _scratch.give(q, kt.base, v)
    return out, lse, _seed_offset(xp, seed, offset)


def _seed_offset(xp, seed, offset):
    return xp.asarray([seed if seed < 2 ** 63 else seed - 2 ** 64, offset if offset < 2 ** 63 else offset - 2 ** 64],
                      dtype=xp.int64)


def _fusable(mask, dropout) -> bool:
    """Whether the backend's fused kernels may run this call: a mask without vectors (plain causal or none), no
    window or block mask, no dropout (the dtype is checked where each is called)."""
    return not mask.cons and mask.window is None and mask.block is None and dropout == 0


# The fused forward's tiles: query blocks of FUSED_BLOCK_Q positions (their scores, FUSED_BLOCK_Q x G x
# FUSED_BLOCK_K floats, stay in L2 through the row pass and the values product) and key blocks of FUSED_BLOCK_K.
FUSED_BLOCK_Q = 128
FUSED_BLOCK_K = 512


def _fused_forward(xp, q, kt, v, out, lse, hk, causal):
    """The whole forward by the backend's `flashmask_forward` (oarlock-cpu: one C call, float32, masks without
    vectors: plain causal or none) where it has one and takes these arrays (v: the per-head copy [F, Sk, Dv] or
    the value input [B, Sk, Hk, Dv]); False otherwise (nothing written)."""
    try:
        fused = xp_function(xp, "flashmask_forward")
    except AttributeError:
        return False
    return fused(q, kt, v, out, lse, hk, causal, FUSED_BLOCK_Q, FUSED_BLOCK_K, _parallel.workers())


def _forward_rows(ctx, item, flat, span, exact=False):
    """One query block of one head group: online softmax (base 2) over its runs of non-skipped key tiles; writes
    its out and lse rows.

    Each row keeps a reference m (0 at first), the sum `total` of 2^(s - m) and acc = sum 2^(s - m) v. One pass
    (exp2_rows) turns a run's scores into its weights 2^(s - m) and their row sums, and one matmul gives the
    weighted values. Two kinds of step:
    - fast (no max pass over the scores): exp2 straight away, the overflow check on the new totals before the
      values matmul. Overflow (a score more than
      ~128 above m, or a sum past the float range) shows up as a non-finite total, or as a total above
      float max / (2 max|v|), with which acc could overflow; the run is then redone with the exact step. When
      total passes _RENORM, m moves up by floor(log2 total) (total and acc scaled by that power of two,
      exactly). Underflow loses terms below 2^-126 each, negligible unless the row's total ends tiny:
      rows ending below _TINY (including rows that saw no key) make the whole block run again with `exact`.
    - exact (the standard online softmax, every step when `exact`): the run's row max, a shift max(0, max) (the
      max itself while a row has seen nothing), 2^(s - shift), total and acc rescaled by 2^-shift.
    """
    xp, runs, mask, q, kt, v, vabs, out, lse, ct, dropout, seed, offset, hk, g, sq, sk, d, dv = ctx
    exp2_rows = _exp2_rows(xp)   # the backend's one-pass exp2 with row sums where it has it
    mm = _matmul(xp)
    f0, f1, i = item
    nf, bq = f1 - f0, mask.bq
    r0, r1 = i * bq, min((i + 1) * bq, sq)
    n = (r1 - r0) * g
    rs = slice(r0 * g, r1 * g)
    qi = q[f0:f1, rs]
    ktf, vf = kt[f0:f1], v[f0:f1]
    # A fast step's acc grows to at most total * max|v| (/ (1 - dropout)): a finite total can still overflow it
    # (one score ~88 nats above the reference gives a total just under the float32 range), so past this bound
    # the run is redone exactly too.
    # (dropout 1 zeroes every weight: acc stays 0). max |V| per head comes from the preparation (a pass over the
    # group's whole V per query block cost a fifth of a causal forward).
    vmax = float(vabs[f0:f1].max()) / (1.0 - dropout) if dropout < 1.0 else 0.0
    fast_limit = float(xp.finfo(ct).max) / 2 / max(vmax, 1.0)
    m = xp.zeros((nf, n, 1), dtype=ct)
    moved = False   # m is 0 until a row is re-centred; from then on it is subtracted from the scores
    acc = xp.zeros((nf, n, dv), dtype=ct)
    total = xp.zeros((nf, n, 1), dtype=ct)
    pv = xp.empty((nf, n, dv), dtype=ct)
    sums = xp.empty((nf, n, 1), dtype=ct)
    total_new = xp.empty((nf, n, 1), dtype=ct)

    def scores(c0, c1, partials, centred):
        """The run's scores, masked; minus m when `centred` (else the caller passes m to exp2_rows)."""
        s = _view(flat, (nf, n, c1 - c0))
        mm(qi, ktf[..., c0:c1], out=s)
        if centred and moved:
            s -= m
        _mask_cols(xp, mask, s, f0, f1, r0, r1, c0, partials, g)
        return s

    def weigh(s, c0, c1):
        """pv = s V (s dropped out first; `sums` are those of the undropped weights, as lse is)."""
        if dropout > 0:
            s *= _keep_scale(xp, seed, offset, dropout, g, sq, sk, f0, f1, r0, r1, c0, c1, ct)
        mm(s, vf[:, c0:c1], out=pv)

    for c0, c1, partials in runs[i]:
        if not exact:
            s = scores(c0, c1, partials, False)
            exp2_rows(s, m if moved else None, sums)   # the weights 2^(s - m) and their row sums, one pass
            xp.add(total, sums, out=total_new)
            top = float(total_new.max())
            if top <= fast_limit:   # also False for inf and nan
                weigh(s, c0, c1)
                acc += pv
                total, total_new = total_new, total
                if top > _RENORM:
                    shift = xp.where(total > _RENORM, xp.floor(xp.log2(total)), xp.zeros((), ct))
                    scale_down = xp.exp2(-shift)
                    acc *= scale_down
                    total *= scale_down
                    m += shift
                    moved = True
                continue
        s = scores(c0, c1, partials, True)   # the exact step (or overflow: the run redone exactly)
        mx = s.max(axis=-1, keepdims=True)
        shift = xp.where(total > 0, xp.maximum(mx, 0), xp.where(xp.isfinite(mx), mx, xp.zeros((), ct)))
        exp2_rows(s, shift, sums)
        weigh(s, c0, c1)
        rescale = xp.exp2(xp.minimum(-shift, 0))  # <= 1; multiplies zeros where the row had seen nothing
        acc *= rescale
        total *= rescale
        acc += pv
        total += sums
        m += shift
        moved = True
    if not exact and float(total.min()) < _TINY:
        return _forward_rows(ctx, item, flat, span, exact=True)
    empty = total == 0
    safe = xp.where(empty, xp.ones((), ct), total)
    acc /= safe
    lse_rows = xp.where(empty, xp.asarray(-xp.inf, dtype=ct), (m + xp.log2(safe)) * LN2)
    for f in range(f0, f1):
        b, h = divmod(f, hk)
        out[b, r0:r1, h * g:(h + 1) * g] = acc[f - f0].reshape(r1 - r0, g, dv)
        lse[b, h * g:(h + 1) * g, r0:r1] = lse_rows[f - f0].reshape(r1 - r0, g).T
    return None


# -- backward -----------------------------------------------------------------------------------------

def flashmask_backward(xp, grad, query, key, value, out, lse, startend_row_indices=None, seed_offset=None,
                       grad_lse=None, dropout=0.0, causal=False, window_left=-1, window_right=-1,
                       softmax_scale=None, *, block_mask=None):
    """(d query, d key, d value) from the output gradient, the inputs, out and lse (recomputing per tile)."""
    window = None if window_left < 0 and window_right < 0 else (window_left, window_right)
    b, sq, hq, sk, hk, d, dv, hm, c = check_inputs(xp, query, key, value, startend_row_indices, causal, window)
    if block_mask is not None:
        check_block_mask(block_mask, startend_row_indices, b, sq, sk)
    g = hq // hk
    nf = b * hk
    ct = _compute_dtype(xp, query.dtype)
    scale = _scale(softmax_scale, d)
    seed, offset = _seed(xp, seed_offset, 0.0, None)
    bq, bk = BLOCK_Q, BLOCK_K
    mask = _Mask(xp, startend_row_indices, causal, window_left, window_right, b, sq, sk, hk, g, bq, bk, block_mask)
    # As in the forward, scores are in base 2, and Q K^T (the same inner dimension D) rounds every score exactly
    # as the forward did, and lse (base 2) is subtracted after the matmul (exp2_rows): folded into the matmul (a
    # column of -lse) it changed each score's rounding by up to half an ulp of the score, and those independent
    # errors between forward and backward, amplified by |K|, cost dQ 40x PyTorch's error at scores of ~200 nats
    # (the error of P by a common factor per row, as the pass gives, cancels). dO's last column is -D
    # against V^T's ones, so dO V^T gives dP - D (with dropout, dP is scaled by the keep mask before D is
    # subtracted, so there the column is 0 and D is subtracted per tile). dK and dV are built as [Sk, D]
    # (dS^T Q, P^T dO: BLAS reads the transposes as views).
    q = _scratch.take(xp, (nf, sq * g, d), ct)
    do = _scratch.take(xp, (nf, sq * g, dv + 1), ct)
    delta = _scratch.take(xp, (nf, sq * g, 1), ct)
    lse2 = _scratch.take(xp, (nf, sq * g, 1), ct)
    centres = xp.empty((nf, 1, d), dtype=ct)
    k = _scratch.take(xp, (nf, sk, d), ct)
    kt, vt = _take_t(xp, nf, d, sk, ct), _take_t(xp, nf, dv + 1, sk, ct)
    dq, dk, dv_ = (_scratch.take(xp, shape, ct) for shape in ((nf, sq * g, d), (nf, sk, d), (nf, sk, dv)))

    gathered = _gather_heads(xp, q, query, hk, scale * LOG2E) and _gather_heads(xp, do, grad, hk, 1.0) and \
        _gather_heads(xp, k, key, hk, 1.0)

    def prepare(f):
        b_, h = divmod(f, hk)
        if not gathered:
            _rows_into(q[f], query, f, hk, g, scale * LOG2E)
            _rows_into(do[f], grad, f, hk, g)
            _rows_into(k[f], key, f, hk, 1)
        o = _scratch.take(xp, (sq * g, dv), ct)
        _rows_into(o, out, f, hk, g)
        o *= do[f, :, :dv]
        xp.sum(o, axis=-1, keepdims=True, out=delta[f])  # D = rowsum(dO * O)
        _scratch.give(o)
        if grad_lse is not None:
            delta[f, :, 0] -= grad_lse[b_, h * g:(h + 1) * g].T.reshape(-1)
        do[f, :, dv] = 0 if dropout > 0 else -delta[f, :, 0]
        lse_f = lse[b_, h * g:(h + 1) * g].T.reshape(-1).astype(ct)
        # rows that saw no key (lse -inf) get a huge finite lse: P = 0 there without inf arithmetic
        lse2[f, :, 0] = xp.where(xp.isfinite(lse_f), lse_f * LOG2E, xp.asarray(_HUGE, dtype=ct))
        # dQ = scale (dS K) is computed as dS (K - c) + c rowsum(dS), with c the mean key and rowsum(dS) = dlse
        # exactly (softmax is blind to a shift of every key): when keys share a large common part, dS's rounding
        # errors (which do not sum to zero) are amplified by |K - c| instead of |K|
        xp.mean(k[f], axis=0, keepdims=True, out=centres[f])
        k[f] -= centres[f]
        if not transposed:
            _keys_t_into(xp, kt[f], key, f, hk)
            _keys_t_into(xp, vt[f], value, f, hk)
        for acc in (dq[f], dk[f], dv_[f]):
            acc[...] = 0
    transposed = _transpose_heads(xp, kt, key, hk) and _transpose_heads(xp, vt, value, hk)
    if transposed:
        vt[:, dv] = 1   # V^T's row of ones (against dO's column of -D), as _keys_t_into writes it
    _per_head(xp, nf, prepare)
    dq_parts = None   # worker -> its dQ share (summed in worker order: reproducible)
    if _fusable(mask, dropout):
        dq_parts = _fused_backward(xp, q, do, delta, lse2, k, kt, vt, dk, dv_, dq, g, causal)
    if dq_parts is None:
        dq_parts = _backward_tiles(xp, mask, q, do, delta, lse2, k, kt, vt, dk, dv_, dq, ct, dropout, seed, offset,
                                   g, sq, sk, d, dv, nf)
    dq_b = xp.empty(query.shape, dtype=query.dtype)
    dk_b = xp.empty(key.shape, dtype=key.dtype)
    dv_b = xp.empty(value.shape, dtype=value.dtype)
    parts = [dq_parts[w] for w in sorted(dq_parts)]   # summed in worker order: reproducible bits

    def finish(f):
        for part in parts:
            dq[f] += part[f]
        if grad_lse is not None:   # c rowsum(dS): rowsum(dS) = dlse on rows that saw a key, 0 on the others
            b_, h = divmod(f, hk)
            seen = xp.isfinite(lse2[f]) & (lse2[f] < _HUGE)
            dlse = grad_lse[b_, h * g:(h + 1) * g].T.reshape(-1, 1).astype(ct)
            dq[f] += xp.where(seen, dlse, xp.zeros((), ct)) * centres[f]
        dq[f] *= scale
        dk[f] *= LN2  # dS^T (Q scale log2 e) ln 2 = scale dS^T Q
        _rows_from(dq_b, dq[f], f, hk, g)
        _rows_from(dk_b, dk[f], f, hk, 1)
        _rows_from(dv_b, dv_[f], f, hk, 1)
    # every head at once by the backend where it can (the same bits), else per head
    if not (grad_lse is None and _scatter_heads(xp, dq_b, dq, parts, hk, scale) and
            _scatter_heads(xp, dk_b, dk, [], hk, LN2) and _scatter_heads(xp, dv_b, dv_, [], hk, 1.0)):
        _per_head(xp, nf, finish)
    _scratch.give(q, do, delta, lse2, k, kt.base, vt.base, dq, dk, dv_, *parts)
    return dq_b, dk_b, dv_b


def _backward_tiles(xp, mask, q, do, delta, lse2, k, kt, vt, dk, dv_, dq, ct, dropout, seed, offset, g, sq, sk, d,
                    dv, nf):
    """The backward's numpy tiles (every mask, dtype and dropout): accumulates dk, dv_ and dq, and returns the other
    workers' dQ shares {worker: array}."""
    bq, bk = mask.bq, mask.bk
    classes = numpy.asarray(mask.classes) if xp is not numpy else mask.classes
    heads, span = _split(nf, bk * g, bq, classes.T)
    runs = [_spans(classes[:, j], bq, sq, span) for j in range(mask.nkb)]
    ctx = (xp, runs, mask, q, do, delta, lse2, k, kt, vt, dk, dv_, ct, dropout, seed, offset, g, sq, sk, d, dv)
    dq_parts = {}

    def blocks(worker, items):
        if worker:
            dq_w = _scratch.take(xp, dq.shape, ct)
            dq_w[...] = 0
        else:
            dq_w = dq
        size = heads * span * g * bk
        bufs = tuple(_scratch.take(xp, (n,), ct) for n in (size, size, heads * span * g * d))
        for item in items:
            _backward_cols(ctx, item, dq_w, bufs, span)
        _scratch.give(*bufs)
        if worker:
            dq_parts[worker] = dq_w
    # (head group, key block) items, head-group major, the blocks with the most tiles first, dealt round-robin:
    # each worker sums its dQ share in its own array, the same items every call (bitwise reproducible dQ)
    order = _heaviest_first(classes.T)
    _parallel.run(xp, blocks, [(f0, min(f0 + heads, nf), j) for f0 in range(0, nf, heads) for j in order],
                  dynamic=False)
    return {w: part for w, part in dq_parts.items() if w}


# The fused backward's tiles: key blocks of FUSED_BWD_BLOCK_K keys (their dK, dV rows stay in the cache through the
# query loop), query blocks of FUSED_BWD_BLOCK_Q positions.
FUSED_BWD_BLOCK_Q = 128
FUSED_BWD_BLOCK_K = 128


def _fused_backward(xp, q, do, delta, lse2, k, kt, vt, dk, dv, dq, g, causal):
    """The backward's accumulation by the backend's `flashmask_backward` (oarlock-cpu: one C call, float32, masks
    without vectors) where it has one and takes these arrays: {piece: dQ share} for its pieces after the first
    (whose share is dq itself); None otherwise (nothing written)."""
    try:
        fused = xp_function(xp, "flashmask_backward")
    except AttributeError:
        return None
    if q.dtype != xp.float32:
        return None
    parts = {w: _scratch.take(xp, dq.shape, q.dtype) for w in range(1, _parallel.workers())}
    for part in parts.values():
        part[...] = 0
    if fused(q, do, delta, lse2, k, kt, vt, dk, dv, (dq, *parts.values()), g, causal, FUSED_BWD_BLOCK_Q,
             FUSED_BWD_BLOCK_K):
        return parts
    _scratch.give(*parts.values())
    return None


def _backward_cols(ctx, item, dq, bufs, span):
    """One key block of one head group: dK, dV of its columns and its share of dQ, over its runs of non-skipped
    query tiles (FlashAttention-2: P = 2^(s - lse), dV += P^T dO, dS = P (dP - D), dQ += dS K, dK += dS^T Q)."""
    xp, runs, mask, q, do, delta, lse2, k, kt, vt, dk, dv_, ct, dropout, seed, offset, g, sq, sk, d, dv = ctx
    exp2_rows = _exp2_rows(xp)
    mm = _matmul(xp)
    f0, f1, j = item
    nf, bk = f1 - f0, mask.bk
    flat_s, flat_dp, flat_dq = bufs
    c0, c1 = j * bk, min((j + 1) * bk, sk)
    w = c1 - c0
    kj, kjt, vjt = k[f0:f1, c0:c1], kt[f0:f1, :, c0:c1], vt[f0:f1, :, c0:c1]
    qf, dof, dqf = q[f0:f1], do[f0:f1], dq[f0:f1]
    dkj, dvj = dk[f0:f1, c0:c1], dv_[f0:f1, c0:c1]
    dk_part, dv_part = xp.empty((nf, w, d), dtype=ct), xp.empty((nf, w, dv), dtype=ct)
    for r0, r1, partials in runs[j]:
        rs = slice(r0 * g, r1 * g)
        n = (r1 - r0) * g
        p = _view(flat_s, (nf, n, w))
        mm(qf[:, rs], kjt, out=p)                        # s
        _mask_rows(xp, mask, p, f0, f1, r0, c0, c1, partials, g)   # (-inf - lse = -inf)
        exp2_rows(p, lse2[f0:f1, rs], None)                     # P = 2^(s - lse)
        dp = _view(flat_dp, (nf, n, w))
        mm(dof[:, rs], vjt, out=dp)                      # dP - D (dP without dropout)
        if dropout > 0:
            z = _keep_scale(xp, seed, offset, dropout, g, sq, sk, f0, f1, r0, r1, c0, c1, ct)
            mm((p * z).swapaxes(-1, -2), dof[:, rs, :dv], out=dv_part)
            dp *= z
            dp -= delta[f0:f1, rs]
        else:
            mm(p.swapaxes(-1, -2), dof[:, rs, :dv], out=dv_part)
        dvj += dv_part
        dp *= p                                                 # dS
        dq_part = _view(flat_dq, (nf, n, d))
        mm(dp, kj, out=dq_part)
        dqf[:, rs] += dq_part
        mm(dp.swapaxes(-1, -2), qf[:, rs], out=dk_part)
        dkj += dk_part


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
