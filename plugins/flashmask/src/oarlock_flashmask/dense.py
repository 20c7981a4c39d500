"""Dense reference for FlashMask attention: the oracle the tests compare against.

Written directly from the table in shared/REFERENCE.md ("FlashMask attention"),
in float64 numpy, with no attempt at speed:

| causal | C | masked rows of key column j |
|---|---|---|
| True | 1 | rows >= LTS[j], plus the causal upper triangle |
| True | 2 | rows in [LTS[j], LTE[j]), plus causal |
| False | 2 | rows >= LTS[j], and rows < UTE[j] |
| False | 4 | rows in [LTS, LTE) and rows in [UTS, UTE) |

Causal with Sq != Sk aligns the bottom-right corner: key j is hidden from
query rows i < j - (Sk - Sq). A sliding window is aligned the same way.
"""

from __future__ import annotations

import numpy as np

__all__ = ["dense_mask", "dense_attention", "to_numpy"]


def to_numpy(x):
    """An oarlock Tensor, a torch tensor or anything array-like -> numpy."""
    if x is None:
        return None
    if hasattr(x, "numpy") and not isinstance(x, np.ndarray):
        if hasattr(x, "detach"):
            x = x.detach()
        return np.asarray(x.numpy())
    return np.asarray(x)


def dense_mask(startend_row_indices, sq, causal, window_size=None, *, sk=None):
    """The dense boolean mask [B, Hm, Sq, Sk] (True = may attend).

    ``startend_row_indices`` is [B, Hm, Sk, C] (numpy, oarlock Tensor, ...),
    or None for plain attention, in which case ``sk`` must be given and the
    result is [1, 1, Sq, Sk]. ``window_size`` (int for causal, int or
    (left, right) otherwise) is only accepted without startend_row_indices,
    as in flashmask_attention.
    """
    sq = int(sq)
    if startend_row_indices is None:
        if sk is None:
            raise ValueError("dense_mask: sk is required when startend_row_indices is None")
        sk = int(sk)
        b = hm = 1
        allowed = np.ones((1, 1, sq, sk), dtype=bool)
    else:
        if window_size is not None:
            raise ValueError("dense_mask: window_size cannot be combined with startend_row_indices")
        idx = to_numpy(startend_row_indices).astype(np.int64)
        if idx.ndim != 4 or idx.shape[-1] not in (1, 2, 4):
            raise ValueError(f"dense_mask: startend_row_indices must be [B, Hm, Sk, C] with C in "
                             f"{{1, 2, 4}}, got shape {list(idx.shape)}")
        sk_given = sk
        b, hm, sk, c = idx.shape
        if sk_given is not None and int(sk_given) != sk:
            raise ValueError(f"dense_mask: sk={sk_given} disagrees with startend_row_indices "
                             f"(Sk={sk})")
        if causal and c == 4:
            raise ValueError("dense_mask: causal=True accepts C in {1, 2}, got C=4")
        if not causal and c == 1:
            raise ValueError("dense_mask: causal=False accepts C in {2, 4}, got C=1")
        rows = np.arange(sq).reshape(1, 1, sq, 1)           # query row i
        col = lambda k: idx[..., k][:, :, None, :]          # [B, Hm, 1, Sk]
        if causal and c == 1:
            masked = rows >= col(0)
        elif causal and c == 2:
            masked = (rows >= col(0)) & (rows < col(1))
        elif c == 2:
            masked = (rows >= col(0)) | (rows < col(1))
        else:
            masked = ((rows >= col(0)) & (rows < col(1))) | ((rows >= col(2)) & (rows < col(3)))
        allowed = ~masked
    # position of query row i on the key axis (bottom-right alignment)
    qpos = np.arange(sq).reshape(sq, 1) + (sk - sq)
    kpos = np.arange(sk).reshape(1, sk)
    extra = np.ones((sq, sk), dtype=bool)
    if causal:
        extra &= kpos <= qpos
    if window_size is not None:
        if isinstance(window_size, (tuple, list)):
            wl, wr = (int(w) for w in window_size)
        else:
            wl = int(window_size)
            wr = 0 if causal else wl
        extra &= (kpos >= qpos - wl) & (kpos <= qpos + wr)
    allowed = allowed & extra[None, None]
    return np.broadcast_to(allowed, (b, hm, sq, sk)).copy()


def dense_attention(q, k, v, mask=None, scale=None):
    """Reference attention in float64: returns (out [B, Sq, Hq, D], lse [B, Hq, Sq]).

    Layout BSHD: q [B, Sq, Hq, D], k and v [B, Sk, Hk, D], Hq a multiple of Hk.
    ``mask`` is a bool [B or 1, Hm, Sq, Sk] (True = may attend) with Hm in
    {1, Hk, Hq}; mask head h serves query heads [h*Hq/Hm, (h+1)*Hq/Hm).
    A fully masked query row gives output 0 and lse -inf.
    """
    q = to_numpy(q).astype(np.float64)
    k = to_numpy(k).astype(np.float64)
    v = to_numpy(v).astype(np.float64)
    b, sq, hq, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    if hq % hk:
        raise ValueError(f"dense_attention: Hq={hq} is not a multiple of Hk={hk}")
    if scale is None:
        scale = 1.0 / np.sqrt(d)
    rep = hq // hk
    kk = np.repeat(k, rep, axis=2)                      # [B, Sk, Hq, D]
    vv = np.repeat(v, rep, axis=2)
    s = np.einsum("bqhd,bkhd->bhqk", q, kk) * scale     # [B, Hq, Sq, Sk]
    if mask is None:
        m = np.ones((1, 1, sq, sk), dtype=bool)
    else:
        m = to_numpy(mask).astype(bool)
    hm = m.shape[1]
    if hq % hm:
        raise ValueError(f"dense_attention: mask heads Hm={hm} do not divide Hq={hq}")
    m = np.repeat(m, hq // hm, axis=1)
    m = np.broadcast_to(m, s.shape)
    s = np.where(m, s, -np.inf)
    mx = s.max(axis=-1, keepdims=True)
    safe = np.where(np.isfinite(mx), mx, 0.0)
    p = np.where(m, np.exp(s - safe), 0.0)
    denom = p.sum(axis=-1, keepdims=True)
    empty = denom == 0
    lse = np.where(empty, -np.inf, safe + np.log(np.where(empty, 1.0, denom)))[..., 0]
    p = p / np.where(empty, 1.0, denom)
    out = np.einsum("bhqk,bkhd->bqhd", p, vv)
    return out, lse
