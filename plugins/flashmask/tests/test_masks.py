"""Mask builders: the REFERENCE S = 10 encodings, hand-written dense masks, input checks."""

import numpy as np
import pytest

from oarlock_flashmask import masks as M
from oarlock_flashmask.dense import dense_attention, dense_mask

S = 10

# (builder call, causal, columns) straight from shared/REFERENCE.md, "Encodings
# of common masks, S = 10".
REFERENCE = {
    "causal document": (lambda: M.causal_document_mask([4, 3, 3]), True,
                        [[4, 4, 4, 4, 7, 7, 7, 10, 10, 10]]),
    "sliding window": (lambda: M.sliding_window_mask(10, 2), True,
                       [[3, 4, 5, 6, 7, 8, 9, 10, 10, 10]]),
    "document": (lambda: M.document_mask([4, 3, 3]), False,
                 [[4, 4, 4, 4, 7, 7, 7, 10, 10, 10], [0, 0, 0, 0, 4, 4, 4, 7, 7, 7]]),
    "shared question": (lambda: M.shared_question_mask(4, [3, 3]), True,
                        [[10, 10, 10, 10, 7, 7, 7, 10, 10, 10]]),
    "global + sliding window": (lambda: M.global_sliding_window_mask(10, 2, 1), False,
                                [[10, 10, 4, 5, 6, 7, 8, 9, 10, 10], [10] * 10,
                                 [0, 0, 0, 0, 2, 2, 2, 2, 2, 2],
                                 [0, 0, 0, 0, 3, 4, 5, 6, 7, 8]]),
    "causal blockwise": (lambda: M.causal_blockwise_mask([4, 3, 3]), True,
                         [[4, 4, 4, 4, 10, 10, 10, 10, 10, 10],
                          [7, 7, 7, 7, 10, 10, 10, 10, 10, 10]]),
    "prefix-LM document": (lambda: M.prefix_lm_document_mask([3, 2, 5], [2, 2, 2]), False,
                           [[3, 3, 3, 5, 5, 10, 10, 10, 10, 10],
                            [0, 0, 2, 3, 3, 5, 5, 7, 8, 9]]),
    "prefix-LM causal": (lambda: M.prefix_lm_causal_mask(10, 5), False,
                         [[10] * 10, [0, 0, 0, 0, 0, 5, 6, 7, 8, 9]]),
    "QK-sparse": (lambda: M.qk_sparse_mask(10, [(2, 6, 5), (6, 8, 8)]), True,
                  [[10, 10, 2, 3, 4, 5, 6, 7, 10, 10], [10, 10, 5, 5, 5, 5, 8, 8, 10, 10]]),
}


def arr(t):
    return np.asarray(t.numpy())


@pytest.mark.parametrize("name", list(REFERENCE))
def test_reference_encodings(name):
    build, causal, columns = REFERENCE[name]
    t, c = build()
    a = arr(t)
    assert str(t.dtype).endswith("int32") and a.dtype == np.int32
    assert c is causal
    assert a.shape == (1, 1, S, len(columns))
    for k, col in enumerate(columns):
        assert a[0, 0, :, k].tolist() == col, (name, k)


def test_causal_mask():
    t, c = M.causal_mask(7, batch_size=3)
    assert c is True and arr(t).shape == (3, 1, 7, 1) and (arr(t) == 7).all()
    m = dense_mask(t, 7, c)
    assert (m == np.tril(np.ones((7, 7), bool))).all()


# --- hand-written dense masks ------------------------------------------------


def ref_lens(rng, s, max_docs=5):
    cuts = np.sort(rng.choice(np.arange(1, s), size=min(max_docs - 1, s - 1), replace=False))
    return np.diff(np.r_[0, cuts, s]).tolist()


def doc_of(lens):
    return np.repeat(np.arange(len(lens)), lens)


def check(t, c, want, sq=None):
    a = arr(t)
    assert a.dtype == np.int32
    got = dense_mask(a, sq if sq is not None else a.shape[2], c)
    assert got.shape == want.shape
    assert (got == want).all(), (got.astype(int), want.astype(int))


SEEDS = range(8)


@pytest.mark.parametrize("seed", SEEDS)
def test_dense_document_builders(seed):
    rng = np.random.default_rng(seed)
    s = int(rng.integers(2, 24))
    lens = [ref_lens(rng, s), ref_lens(rng, s)]
    want_c = np.zeros((2, 1, s, s), bool)
    want_b = np.zeros((2, 1, s, s), bool)
    for b in range(2):
        d = doc_of(lens[b])
        for i in range(s):
            for j in range(s):
                want_b[b, 0, i, j] = d[i] == d[j]
                want_c[b, 0, i, j] = d[i] == d[j] and j <= i
    check(*M.causal_document_mask(lens), want_c)
    check(*M.document_mask(lens), want_b)
    # the same from segment ids (ids need not be sorted, only contiguous)
    seg = np.stack([rng.permutation(len(lens[b]))[doc_of(lens[b])] for b in range(2)])
    check(*M.causal_document_mask(segment_ids=seg), want_c)
    check(*M.document_mask(segment_ids=seg), want_b)


@pytest.mark.parametrize("seed", SEEDS)
def test_dense_windows(seed):
    rng = np.random.default_rng(100 + seed)
    s = int(rng.integers(1, 24))
    w = int(rng.integers(0, s + 2))
    want = np.array([[i - w <= j <= i for j in range(s)] for i in range(s)])[None, None]
    check(*M.sliding_window_mask(s, w), want)
    g = int(rng.integers(0, s + 1))
    wl, wr = int(rng.integers(0, s)), int(rng.integers(0, s))
    want = np.array([[i < g or j < g or i - wl <= j <= i + wr for j in range(s)]
                     for i in range(s)])[None, None]
    check(*M.global_sliding_window_mask(s, g, (wl, wr)), want)
    want = np.array([[i < g or j < g or abs(i - j) <= wl for j in range(s)]
                     for i in range(s)])[None, None]
    check(*M.global_sliding_window_mask(s, g, wl, batch_size=2), np.repeat(want, 2, 0))


@pytest.mark.parametrize("seed", SEEDS)
def test_dense_shared_question_and_blockwise(seed):
    rng = np.random.default_rng(200 + seed)
    s = int(rng.integers(2, 24))
    q = int(rng.integers(0, s))
    answers = ref_lens(rng, s - q) if s - q > 1 else [s - q]
    seg = np.r_[np.full(q, -1), doc_of(answers)]
    want = np.array([[j <= i and (seg[j] == -1 or seg[j] == seg[i]) for j in range(s)]
                     for i in range(s)])[None, None]
    check(*M.shared_question_mask(q, answers), want)

    blocks = ref_lens(rng, s)
    d = doc_of(blocks)
    last = len(blocks) - 1
    want = np.array([[j <= i and (d[i] == d[j] or d[i] == last) for j in range(s)]
                     for i in range(s)])[None, None]
    check(*M.causal_blockwise_mask(blocks), want)


@pytest.mark.parametrize("seed", SEEDS)
def test_dense_prefix_lm(seed):
    rng = np.random.default_rng(300 + seed)
    s = int(rng.integers(1, 24))
    p = int(rng.integers(0, s + 1))
    want = np.array([[j <= i or j < p for j in range(s)] for i in range(s)])[None, None]
    check(*M.prefix_lm_causal_mask(s, p), want)

    s = max(s, 2)
    lens = ref_lens(rng, s)
    prefixes = [int(rng.integers(0, n + 1)) for n in lens]
    d = doc_of(lens)
    starts = np.r_[0, np.cumsum(lens)[:-1]]
    pos = np.arange(s) - starts[d]
    want = np.array([[d[i] == d[j] and (j <= i or pos[j] < prefixes[d[j]]) for j in range(s)]
                     for i in range(s)])[None, None]
    check(*M.prefix_lm_document_mask(lens, prefixes), want)


@pytest.mark.parametrize("seed", SEEDS)
def test_dense_qk_sparse(seed):
    rng = np.random.default_rng(400 + seed)
    s = int(rng.integers(2, 24))
    lens = ref_lens(rng, s)
    starts = np.r_[0, np.cumsum(lens)[:-1]]
    blocks = [(int(a), int(a + n), int(rng.integers(0, s + 1)))
              for a, n in zip(starts, lens) if rng.random() < 0.6]
    hidden = np.zeros((s, s), bool)               # hidden[i, j]
    for ks, ke, re in blocks:
        for j in range(ks, ke):
            hidden[j:re, j] = True
    want = (np.tril(np.ones((s, s), bool)) & ~hidden)[None, None]
    check(*M.qk_sparse_mask(s, blocks), want)


def test_qk_sparse_reference_picture():
    t, c = M.qk_sparse_mask(10, [(2, 6, 5), (6, 8, 8)])
    m = dense_mask(t, 10, c)[0, 0]
    assert m[2:5].sum(axis=1).tolist() == [2, 2, 2] and m[2:5, :2].all()   # rows 2-4: keys 0-1
    assert m[6:8].sum(axis=1).tolist() == [6, 6] and m[6:8, :6].all()      # rows 6-7: keys 0-5
    assert (m[[0, 1, 5, 8, 9]] == np.tril(np.ones((10, 10), bool))[[0, 1, 5, 8, 9]]).all()


def test_random_eviction():
    t, c = M.random_eviction_mask(16, num_heads=3, evict_prob=0.5, batch_size=2, seed=7)
    a = arr(t)
    assert c is True and a.shape == (2, 3, 16, 1) and a.dtype == np.int32
    j = np.arange(16)
    lts = a[..., 0]
    assert ((lts == 16) | ((lts > j) & (lts < 16))).all()
    assert (lts[..., -1] == 16).all()
    assert (lts < 16).any() and (lts == 16).sum() > 16   # some evicted, some kept
    assert not (lts[:, 0] == lts[:, 1]).all()            # heads differ
    again = arr(M.random_eviction_mask(16, num_heads=3, evict_prob=0.5, batch_size=2, seed=7)[0])
    assert (again == a).all()
    other = arr(M.random_eviction_mask(16, num_heads=3, evict_prob=0.5, batch_size=2, seed=8)[0])
    assert not (other == a).all()
    assert (arr(M.random_eviction_mask(8, 2, evict_prob=0.0)[0]) == 8).all()
    full = arr(M.random_eviction_mask(8, 2, evict_prob=1.0)[0])[..., 0]
    assert (full[..., :-1] < 8).all()
    # dense: key j visible to rows [j, LTS[j])
    m = dense_mask(a, 16, True)
    want = np.array([[[[j <= i < lts[b, h, j] for j in range(16)] for i in range(16)]
                      for h in range(3)] for b in range(2)])
    assert (m == want).all()


def test_batched_inputs():
    t, _ = M.causal_document_mask([[4, 3, 3], [10], [1] * 10])
    a = arr(t)
    assert a.shape == (3, 1, 10, 1)
    assert a[1, 0, :, 0].tolist() == [10] * 10 and a[2, 0, :, 0].tolist() == list(range(1, 11))
    t, _ = M.shared_question_mask([4, 2], [[3, 3], [8]])
    assert arr(t)[1, 0, :, 0].tolist() == [10] * 10
    t, _ = M.prefix_lm_causal_mask(6, [0, 3, 6])
    assert arr(t).shape == (3, 1, 6, 2)
    assert arr(t)[:, 0, :, 1].tolist() == [[0, 1, 2, 3, 4, 5], [0, 0, 0, 3, 4, 5], [0] * 6]
    t, _ = M.prefix_lm_document_mask([[3, 2, 5], [5, 5]], 2)
    assert arr(t).shape == (2, 1, 10, 2)
    t, _ = M.qk_sparse_mask(10, [[(2, 6, 5)], []])
    assert arr(t).shape == (2, 1, 10, 2)
    assert arr(t)[1, 0].tolist() == [[10, 10]] * 10
    t, _ = M.sliding_window_mask(5, 1, batch_size=4)
    assert arr(t).shape == (4, 1, 5, 1)


# --- input validation ----------------------------------------------------------


@pytest.mark.parametrize("call, words", [
    (lambda: M.causal_mask(0), ["causal_mask", "seq_len", "0"]),
    (lambda: M.causal_mask(4, batch_size=0), ["causal_mask", "batch_size"]),
    (lambda: M.sliding_window_mask(10, -1), ["sliding_window_mask", "window", "-1", ">= 0"]),
    (lambda: M.causal_document_mask([4, -1, 7]), ["causal_document_mask", "doc_lens", "-1"]),
    (lambda: M.causal_document_mask([4, 3, 3], seq_len=11),
     ["causal_document_mask", "doc_lens", "seq_len=11", "sum to 10"]),
    (lambda: M.document_mask([[4, 3, 3], [4, 4]]), ["document_mask", "doc_lens", "same length"]),
    (lambda: M.document_mask(), ["document_mask", "exactly one of doc_lens or segment_ids"]),
    (lambda: M.document_mask([10], segment_ids=[[0] * 10]), ["exactly one"]),
    (lambda: M.document_mask(segment_ids=[[0, 0, 1, 1, 0]]),
     ["document_mask", "segment_ids", "contiguous"]),
    (lambda: M.document_mask([]), ["document_mask", "doc_lens"]),
    (lambda: M.shared_question_mask(-2, [3, 3]), ["shared_question_mask", "question_len", "-2"]),
    (lambda: M.shared_question_mask(4, [3, 3], seq_len=12),
     ["shared_question_mask", "answer_lens", "seq_len=12"]),
    (lambda: M.global_sliding_window_mask(10, 11, 1),
     ["global_sliding_window_mask", "global_tokens", "11", "[0, 10]"]),
    (lambda: M.global_sliding_window_mask(10, 2, -1), ["global_sliding_window_mask", "window"]),
    (lambda: M.global_sliding_window_mask(10, 2, (1, 2, 3)), ["global_sliding_window_mask",
                                                              "window", "pair"]),
    (lambda: M.causal_blockwise_mask([4, 3, 3], seq_len=9), ["causal_blockwise_mask",
                                                             "block_lens", "seq_len=9"]),
    (lambda: M.prefix_lm_document_mask([3, 2, 5], [2, 3, 2]),
     ["prefix_lm_document_mask", "prefix_lens", "3", "document 1", "has 2"]),
    (lambda: M.prefix_lm_document_mask([3, 2, 5], [2, 2]),
     ["prefix_lm_document_mask", "prefix_lens", "one prefix length per document"]),
    (lambda: M.prefix_lm_causal_mask(10, 11), ["prefix_lm_causal_mask", "prefix_len", "11"]),
    (lambda: M.prefix_lm_causal_mask(10, -1), ["prefix_lm_causal_mask", "prefix_len", "-1"]),
    (lambda: M.qk_sparse_mask(10, [(2, 12, 5)]), ["qk_sparse_mask", "key_end", "12"]),
    (lambda: M.qk_sparse_mask(10, [(5, 3, 5)]), ["qk_sparse_mask", "key_end", "3"]),
    (lambda: M.qk_sparse_mask(10, [(2, 6, 5), (4, 8, 8)]), ["qk_sparse_mask", "overlap"]),
    (lambda: M.qk_sparse_mask(10, [(2, 6)]), ["qk_sparse_mask", "triple"]),
    (lambda: M.random_eviction_mask(10, 2, evict_prob=1.5),
     ["random_eviction_mask", "evict_prob", "1.5", "[0, 1]"]),
    (lambda: M.random_eviction_mask(10, 0), ["random_eviction_mask", "num_heads", "0"]),
])
def test_validation(call, words):
    with pytest.raises((ValueError, TypeError)) as info:
        call()
    msg = str(info.value)
    for w in words:
        assert w in msg, (w, msg)


def test_type_errors():
    with pytest.raises(TypeError, match="sliding_window_mask: window must be an int"):
        M.sliding_window_mask(10, 2.5)
    with pytest.raises(TypeError, match="causal_mask: seq_len must be an int"):
        M.causal_mask("10")


def test_register_api_exports_every_builder():
    seen = {}

    class FakeApi:
        def export(self, ns, name, obj):
            seen[(ns, name)] = obj

    M.register_api(FakeApi())
    assert set(seen) == {("oarlock.nn.attention", n) for n in M.__all__}
    assert seen[("oarlock.nn.attention", "causal_mask")] is M.causal_mask


# --- the dense reference itself -------------------------------------------------


def test_dense_mask_table_and_alignment():
    # causal C=1 with Sq < Sk: key j hidden from rows i < j - (Sk - Sq)
    lts = np.full((1, 1, 6, 1), 4, np.int32)
    m = dense_mask(lts, 4, True)[0, 0]
    want = np.array([[j <= i + 2 for j in range(6)] for i in range(4)])
    assert (m == want).all()
    # non-causal C=4
    idx = np.array([[3, 4, 0, 1]] * 5, np.int32).reshape(1, 1, 5, 4)
    m = dense_mask(idx, 5, False)[0, 0]
    assert m[:, 0].tolist() == [False, True, True, False, True]
    # no mask: windows
    m = dense_mask(None, 5, True, window_size=1, sk=5)[0, 0]
    assert (m == np.array([[i - 1 <= j <= i for j in range(5)] for i in range(5)])).all()
    m = dense_mask(None, 5, False, window_size=(0, 2), sk=5)[0, 0]
    assert (m == np.array([[i <= j <= i + 2 for j in range(5)] for i in range(5)])).all()
    with pytest.raises(ValueError, match="window_size"):
        dense_mask(idx, 5, False, window_size=2)
    with pytest.raises(ValueError, match="C=4"):
        dense_mask(idx, 5, True)


def test_dense_attention_basics():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 5, 4, 8))
    k = rng.standard_normal((2, 7, 2, 8))
    v = rng.standard_normal((2, 7, 2, 8))
    mask = np.ones((2, 1, 5, 7), bool)
    mask[:, :, 3] = False                                   # a fully masked row
    out, lse = dense_attention(q, k, v, mask, scale=0.5)
    assert out.shape == (2, 5, 4, 8) and lse.shape == (2, 4, 5)
    assert (out[:, 3] == 0).all() and np.isneginf(lse[:, :, 3]).all()
    # against a plain softmax for one row / head (GQA: q head 3 uses kv head 1)
    s = q[1, 2, 3] @ k[1, :, 1].T * 0.5
    p = np.exp(s - s.max())
    p /= p.sum()
    assert np.allclose(out[1, 2, 3], p @ v[1, :, 1])
    assert np.isclose(lse[1, 3, 2], np.log(np.exp(s).sum()))


# --- builders through the op -------------------------------------------------------


BUILT = dict(REFERENCE)
BUILT["random eviction"] = (lambda: M.random_eviction_mask(10, num_heads=2, seed=3), True, None)
BUILT["batched document"] = (lambda: M.document_mask([[4, 3, 3], [2, 8]]), False, None)


@pytest.mark.parametrize("name", list(BUILT))
def test_builders_through_flashmask_attention(name):
    import oarlock

    t, causal = BUILT[name][0]()
    a = arr(t)
    b, hm = a.shape[:2]
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((b, S, 2, 8)).astype(np.float32) for _ in range(3))
    want_out, want_lse = dense_attention(q, k, v, dense_mask(a, S, causal), 1 / np.sqrt(8))
    out, lse = oarlock.nn.functional.flashmask_attention(
        oarlock.to_tensor(q), oarlock.to_tensor(k), oarlock.to_tensor(v), t, causal=causal,
        return_softmax_lse=True)
    np.testing.assert_allclose(out.numpy(), want_out, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(lse.numpy(), want_lse, rtol=1e-5, atol=1e-5)


def test_builders_exported_in_oarlock_nn_attention():
    import oarlock

    for name in M.__all__:
        assert getattr(oarlock.nn.attention, name) is getattr(M, name)


def test_batch_size_repeats_one_row():
    for build in (lambda n: M.causal_document_mask([4, 3, 3], batch_size=n),
                  lambda n: M.document_mask(segment_ids=[0, 0, 1, 1, 1, 1, 1, 2, 2, 2], batch_size=n),
                  lambda n: M.shared_question_mask(4, [3, 3], batch_size=n),
                  lambda n: M.causal_blockwise_mask([4, 3, 3], batch_size=n),
                  lambda n: M.prefix_lm_document_mask([3, 2, 5], 2, batch_size=n)):
        one, c1 = build(None)
        three, c3 = build(3)
        assert c1 == c3 and arr(three).shape[0] == 3
        assert (arr(three) == arr(one)).all()
    with pytest.raises(ValueError, match="causal_blockwise_mask: invalid batch_size=3"):
        M.causal_blockwise_mask([[4, 6], [5, 5]], batch_size=3)
    t, _ = M.shared_question_mask([4, 4], [3, 3])
    assert arr(t).shape[0] == 2
