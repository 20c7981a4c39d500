"""Builders for FlashMask ``startend_row_indices``.

Every builder returns ``(startend_row_indices, causal)``: an int32 oarlock
Tensor of shape [B, 1, S, C] (or [B, H, S, C] for per-head masks) and the
``causal`` flag to pass to ``oarlock.nn.functional.flashmask_attention``.
Column j describes key j; values are query-row indices; intervals are
half-open; a value of S means "nothing masked" (see shared/REFERENCE.md,
"FlashMask attention"). Each builder reproduces the S = 10 encodings of the
REFERENCE table exactly (tests/test_masks.py checks them literally).

Per-batch inputs: where a builder takes lengths, a flat list (``[4, 3, 3]``)
describes one batch row and a list of lists (``[[4, 3, 3], [10]]``) one list
per batch row; all rows must cover the same sequence length. ``batch_size``
repeats a single row (with several rows it must equal their number).

Exported into ``oarlock.nn.attention`` by :func:`register_api`.
"""

from __future__ import annotations

import numbers

import numpy as np

__all__ = [
    "causal_mask",
    "sliding_window_mask",
    "causal_document_mask",
    "document_mask",
    "shared_question_mask",
    "global_sliding_window_mask",
    "causal_blockwise_mask",
    "prefix_lm_document_mask",
    "prefix_lm_causal_mask",
    "qk_sparse_mask",
    "random_eviction_mask",
]


# ----------------------------------------------------------------------------
# helpers


def _err(builder, arg, value, accepted):
    return ValueError(f"{builder}: invalid {arg}={value!r}; expected {accepted}")


def _int(builder, arg, value, minimum=0, maximum=None):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{builder}: {arg} must be an int, got {value!r} "
                        f"({type(value).__name__})")
    value = int(value)
    if value < minimum or (maximum is not None and value > maximum):
        rng = f">= {minimum}" if maximum is None else f"an int in [{minimum}, {maximum}]"
        raise _err(builder, arg, value, rng if maximum is not None else f"an int {rng}")
    return value


def _host(x):
    if hasattr(x, "numpy") and not isinstance(x, np.ndarray):
        return np.asarray(x.numpy())
    return x


def _is_seq(x):
    return isinstance(x, (list, tuple, np.ndarray))


def _batched_lens(builder, arg, value, minimum=0):
    """A flat list of ints (one batch row) or a list of lists -> list of lists of ints."""
    value = _host(value)
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if not _is_seq(value) or len(value) == 0:
        raise _err(builder, arg, value, "a non-empty list of ints, or one such list per batch row")
    rows = [list(r) for r in value] if all(_is_seq(r) for r in value) else [list(value)]
    out = []
    for b, row in enumerate(rows):
        if len(row) == 0:
            raise _err(builder, f"{arg}[{b}]", row, "a non-empty list of ints")
        out.append([_int(builder, f"{arg}[{b}][{i}]" if len(rows) > 1 else f"{arg}[{i}]", v,
                         minimum) for i, v in enumerate(row)])
    return out


def _common_len(builder, arg, rows, seq_len=None):
    totals = [sum(r) for r in rows]
    if seq_len is not None:
        seq_len = _int(builder, "seq_len", seq_len, 1)
        for b, t in enumerate(totals):
            if t != seq_len:
                raise _err(builder, arg, rows[b] if len(rows) > 1 else rows[0],
                           f"lengths summing to seq_len={seq_len} (they sum to {t})")
    elif len(set(totals)) != 1:
        raise _err(builder, arg, rows, f"every batch row summing to the same length "
                                       f"(sums are {totals})")
    s = totals[0]
    if s < 1:
        raise _err(builder, arg, rows, "lengths summing to at least 1")
    return s


def _doc_lens_from(builder, doc_lens, segment_ids, seq_len=None):
    if (doc_lens is None) == (segment_ids is None):
        raise ValueError(f"{builder}: give exactly one of doc_lens or segment_ids")
    if doc_lens is not None:
        rows = _batched_lens(builder, "doc_lens", doc_lens)
        return rows, _common_len(builder, "doc_lens", rows, seq_len)
    seg = np.asarray(_host(segment_ids))
    if seg.ndim == 1:
        seg = seg[None]
    if seg.ndim != 2 or seg.shape[1] == 0:
        raise _err(builder, "segment_ids", f"<array of shape {list(seg.shape)}>",
                   "integer segment ids of shape [B, S] or [S]")
    if seq_len is not None and _int(builder, "seq_len", seq_len, 1) != seg.shape[1]:
        raise _err(builder, "segment_ids", f"<array of shape {list(seg.shape)}>",
                   f"S equal to seq_len={seq_len}")
    rows = []
    for b in range(seg.shape[0]):
        ids = seg[b]
        starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
        lens = np.diff(np.r_[starts, len(ids)]).tolist()
        run_ids = ids[starts].tolist()
        if len(set(run_ids)) != len(run_ids):
            raise _err(builder, f"segment_ids[{b}]", ids.tolist(),
                       "each segment id in one contiguous run (a document must be contiguous)")
        rows.append(lens)
    return rows, seg.shape[1]


def _bounds(lens):
    """Document lengths -> (start, end) of the document holding each position."""
    ends = np.cumsum(lens)
    starts = ends - np.asarray(lens)
    start = np.repeat(starts, lens)
    end = np.repeat(ends, lens)
    return start, end


def _per_batch_int(builder, arg, value, batch, minimum=0, maximum=None):
    value = _host(value)
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if _is_seq(value):
        if len(value) != batch:
            raise _err(builder, arg, value, f"an int or one int per batch row ({batch})")
        return [_int(builder, f"{arg}[{b}]", v, minimum, maximum) for b, v in enumerate(value)]
    return [_int(builder, arg, value, minimum, maximum)] * batch


def _repeat(builder, rows, batch_size):
    """Repeat a single batch row batch_size times; several rows must match batch_size."""
    if batch_size is None:
        return rows
    n = _int(builder, "batch_size", batch_size, 1)
    if len(rows) == 1:
        return rows * n
    if n != len(rows):
        raise _err(builder, "batch_size", n, f"None or {len(rows)} (the number of batch rows given)")
    return rows


def _finish(cols, causal):
    """cols: list over batch of [S, C] (or [H, S, C]) int arrays -> (Tensor, causal)."""
    import oarlock

    arr = np.stack([np.asarray(c, dtype=np.int32) for c in cols])
    if arr.ndim == 3:                       # [B, S, C] -> [B, 1, S, C]
        arr = arr[:, None]
    return oarlock.to_tensor(np.ascontiguousarray(arr, dtype=np.int32), dtype="int32"), causal


# ----------------------------------------------------------------------------
# builders


def causal_mask(seq_len, batch_size=1):
    """Plain causal attention: C=1, LTS = seq_len everywhere, causal=True."""
    b = "causal_mask"
    s = _int(b, "seq_len", seq_len, 1)
    n = _int(b, "batch_size", batch_size, 1)
    return _finish([np.full((s, 1), s)] * n, True)


def sliding_window_mask(seq_len, window, batch_size=1):
    """Causal sliding window: query i sees keys [i - window, i].

    C=1, causal=True, LTS[j] = min(j + window + 1, seq_len). window=2, S=10
    gives LTS=[3, 4, ..., 9, 10, 10, 10].
    """
    b = "sliding_window_mask"
    s = _int(b, "seq_len", seq_len, 1)
    w = _int(b, "window", window, 0)
    n = _int(b, "batch_size", batch_size, 1)
    lts = np.minimum(np.arange(s) + w + 1, s)
    return _finish([lts[:, None]] * n, True)


def causal_document_mask(doc_lens=None, segment_ids=None, *, seq_len=None, batch_size=None):
    """Causal attention inside each document (packed sequences).

    Documents come from ``doc_lens`` (a list of lengths, or one list per
    batch row) or from ``segment_ids`` [B, S] (each contiguous run of one id
    is a document). C=1, causal=True, LTS[j] = end of j's document.
    """
    b = "causal_document_mask"
    rows, _ = _doc_lens_from(b, doc_lens, segment_ids, seq_len)
    rows = _repeat(b, rows, batch_size)
    return _finish([_bounds(r)[1][:, None] for r in rows], True)


def document_mask(doc_lens=None, segment_ids=None, *, seq_len=None, batch_size=None):
    """Bidirectional attention inside each document.

    Inputs as :func:`causal_document_mask`. C=2 (LTS, UTE), causal=False:
    LTS[j] = end of j's document, UTE[j] = its start.
    """
    b = "document_mask"
    rows, _ = _doc_lens_from(b, doc_lens, segment_ids, seq_len)
    rows = _repeat(b, rows, batch_size)
    cols = []
    for r in rows:
        start, end = _bounds(r)
        cols.append(np.stack([end, start], axis=-1))
    return _finish(cols, False)


def shared_question_mask(question_len, answer_lens, *, seq_len=None, batch_size=None):
    """One question followed by several answers that share it (causal).

    Tokens [0, question_len) are the question, seen causally by every later
    token; each answer (lengths ``answer_lens``, a list or one list per batch
    row) sees the question and itself causally, never another answer.
    C=1, causal=True: LTS = S on question keys, the answer's end on answer
    keys. question_len may be an int or one int per batch row.
    """
    b = "shared_question_mask"
    rows = _batched_lens(b, "answer_lens", answer_lens)
    if batch_size is None and _is_seq(_host(question_len)) and len(rows) == 1:
        batch_size = len(question_len)
    rows = _repeat(b, rows, batch_size)
    q = _per_batch_int(b, "question_len", question_len, len(rows))
    totals = [qq + sum(r) for qq, r in zip(q, rows)]
    if seq_len is not None:
        seq_len = _int(b, "seq_len", seq_len, 1)
        for i, t in enumerate(totals):
            if t != seq_len:
                raise _err(b, "answer_lens", rows[i], f"question_len + sum(answer_lens) == "
                                                      f"seq_len={seq_len} (got {t})")
    if len(set(totals)) != 1:
        raise _err(b, "answer_lens", rows, f"question_len + sum(answer_lens) equal for every "
                                           f"batch row (got {totals})")
    s = totals[0]
    if s < 1:
        raise _err(b, "answer_lens", rows, "a total length of at least 1")
    cols = []
    for qq, r in zip(q, rows):
        _, end = _bounds([qq] + r)
        lts = end.copy()
        lts[:qq] = s
        cols.append(lts[:, None])
    return _finish(cols, True)


def global_sliding_window_mask(seq_len, global_tokens, window, batch_size=1):
    """Bidirectional sliding window plus leading global tokens.

    Tokens [0, global_tokens) see every key and are seen by every query; any
    other query i sees keys [i - wl, i + wr] where ``window`` is an int w
    (wl = wr = w) or a pair (wl, wr). C=4 (LTS, LTE, UTS, UTE), causal=False.
    S=10, global_tokens=2, window=1 gives the REFERENCE encoding.
    """
    b = "global_sliding_window_mask"
    s = _int(b, "seq_len", seq_len, 1)
    g = _int(b, "global_tokens", global_tokens, 0, s)
    if _is_seq(window):
        if len(window) != 2:
            raise _err(b, "window", window, "an int >= 0 or a pair (left, right) of ints >= 0")
        wl, wr = _int(b, "window[0]", window[0], 0), _int(b, "window[1]", window[1], 0)
    else:
        wl = wr = _int(b, "window", window, 0)
    n = _int(b, "batch_size", batch_size, 1)
    j = np.arange(s)
    lts = np.where(j < g, s, np.minimum(j + wl + 1, s))
    lte = np.full(s, s)
    upper = (j >= g) & (j - wr > g)            # rows [g, j - wr) are masked
    uts = np.where(upper, g, 0)
    ute = np.where(upper, j - wr, 0)
    return _finish([np.stack([lts, lte, uts, ute], axis=-1)] * n, False)


def causal_blockwise_mask(block_lens, *, seq_len=None, batch_size=None):
    """Causal blocks; the last block sees every earlier block.

    Blocks (lengths ``block_lens``, a list or one list per batch row) attend
    causally within themselves; the last block attends causally to the whole
    sequence. C=2 (LTS, LTE), causal=True: a key in a non-last block is
    masked for rows [end of its block, start of the last block); (S, S) when
    that is empty. block_lens=[4, 3, 3] gives the REFERENCE encoding.
    """
    b = "causal_blockwise_mask"
    rows = _repeat(b, _batched_lens(b, "block_lens", block_lens), batch_size)
    s = _common_len(b, "block_lens", rows, seq_len)
    cols = []
    for r in rows:
        _, end = _bounds(r)
        last_start = s - r[-1]
        lts = end.copy()
        lte = np.full(s, last_start)
        empty = lts >= lte
        lts[empty] = s
        lte[empty] = s
        cols.append(np.stack([lts, lte], axis=-1))
    return _finish(cols, True)


def prefix_lm_document_mask(doc_lens, prefix_lens, *, seq_len=None, batch_size=None):
    """Prefix-LM inside each document.

    In each document the first ``prefix`` tokens are bidirectional (seen by
    every token of the document); the rest are causal. ``prefix_lens`` has
    one entry per document (same nesting as ``doc_lens``) or is one int for
    all documents. C=2 (LTS, UTE), causal=False. doc_lens=[3, 2, 5],
    prefix_lens=[2, 2, 2] gives the REFERENCE encoding.
    """
    b = "prefix_lm_document_mask"
    rows = _repeat(b, _batched_lens(b, "doc_lens", doc_lens), batch_size)
    s = _common_len(b, "doc_lens", rows, seq_len)
    if isinstance(prefix_lens, numbers.Integral) and not isinstance(prefix_lens, bool):
        p = _int(b, "prefix_lens", prefix_lens, 0)
        prows = [[p] * len(r) for r in rows]
    else:
        prows = _batched_lens(b, "prefix_lens", prefix_lens)
        if len(prows) == 1 and len(rows) > 1:
            prows = prows * len(rows)
        if len(prows) != len(rows) or any(len(pr) != len(r) for pr, r in zip(prows, rows)):
            raise _err(b, "prefix_lens", prefix_lens,
                       "one prefix length per document (the same shape as doc_lens) or an int")
    cols = []
    for bi, (r, pr) in enumerate(zip(rows, prows)):
        for di, (dl, pl) in enumerate(zip(r, pr)):
            if pl > dl:
                raise _err(b, "prefix_lens", pl, f"a prefix length <= its document's length "
                                                 f"(document {di} of batch row {bi} has {dl})")
        start, end = _bounds(r)
        prefix_end = np.repeat(np.cumsum(r) - np.asarray(r) + np.asarray(pr), r)
        j = np.arange(s)
        ute = np.where(j < prefix_end, start, j)
        cols.append(np.stack([end, ute], axis=-1))
    return _finish(cols, False)


def prefix_lm_causal_mask(seq_len, prefix_len, batch_size=1):
    """Prefix-LM: keys [0, prefix_len) bidirectional, the rest causal.

    C=2 (LTS, UTE), causal=False: LTS = S, UTE[j] = 0 for prefix keys, j after.
    ``prefix_len`` may be an int or one int per batch row (then batch_size is
    taken from it).
    """
    b = "prefix_lm_causal_mask"
    s = _int(b, "seq_len", seq_len, 1)
    n = _int(b, "batch_size", batch_size, 1)
    if _is_seq(_host(prefix_len)):
        n = len(prefix_len)
    prefixes = _per_batch_int(b, "prefix_len", prefix_len, n, 0, s)
    j = np.arange(s)
    cols = [np.stack([np.full(s, s), np.where(j < p, 0, j)], axis=-1) for p in prefixes]
    return _finish(cols, False)


def _blocks(builder, value, s):
    value = _host(value)
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if not _is_seq(value):
        raise _err(builder, "sparse_blocks", value, "a list of (key_start, key_end, row_end) "
                                                    "triples, or one such list per batch row")
    if len(value) and all(_is_seq(x) and all(_is_seq(y) for y in x) for x in value):
        rows = [list(x) for x in value]
    else:
        rows = [list(value)]
    out = []
    for bi, row in enumerate(rows):
        triples = []
        for t in row:
            if not _is_seq(t) or len(t) != 3:
                raise _err(builder, "sparse_blocks", t, "a (key_start, key_end, row_end) triple")
            ks = _int(builder, "key_start", t[0], 0, s)
            ke = _int(builder, "key_end", t[1], ks, s)
            re = _int(builder, "row_end", t[2], 0, s)
            triples.append((ks, ke, re))
        order = sorted(triples)
        for a, c in zip(order, order[1:]):
            if c[0] < a[1]:
                raise _err(builder, "sparse_blocks", row if len(rows) == 1 else (bi, row),
                           f"blocks whose key ranges do not overlap ({a} and {c} do)")
        out.append(triples)
    return out


def qk_sparse_mask(seq_len, sparse_blocks, batch_size=1):
    """Causal attention with sparse (dropped) query/key blocks.

    ``sparse_blocks`` is a list of (key_start, key_end, row_end) triples (or
    one such list per batch row): each key j in [key_start, key_end) is hidden
    from the query rows [j, row_end), i.e. from its own row until row_end,
    after which it becomes visible again (causally). So query rows inside a
    block only see keys before key_start. Keys outside every block are plain
    causal. C=2 (LTS, LTE), causal=True: LTS[j] = j, LTE[j] = max(j, row_end)
    inside a block, (S, S) outside.

    S=10 with sparse_blocks=[(2, 6, 5), (6, 8, 8)] gives the REFERENCE
    encoding LTS=[10,10,2,3,4,5,6,7,10,10], LTE=[10,10,5,5,5,5,8,8,10,10]:
    rows 2-4 see only keys 0-1, rows 6-7 only keys 0-5.
    """
    b = "qk_sparse_mask"
    s = _int(b, "seq_len", seq_len, 1)
    rows = _blocks(b, sparse_blocks, s)
    n = _int(b, "batch_size", batch_size, 1)
    if len(rows) == 1:
        rows = rows * n
    cols = []
    for triples in rows:
        lts = np.full(s, s)
        lte = np.full(s, s)
        for ks, ke, re in triples:
            j = np.arange(ks, ke)
            lts[ks:ke] = j
            lte[ks:ke] = np.maximum(j, re)
        cols.append(np.stack([lts, lte], axis=-1))
    return _finish(cols, True)


def random_eviction_mask(seq_len, num_heads=1, evict_prob=0.5, batch_size=1, seed=0):
    """Causal attention with random KV-cache eviction, independently per head.

    For every (batch, head, key j), with probability ``evict_prob`` key j is
    evicted at a row drawn uniformly from [j + 1, seq_len - 1]: rows at and
    after it no longer see key j. Otherwise (and always for the last key)
    LTS[j] = seq_len, "never". C=1, causal=True, shape [B, num_heads, S, 1].
    Reproducible: the same ``seed`` gives the same mask.
    """
    b = "random_eviction_mask"
    s = _int(b, "seq_len", seq_len, 1)
    h = _int(b, "num_heads", num_heads, 1)
    n = _int(b, "batch_size", batch_size, 1)
    if isinstance(evict_prob, bool) or not isinstance(evict_prob, numbers.Real) \
            or not 0.0 <= float(evict_prob) <= 1.0:
        raise _err(b, "evict_prob", evict_prob, "a probability in [0, 1]")
    if seed is not None:
        seed = _int(b, "seed", seed, 0)
    rng = np.random.default_rng(seed)
    evict = rng.random((n, h, s)) < float(evict_prob)
    u = rng.random((n, h, s))
    j = np.arange(s)
    span = s - 1 - j                                   # choices in [j+1, s-1]
    row = j + 1 + np.minimum(np.floor(u * span), np.maximum(span - 1, 0)).astype(np.int64)
    lts = np.where(evict & (span > 0), row, s)
    return _finish(list(lts[..., None]), True)


def register_api(api):
    """Export every builder into ``oarlock.nn.attention``."""
    g = globals()
    for name in __all__:
        api.export("oarlock.nn.attention", name, g[name])
