"""moe_gate_dispatch(_permute), moe_combine(_no_weight) and cal_aux_loss against float64 numpy references written
as plain loops from Paddle 3.2's kernel sources (moe_fuse_op.h, moe_gate_dispatch_grad_kernel.cu,
moe_combine(_grad)_kernel.cu, cal_aux_loss.py); Paddle has no CPU kernel for them, so no Paddle run. Gradients
also against central finite differences where the function is smooth (combine, aux loss)."""

import numpy as np
import pytest

import oarlock
import oarlock.incubate.nn.functional as IF


def _ref_dispatch(x, gate, bias, k, cap, use_pad):
    """Paddle's kernel, step by step: top-k (ties to the lower id) of gate + bias, a stable sort of the slots by
    (expert, choice) with use_pad else by expert alone over the slot order token * k + choice, then capacity."""
    s, e = gate.shape
    score = gate + (0 if bias is None else bias)
    eid = np.zeros((s, k), dtype=np.int64)
    cw = np.zeros((s, k))
    for t in range(s):
        chosen = []
        for _ in range(k):
            best = max((j for j in range(e) if j not in chosen), key=lambda j: (score[t, j], -j))
            chosen.append(best)
        eid[t] = chosen
        cw[t] = gate[t, chosen]
    slots = [(t, j) for t in range(s) for j in range(k)]
    key = (lambda tj: (eid[tj], tj[1])) if use_pad else (lambda tj: eid[tj])
    ordered = sorted(slots, key=key)                       # Python's sort is stable, like the radix sort
    offset = np.cumsum(np.bincount(eid.ravel(), minlength=e))
    si = np.zeros((k, s), dtype=np.int64)
    y = np.zeros((e * cap if use_pad else s * k, x.shape[1]))
    for d, (t, j) in enumerate(ordered):
        ex = eid[t, j]
        rie = d - (offset[ex - 1] if ex else 0)
        if rie >= cap:
            cw[t, j] = 0.0
            continue
        row = ex * cap + rie if use_pad else d
        si[j, t] = row
        y[row] = x[t]
    return y, cw, si, offset, eid


def _ref_dispatch_grad(gy, gcw, cw, si, eid, e):
    s, k = cw.shape
    dx = np.zeros((s, gy.shape[1]))
    dgate = np.zeros((s, e))
    for t in range(s):
        for j in range(k):
            if cw[t, j] > 0:
                dx[t] += gy[si[j, t]]
                dgate[t, eid[t, j]] = gcw[t, j]
    return dx, dgate


def _tensor(a, dtype="float32", grad=True):
    t = oarlock.to_tensor(np.asarray(a).astype(dtype))
    t.stop_gradient = not grad
    return t


def _inputs(seed, s=9, e=4, h=5):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((s, h))
    gate = rng.random((s, e)).astype(np.float32).astype(np.float64)
    gate[1, :] = 0.25                                      # a row of ties: experts by id
    bias = rng.normal(0, 0.2, e).astype(np.float32).astype(np.float64)
    return x, gate, bias


@pytest.mark.parametrize("use_pad, with_bias", [(True, False), (True, True), (False, True)])
def test_dispatch_matches_reference_values_and_grads(use_pad, with_bias):
    x, gate, bias = _inputs(0)
    k, cap = 2, 4                                          # 18 slots over 4 experts: some are dropped
    ox, og = _tensor(x), _tensor(gate)
    ob = _tensor(bias, grad=False) if with_bias else None
    y, cw, si, off, eid = IF.moe_gate_dispatch(ox, og, ob, k, cap, use_pad)
    ry, rcw, rsi, roff, reid = _ref_dispatch(x, gate, bias if with_bias else None, k, cap, use_pad)
    assert (y.dtype, cw.dtype, si.dtype, off.dtype, eid.dtype) == (
        oarlock.float32, oarlock.float32, oarlock.int32, oarlock.int64, oarlock.int32)
    np.testing.assert_allclose(y.numpy(), ry, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(cw.numpy(), rcw, rtol=1e-6)
    np.testing.assert_array_equal(si.numpy(), rsi)
    np.testing.assert_array_equal(off.numpy(), roff)
    np.testing.assert_array_equal(eid.numpy(), reid)
    assert (rcw == 0).any(), "the case should drop slots over capacity"
    rng = np.random.default_rng(1)
    gy, gcw = rng.standard_normal(ry.shape), rng.standard_normal(rcw.shape)
    ((y * _tensor(gy, grad=False)).sum() + (cw * _tensor(gcw, grad=False)).sum()).backward()
    rdx, rdg = _ref_dispatch_grad(gy, gcw, rcw, rsi, reid, gate.shape[1])
    np.testing.assert_allclose(ox.grad.numpy(), rdx, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(og.grad.numpy(), rdg, rtol=1e-6, atol=1e-7)


def test_dispatch_permute_layout_and_bfloat16():
    x, gate, _ = _inputs(2, s=8, e=4)
    k, cap, world = 2, 3, 2
    y, cw, si, off, eid = IF.moe_gate_dispatch_permute(_tensor(x), _tensor(gate), None, k, cap, world)
    ry, rcw, rsi, roff, reid = _ref_dispatch(x, gate, None, k, cap, True)
    local = 4 // world
    want = ry.reshape(world, local, cap, -1).transpose(1, 0, 2, 3)    # expert = rank * local + l at [l, rank]
    assert list(y.shape) == [local, world, cap, 5]
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(si.numpy(), rsi)
    xb = _tensor(x, "bfloat16")
    yb = IF.moe_gate_dispatch(xb, _tensor(gate), None, k, cap, True)[0]
    assert yb.dtype == oarlock.bfloat16                    # rows are copies: exactly the rounded x's rows
    np.testing.assert_array_equal(yb.astype("float32").numpy(),
                                  _ref_dispatch(xb.astype("float32").numpy(), gate, None, k, cap, True)[0])


def _ref_combine(x, w, si):
    s, k = si.shape
    y = np.zeros((s, x.shape[1]))
    for t in range(s):
        for j in range(k):
            y[t] += w[t, j] * x[si[t, j]]
    return y


def test_combine_values_grads_and_round_trip():
    rng = np.random.default_rng(3)
    n, s, k, h = 10, 4, 2, 3
    x = rng.standard_normal((n, h))
    w = rng.random((s, k))
    w[2, 1] = 0.0                                           # a dropped slot: no gradient to its row of x
    si = rng.permutation(n)[: s * k].reshape(s, k)
    ox, ow, osi = _tensor(x, "float64"), _tensor(w, "float64"), _tensor(si, "int32", grad=False)
    y = IF.moe_combine(ox, ow, osi)
    np.testing.assert_allclose(y.numpy(), _ref_combine(x, w, si), rtol=1e-12)
    g = rng.standard_normal((s, h))
    (y * _tensor(g, "float64", grad=False)).sum().backward()
    dx = np.zeros_like(x)
    dw = np.zeros_like(w)
    for t in range(s):
        for j in range(k):
            if w[t, j] != 0:
                dx[si[t, j]] += g[t] * w[t, j]
            dw[t, j] = g[t] @ x[si[t, j]]
    np.testing.assert_allclose(ox.grad.numpy(), dx, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ow.grad.numpy(), dw, rtol=1e-12, atol=1e-12)
    # finite differences of <g, combine(x, w)> in w
    eps, fd = 1e-6, np.zeros_like(w)
    for idx in np.ndindex(*w.shape):
        wp, wm = w.copy(), w.copy()
        wp[idx] += eps
        wm[idx] -= eps
        fd[idx] = ((_ref_combine(x, wp, si) - _ref_combine(x, wm, si)) * g).sum() / (2 * eps)
    np.testing.assert_allclose(ow.grad.numpy(), fd, rtol=1e-6, atol=1e-8)
    # dispatch then combine with the gate weights gives back sum_j w_j * x for the kept slots
    xs, gate, _ = _inputs(4)
    yd, cw, sidx, _, _ = IF.moe_gate_dispatch(_tensor(xs), _tensor(gate), None, 2, 4, True)
    back = IF.moe_combine(yd, cw, sidx.transpose([1, 0]))
    np.testing.assert_allclose(back.numpy(), xs * cw.numpy().sum(1, keepdims=True), rtol=1e-5, atol=1e-6)
    # without padding (y [S * k, H]) and capacity 3: each token comes back once per kept slot
    yd, cw, sidx, _, _ = IF.moe_gate_dispatch(_tensor(xs), _tensor(gate), None, 2, 3, False)
    summed = IF.moe_combine_no_weight(yd, cw, sidx.transpose([1, 0]))
    kept = (cw.numpy() > 1e-15).sum(1, keepdims=True)
    assert list(summed.shape) == [9, 5] and 0 < kept.sum() < 18
    np.testing.assert_allclose(summed.numpy(), kept * xs, rtol=1e-5, atol=1e-6)


def _ref_aux(gp, dm, tm, dtm, e, use_group, moe_k, clip_min):
    if dtm is not None:
        seqlen = dtm.sum()
    elif tm is not None:
        seqlen = tm.sum()
    else:
        seqlen = gp.size / e
    seqlen = max(seqlen, clip_min)
    counts = dm.sum(0) if dm.ndim == 2 else dm
    ce = counts / seqlen
    me = gp.sum(0) / seqlen
    loss = (me * ce).sum() * e / (moe_k if use_group else 1)
    grad = np.broadcast_to(ce * e / (moe_k if use_group else 1) / seqlen, gp.shape)
    if dtm is not None and tm is not None and gp.shape[0] != dtm.shape[0]:
        loss = loss * seqlen / max(tm.sum(), clip_min)
    return loss, seqlen, ce, grad


@pytest.mark.parametrize("variant", ["plain", "tokens_mask", "scaled"])
def test_cal_aux_loss_matches_reference(variant):
    rng = np.random.default_rng(5)
    s, e = 12, 4
    gp = rng.random((s, e))
    dm = rng.integers(0, 2, (s, e))
    tm = (rng.random(s) > 0.3).astype(np.float64) if variant != "plain" else None
    dtm = rng.random(s + 4) > 0.5 if variant == "scaled" else None
    og = _tensor(gp, "float64")
    out = IF.cal_aux_loss(og, _tensor(dm, "int64", grad=False), None if tm is None else _tensor(tm, "float64", False),
                          None if dtm is None else oarlock.to_tensor(dtm), e, True, 2, 1.0)
    loss, seqlen, ce, grad = _ref_aux(gp, dm, tm, dtm, e, True, 2, 1.0)
    assert [list(t.shape) for t in out] == [[], [], [e]]
    np.testing.assert_allclose(out[0].numpy(), loss, rtol=1e-12)
    np.testing.assert_allclose(out[1].numpy(), seqlen, rtol=1e-12)
    np.testing.assert_allclose(out[2].numpy(), ce, rtol=1e-12)
    out[0].backward()
    np.testing.assert_allclose(og.grad.numpy(), grad, rtol=1e-12)   # the unscaled loss's gradient


def test_bad_input_names_function_and_argument():
    x, gate = _tensor(np.ones((4, 3))), _tensor(np.ones((4, 2)))
    with pytest.raises(ValueError, match=r"moe_gate_dispatch\(\): argument 'capacity' = 0"):
        IF.moe_gate_dispatch(x, gate, None, 1, 0, True)
    with pytest.raises(ValueError, match=r"moe_gate_dispatch\(\): argument 'k' = 3; accepted: an int from 1 to"):
        IF.moe_gate_dispatch(x, gate, None, 3, 2, True)
    with pytest.raises(ValueError, match=r"arguments 'x' \[4, 3\] and 'gate_logits' \[3, 2\]"):
        IF.moe_gate_dispatch(x, _tensor(np.ones((3, 2))), None, 1, 2, True)
    with pytest.raises(TypeError, match=r"'gate_logits' has dtype .*float64; accepted: float32"):
        IF.moe_gate_dispatch(x, _tensor(np.ones((4, 2)), "float64"), None, 1, 2, True)
    with pytest.raises(TypeError, match=r"moe_gate_dispatch\(\): argument 'x' has dtype .*int64; accepted: a floating"):
        IF.moe_gate_dispatch(_tensor(np.ones((4, 3)), "int64"), gate, None, 1, 2, True)
    with pytest.raises(TypeError, match=r"moe_combine\(\): argument 'combine_weights' has dtype .*float64; accepted"):
        IF.moe_combine(x, _tensor(np.ones((2, 2)), "float64"), _tensor(np.zeros((2, 2)), "int32"))
    with pytest.raises(ValueError, match=r"argument 'corr_bias' = \[3\]"):
        IF.moe_gate_dispatch(x, gate, _tensor(np.ones(3)), 1, 2, True)
    with pytest.raises(ValueError, match=r"moe_gate_dispatch_permute\(\): argument 'world_size' = 3"):
        IF.moe_gate_dispatch_permute(x, gate, None, 1, 2, 3)
    with pytest.raises(TypeError, match=r"moe_combine\(\): argument 'scatter_index' has dtype .*int64"):
        IF.moe_combine(x, _tensor(np.ones((2, 2))), _tensor(np.zeros((2, 2)), "int64"))
    with pytest.raises(ValueError, match=r"moe_combine\(\): argument 'scatter_index' holds values in \[0, 7\]"):
        IF.moe_combine(x, _tensor(np.ones((2, 2))), _tensor([[0, 7], [1, 2]], "int32"))
    with pytest.raises(ValueError, match=r"moe_combine_no_weight\(\): argument 'x' has 4 rows; accepted: seq_len"):
        IF.moe_combine_no_weight(x, _tensor(np.ones((3, 2))), _tensor(np.zeros((3, 2)), "int32"))
    with pytest.raises(TypeError, match=r"cal_aux_loss\(\): argument 'dispatch_mask' has dtype"):
        IF.cal_aux_loss(_tensor(np.ones((4, 2))), _tensor(np.ones(2)), None, None, 2, False, 1, 1.0)


def test_combine_gradient_sums_rows_reached_twice():
    """Two live slots naming one row of x: its gradient is the sum (the np.add.at path of the backward)."""
    rng = np.random.default_rng(7)
    x, w = rng.standard_normal((4, 3)), rng.random((3, 2))
    si = np.array([[0, 1], [1, 2], [3, 1]])
    ox, ow = _tensor(x, "float64"), _tensor(w, "float64")
    g = rng.standard_normal((3, 3))
    (IF.moe_combine(ox, ow, _tensor(si, "int32", grad=False)) * _tensor(g, "float64", grad=False)).sum().backward()
    dx = np.zeros_like(x)
    for t in range(3):
        for j in range(2):
            dx[si[t, j]] += g[t] * w[t, j]
    np.testing.assert_allclose(ox.grad.numpy(), dx, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ow.grad.numpy(), np.einsum("sh,skh->sk", g, x[si]), rtol=1e-12)
