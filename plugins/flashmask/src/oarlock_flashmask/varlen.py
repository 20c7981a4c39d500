"""Variable-length (packed) attention as a FlashMask: the sequences of a packed batch, given by cu_seqlens, become
one row of the batch whose startend_row_indices keep every key to the query rows of its own sequence.

Packed layout (FlashAttention's varlen): query [total_q, Hq, D], key and value [total_k, Hk, D]; sequence b holds
query rows [cu_q[b], cu_q[b+1]) and key rows [cu_k[b], cu_k[b+1]) (seqused_q / seqused_k, when given, use only
the first seqused[b] of them). Within a sequence, with Lq and Lk its lengths and off = Lk - Lq, query i sees key j
when j <= i + off + right and j >= i + off - left: causal is right = 0 (bottom-right aligned, as FlashAttention
2.1+ and 3), a window (left, right) bounds both sides, -1 meaning unbounded. So the query rows key j is visible
to form one interval [lo, hi] of the sequence's rows, and the mask is FlashMask's non-causal two-column form
(LTS, UTE): rows >= LTS or < UTE masked, LTS = start + hi + 1 and UTE = start + lo. A key outside every sequence
(or past seqused_k) is masked for every row; a query row outside every sequence sees no key and gets out 0 and
lse -inf. The tile classification of the CPU kernel skips the tiles between sequences, so the cost is that of
attention within each sequence.
"""

from __future__ import annotations

import numpy as np

import oarlock


def _host_ints(fn, arg, t, n=None):
    """A 1-D integer Tensor (or sequence) as an int64 numpy array."""
    if isinstance(t, oarlock.Tensor):
        a = t.numpy()
    elif isinstance(t, (list, tuple, np.ndarray)):
        a = np.asarray(t)
    else:
        raise TypeError(f"{fn}(): argument '{arg}' is a {type(t).__name__}; accepted: a 1-D int32 Tensor")
    if a.ndim != 1 or a.dtype.kind not in "iu" or (n is not None and a.shape[0] != n):
        want = f"a 1-D integer Tensor of {n} elements" if n is not None else "a 1-D integer Tensor"
        raise ValueError(f"{fn}(): argument '{arg}' has dtype {a.dtype} and shape {list(a.shape)}; accepted: {want}")
    return a.astype(np.int64)


def _segments(fn, arg, cu, total, max_seqlen, used, used_arg, padded):
    """(starts, used lengths) of the sequences cu describes, checked against the packed length and max_seqlen.
    padded: sequence b starts at b * max_seqlen (the rest of its max_seqlen rows are padding)."""
    lengths = np.diff(cu)
    end = cu.shape[0] - 1 if padded else 1
    if cu.shape[0] < 1 or cu[0] != 0 or bool((lengths < 0).any()) or \
            (max_seqlen * end if padded else cu[-1]) > total:
        room = f"{cu.shape[0] - 1} sequences of max_seqlen {max_seqlen} in" if padded else "at most"
        raise ValueError(f"{fn}(): argument '{arg}' = {cu.tolist()}; accepted: cumulative lengths starting at 0, "
                         f"non-decreasing, {room} the packed length {total}")
    if lengths.size and int(lengths.max()) > max_seqlen:
        raise ValueError(f"{fn}(): a sequence of {int(lengths.max())} tokens (from '{arg}') is longer than max_seqlen "
                         f"{max_seqlen}; accepted: max_seqlen at least the longest sequence")
    if used is not None:
        if bool((used < 0).any()) or bool((used > lengths).any()):
            raise ValueError(f"{fn}(): argument '{used_arg}' = {used.tolist()}; accepted: for each sequence a count "
                             f"between 0 and its length {lengths.tolist()}")
        lengths = used
    starts = np.arange(lengths.shape[0], dtype=np.int64) * max_seqlen if padded else cu[:-1]
    return starts, lengths


def startend_rows(fn, total_q, total_k, cu_q, cu_k, max_q, max_k, causal=False, window=(-1, -1), used_q=None,
                  used_k=None, padded=False):
    """The int32 [1, 1, total_k, 2] (LTS, UTE) startend_row_indices of a packed batch (see the module docstring)."""
    cu_q, cu_k = _host_ints(fn, "cu_seqlens_q", cu_q), _host_ints(fn, "cu_seqlens_k", cu_k)
    if cu_q.shape != cu_k.shape:
        raise ValueError(f"{fn}(): cu_seqlens_q has {cu_q.shape[0]} entries and cu_seqlens_k {cu_k.shape[0]}; "
                         "accepted: one entry per sequence boundary in both")
    n = cu_q.shape[0] - 1
    used_q = None if used_q is None else _host_ints(fn, "seqused_q", used_q, n)
    used_k = None if used_k is None else _host_ints(fn, "seqused_k", used_k, n)
    q_start, q_len = _segments(fn, "cu_seqlens_q", cu_q, total_q, max_q, used_q, "seqused_q", padded)
    k_start, k_len = _segments(fn, "cu_seqlens_k", cu_k, total_k, max_k, used_k, "seqused_k", padded)
    left, right = (int(w) for w in window)
    right = 0 if causal else right
    sri = np.zeros((total_k, 2), dtype=np.int64)  # LTS = 0: columns outside every sequence masked for all rows
    for qs, lq, ks, lk in zip(q_start, q_len, k_start, k_len):
        j = np.arange(lk)
        lo = np.zeros(lk, dtype=np.int64) if right < 0 else np.maximum(j - (lk - lq) - right, 0)
        hi = np.full(lk, lq - 1, dtype=np.int64) if left < 0 else np.minimum(j - (lk - lq) + left, lq - 1)
        sri[ks:ks + lk, 0] = np.clip(qs + hi + 1, 0, total_q)
        sri[ks:ks + lk, 1] = np.clip(qs + lo, 0, total_q)
    return oarlock.to_tensor(sri.astype(np.int32).reshape(1, 1, total_k, 2))
