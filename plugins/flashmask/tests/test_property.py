"""Property tests: flashmask_attention agrees with the dense float64 oracle.

Random startend_row_indices are valid by construction for each (causal, C)
combination of the REFERENCE table: values in [0, Sq], LTS <= LTE and
UTS <= UTE. "Structured" masks also follow the layout FlashMask's encodings
use (every example of the REFERENCE table does): lower-triangle intervals
start at or below the diagonal row of their key (LTS >= d_j, where
d_j = clip(j - (Sk - Sq), 0, Sq) is the first row that may see key j under
bottom-right alignment), upper-triangle intervals end at or above it
(UTE <= d_j), so UTS <= UTE <= d_j <= LTS <= LTE. "Free" masks only keep the
table's own constraints; the table gives them a meaning too.
"""

import numpy as np
import pytest
pytest.importorskip("hypothesis", reason="the property tests need hypothesis (pip install -r requirements-dev.txt)")
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import oarlock
from oarlock_flashmask.dense import dense_attention, dense_mask

F = oarlock.nn.functional

COMBOS = [(True, 1), (True, 2), (False, 2), (False, 4)]
SETTINGS = settings(max_examples=30, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


def _value(draw, lo, hi):
    """An int in [lo, hi], biased towards the ends (empty / full intervals)."""
    if lo >= hi:
        return lo
    kind = draw(st.integers(0, 4))
    if kind == 0:
        return lo
    if kind == 1:
        return hi
    return draw(st.integers(lo, hi))


@st.composite
def startend(draw, b, hm, sq, sk, causal, c, structured):
    off = sk - sq
    out = np.zeros((b, hm, sk, c), np.int32)
    for bi in range(b):
        for h in range(hm):
            for j in range(sk):
                d = min(max(j - off, 0), sq) if structured else 0
                if c == 1:
                    out[bi, h, j] = [_value(draw, d, sq)]
                elif causal:                              # LTS, LTE
                    lts = _value(draw, d, sq)
                    out[bi, h, j] = [lts, _value(draw, lts, sq)]
                elif c == 2:                              # LTS, UTE
                    ute = _value(draw, 0, d if structured else sq)
                    lts = _value(draw, d if structured else 0, sq)
                    out[bi, h, j] = [lts, ute]
                else:                                     # LTS, LTE, UTS, UTE
                    ute = _value(draw, 0, d if structured else sq)
                    uts = _value(draw, 0, ute)
                    lts = _value(draw, d if structured else 0, sq)
                    out[bi, h, j] = [lts, _value(draw, lts, sq), uts, ute]
    return out


@st.composite
def problems(draw, structured=True):
    causal, c = draw(st.sampled_from(COMBOS))
    b = draw(st.integers(1, 2))
    hk = draw(st.integers(1, 2))
    hq = hk * draw(st.integers(1, 2))
    hm = draw(st.sampled_from(sorted({1, hk, hq})))
    sq = draw(st.integers(1, 12))
    sk = sq if draw(st.integers(0, 2)) == 0 else draw(st.integers(1, 12))   # Sq != Sk often
    d = draw(st.sampled_from([4, 8]))
    idx = draw(startend(b, hm, sq, sk, causal, c, structured))
    seed = draw(st.integers(0, 2**31 - 1))
    scale = draw(st.sampled_from([None, 0.3]))
    return dict(causal=causal, idx=idx, b=b, hq=hq, hk=hk, sq=sq, sk=sk, d=d, seed=seed,
                scale=scale)


def _inputs(p):
    rng = np.random.default_rng(p["seed"])
    q = rng.standard_normal((p["b"], p["sq"], p["hq"], p["d"])).astype(np.float32)
    k = rng.standard_normal((p["b"], p["sk"], p["hk"], p["d"])).astype(np.float32)
    v = rng.standard_normal((p["b"], p["sk"], p["hk"], p["d"])).astype(np.float32)
    return q, k, v


def _check_forward(p):
    q, k, v = _inputs(p)
    scale = p["scale"]
    mask = dense_mask(p["idx"], p["sq"], p["causal"])
    ref_out, ref_lse = dense_attention(q, k, v, mask, 1 / np.sqrt(p["d"]) if scale is None else scale)
    out, lse = F.flashmask_attention(
        oarlock.to_tensor(q), oarlock.to_tensor(k), oarlock.to_tensor(v),
        oarlock.to_tensor(p["idx"], dtype="int32"), causal=p["causal"],
        return_softmax_lse=True, softmax_scale=scale)
    out, lse = np.asarray(out.numpy()), np.asarray(lse.numpy())
    assert out.shape == ref_out.shape and out.dtype == np.float32
    assert lse.shape == ref_lse.shape
    np.testing.assert_allclose(out, ref_out, rtol=1e-5, atol=1e-5)
    empty = np.isneginf(ref_lse)
    assert (np.isneginf(lse) == empty).all(), "fully masked rows must give lse -inf exactly there"
    np.testing.assert_allclose(lse[~empty], ref_lse[~empty], rtol=1e-5, atol=1e-5)
    # fully masked query rows give 0 output
    rows_empty = empty.transpose(0, 2, 1)                  # [B, Sq, Hq]
    assert (out[rows_empty] == 0).all()


@pytest.mark.parametrize("combo", COMBOS, ids=lambda c: f"causal={c[0]},C={c[1]}")
def test_combo_smoke(combo):
    """One hand-picked case per (causal, C) with Sq != Sk and a fully masked row."""
    causal, c = combo
    sq, sk = 5, 7
    idx = np.full((1, 1, sk, c), sq, np.int32)
    if causal:
        idx[0, 0, :, 0] = np.maximum(np.arange(sk) - 2, 0)   # everything masked from row 0..
        idx[0, 0, 3:, 0] = sq
        if c == 2:
            idx[0, 0, :, 1] = sq
    else:
        idx[0, 0, :, 0] = 0                                  # every row masked for all keys
        idx[0, 0, :, 1] = 0 if c == 2 else sq
        if c == 4:
            idx[0, 0, :, 2:] = 0
        idx[0, 0, 4, 0] = 3                                  # rows 0-2 see key 4
        if c == 4:
            idx[0, 0, 4, 1] = sq
    p = dict(causal=causal, idx=idx, b=1, hq=2, hk=1, sq=sq, sk=sk, d=8, seed=1, scale=None)
    mask = dense_mask(idx, sq, causal)
    assert not mask.all(axis=-1).all() and (~mask.any(axis=-1)).any()  # some row fully masked
    _check_forward(p)


@SETTINGS
@given(problems(structured=True))
def test_forward_matches_dense_structured(p):
    _check_forward(p)


@SETTINGS
@given(problems(structured=False))
def test_forward_matches_dense_free(p):
    _check_forward(p)


# --- gradients ------------------------------------------------------------------


def _torch_reference_grads(q, k, v, mask, scale, g_out):
    torch = pytest.importorskip("torch")
    qt, kt, vt = (torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in (q, k, v))
    rep = q.shape[2] // k.shape[2]
    kk = kt.repeat_interleave(rep, dim=2)
    vv = vt.repeat_interleave(rep, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", qt, kk) * scale
    m = torch.tensor(np.repeat(mask, q.shape[2] // mask.shape[1], axis=1))
    m = m.expand(s.shape)
    s = s.masked_fill(~m, float("-inf"))
    any_ = m.any(dim=-1, keepdim=True)
    s = torch.where(any_, s, torch.zeros_like(s))
    pr = torch.softmax(s, dim=-1) * any_
    out = torch.einsum("bhqk,bkhd->bqhd", pr, vv)
    (out * torch.tensor(g_out, dtype=torch.float64)).sum().backward()
    return out.detach().numpy(), qt.grad.numpy(), kt.grad.numpy(), vt.grad.numpy()


GRAD_CASES = [
    # name, causal, builder of (idx, sq, sk)
    ("causal-doc", True, lambda: (np.array([4, 4, 4, 4, 7, 7, 7, 10, 10, 10], np.int32)
                                  .reshape(1, 1, 10, 1), 10, 10)),
    ("qk-sparse", True, lambda: (np.stack([[10, 10, 2, 3, 4, 5, 6, 7, 10, 10],
                                           [10, 10, 5, 5, 5, 5, 8, 8, 10, 10]], -1)
                                 .astype(np.int32).reshape(1, 1, 10, 2), 10, 10)),
    ("global-window", False, lambda: (np.stack([[10, 10, 4, 5, 6, 7, 8, 9, 10, 10], [10] * 10,
                                                [0, 0, 0, 0, 2, 2, 2, 2, 2, 2],
                                                [0, 0, 0, 0, 3, 4, 5, 6, 7, 8]], -1)
                                      .astype(np.int32).reshape(1, 1, 10, 4), 10, 10)),
    # non-causal C=2, Sq < Sk, with fully masked rows (row 0 sees nothing)
    ("prefix-lm-sq<sk", False, lambda: (np.stack([[6] * 9, [1, 1, 1, 2, 3, 4, 5, 6, 6]], -1)
                                         .astype(np.int32).reshape(1, 1, 9, 2), 6, 9)),
    # causal C=1, Sq > Sk: the first rows see no key at all
    ("causal-sq>sk", True, lambda: (np.array([[8, 5, 8, 8, 6], [3, 8, 8, 8, 8]], np.int32)
                                    .reshape(1, 2, 5, 1), 8, 5)),
]


@pytest.mark.parametrize("name, causal, build", GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_gradients_match_dense(name, causal, build):
    idx, sq, sk = build()
    rng = np.random.default_rng(len(name))
    hq, hk, d = 2, 1 if idx.shape[1] == 1 else 2, 8
    b = idx.shape[0]
    q = rng.standard_normal((b, sq, hq, d)).astype(np.float32)
    k = rng.standard_normal((b, sk, hk, d)).astype(np.float32)
    v = rng.standard_normal((b, sk, hk, d)).astype(np.float32)
    g = rng.standard_normal((b, sq, hq, d)).astype(np.float32)
    mask = dense_mask(idx, sq, causal)
    scale = 1 / np.sqrt(d)
    ref_out, dq_ref, dk_ref, dv_ref = _torch_reference_grads(q, k, v, mask, scale, g)
    np.testing.assert_allclose(ref_out, dense_attention(q, k, v, mask, scale)[0], atol=1e-12)

    qt, kt, vt = (oarlock.to_tensor(x, stop_gradient=False) for x in (q, k, v))
    out = F.flashmask_attention(qt, kt, vt, oarlock.to_tensor(idx, dtype="int32"), causal=causal)
    np.testing.assert_allclose(out.numpy(), ref_out, rtol=1e-5, atol=1e-5)
    (out * oarlock.to_tensor(g)).sum().backward()
    for got, want in ((qt.grad, dq_ref), (kt.grad, dk_ref), (vt.grad, dv_ref)):
        np.testing.assert_allclose(np.asarray(got.numpy()), want, rtol=1e-5, atol=1e-5)
