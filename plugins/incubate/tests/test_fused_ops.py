"""fused_rms_norm, fused_layer_norm, fused_partial_rope, fused_bias_act and fused_dropout_add: values against
Paddle 3.2's CPU kernels where it has them (the norms, dropout_add), else against float64 numpy written from
Paddle's kernel sources; gradients against central finite differences in float64 (Paddle has no CPU backward
for these)."""

import math

import numpy as np
import pytest

import oarlock
import oarlock.incubate.nn.functional as IF


def _t(a, dtype="float64", grad=True):
    t = oarlock.to_tensor(np.asarray(a).astype(dtype))
    t.stop_gradient = not grad
    return t


def _fd_check(fn, arrays, g, wrt, rtol=1e-6, atol=1e-8):
    """<g, fn(arrays)> differentiated by central differences in arrays[i] for i in wrt, against autograd."""
    tensors = [None if a is None else _t(a) for a in arrays]
    (fn(*tensors) * _t(g, grad=False)).sum().backward()
    eps = 1e-6
    for i in wrt:
        fd = np.zeros_like(arrays[i])
        for idx in np.ndindex(*arrays[i].shape):
            plus, minus = [a.copy() if a is not None else None for a in arrays], [
                a.copy() if a is not None else None for a in arrays]
            plus[i][idx] += eps
            minus[i][idx] -= eps
            with oarlock.no_grad():
                fp = (fn(*[None if a is None else _t(a, grad=False) for a in plus]).numpy() * g).sum()
                fm = (fn(*[None if a is None else _t(a, grad=False) for a in minus]).numpy() * g).sum()
            fd[idx] = (fp - fm) / (2 * eps)
        np.testing.assert_allclose(tensors[i].grad.numpy(), fd, rtol=rtol, atol=atol, err_msg=f"input {i}")


def _norm_inputs(seed=0):
    rng = np.random.default_rng(seed)
    x, r = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 3, 4))
    b, w, nb = rng.standard_normal(4), rng.uniform(0.5, 1.5, 4), rng.standard_normal(4)
    return x, r, b, w, nb


def test_fused_rms_norm_matches_paddle(paddle):
    from paddle.incubate.nn.functional import fused_rms_norm
    x, r, b, w, nb = _norm_inputs()
    P = paddle.to_tensor
    f32 = [a.astype("float32") for a in (x, r, b, w, nb)]
    cases = [dict(norm_bias=True, begin=2), dict(norm_bias=False, begin=-1, residual=True, bias=True),
             dict(norm_bias=True, begin=2, bias=True)]          # bias without residual: ignored, as Paddle
    for case in cases:
        args = dict(begin_norm_axis=case["begin"], bias=P(f32[2]) if case.get("bias") else None,
                    residual=P(f32[1]) if case.get("residual") else None)
        want = fused_rms_norm(P(f32[0]), P(f32[3]), P(f32[4]) if case["norm_bias"] else None, 1e-5, **args)
        ours = dict(begin_norm_axis=case["begin"], bias=_t(f32[2], "float32") if case.get("bias") else None,
                    residual=_t(f32[1], "float32") if case.get("residual") else None)
        got = IF.fused_rms_norm(_t(f32[0], "float32"), _t(f32[3], "float32"),
                                _t(f32[4], "float32") if case["norm_bias"] else None, 1e-5, **ours)
        assert isinstance(got, tuple) and len(got) == 2
        for o, p in zip(got, want):
            assert list(o.shape) == list(p.shape), case
            np.testing.assert_allclose(o.numpy(), p.numpy(), rtol=1e-5, atol=1e-5, err_msg=str(case))
    # begin_norm_axis=1 over [3, 4] with a weight of 12 numbers
    w12 = np.linspace(0.5, 1.5, 12).astype("float32")
    want = fused_rms_norm(P(f32[0]), P(w12), None, 1e-6, 1)[0]
    got = IF.fused_rms_norm(_t(f32[0], "float32"), _t(w12, "float32"), None, 1e-6, 1)[0]
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


def test_fused_layer_norm_matches_paddle(paddle):
    from paddle.incubate.nn.functional import fused_layer_norm
    x, r, b, w, nb = (a.astype("float32") for a in _norm_inputs(1))
    P = paddle.to_tensor
    for kwargs in (dict(), dict(bias="b", residual="r"), dict(weights=False, bias="b", residual="r")):
        with_w = kwargs.get("weights", True)
        res = "residual" in kwargs
        want = fused_layer_norm(P(x), P(w) if with_w else None, P(nb) if with_w else None, 1e-5, 0.5, 2,
                                bias=P(b) if res else None, residual=P(r) if res else None)
        got = IF.fused_layer_norm(_t(x, "float32"), _t(w, "float32") if with_w else None,
                                  _t(nb, "float32") if with_w else None, 1e-5, 0.5, 2,
                                  bias=_t(b, "float32") if res else None, residual=_t(r, "float32") if res else None)
        assert len(got) == 4
        names = ("out", "residual_out", "mean", "invvar")
        if not with_w:   # Paddle returns the fused add as out and leaves the other outputs uninitialised
            h = x + b + 0.5 * r
            np.testing.assert_allclose(got[0].numpy(), want[0].numpy(), rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(got[1].numpy(), h, rtol=1e-6, atol=1e-6)
            continue
        for name, o, p in zip(names, got, want):
            if name == "residual_out" and not res:
                assert p.numpy().size == 0 and list(o.shape) == [0]   # Paddle: nothing in it either
                continue
            np.testing.assert_allclose(o.numpy(), p.numpy(), rtol=1e-5, atol=1e-5, err_msg=f"{kwargs} {name}")


def test_fused_norm_gradients_by_finite_differences():
    x, r, b, w, nb = _norm_inputs(2)
    g = np.random.default_rng(3).standard_normal(x.shape)
    rms = lambda x_, w_, nb_, b_, r_: IF.fused_rms_norm(x_, w_, nb_, 1e-5, 2, bias=b_, residual=r_)[0]  # noqa: E731
    _fd_check(rms, [x, w, nb, b, r], g, wrt=range(5))
    ln = lambda x_, w_, nb_, b_, r_: IF.fused_layer_norm(x_, w_, nb_, 1e-5, 0.5, 2, bias=b_,  # noqa: E731
                                                         residual=r_)[0]
    _fd_check(ln, [x, w, nb, b, r], g, wrt=range(5))


def _ref_partial_rope(x, cos, sin):
    b, s, h, d = x.shape
    pe = cos.shape[-1]
    out = x.copy()
    for t in range(s):
        c, sn = cos[0, t, 0], sin[0, t, 0]
        for bb in range(b):
            for hh in range(h):
                p = x[bb, t, hh, d - pe:]
                q = np.concatenate([p[0::2], p[1::2]])
                rot = np.array([-q[i + pe // 2] if i < pe // 2 else q[i - pe // 2] for i in range(pe)])
                out[bb, t, hh, d - pe:] = q * c + rot * sn
    return out


@pytest.mark.parametrize("pe", [4, 6])
def test_fused_partial_rope_matches_kernel_reference(pe):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 2, 6))
    ang = rng.uniform(0, 3, (1, 3, 1, pe))
    cos, sin = np.cos(ang), np.sin(ang)
    got = IF.fused_partial_rope(_t(x), _t(cos, grad=False), _t(sin, grad=False))
    np.testing.assert_allclose(got.numpy(), _ref_partial_rope(x, cos, sin), rtol=1e-12, atol=1e-12)
    g = rng.standard_normal(x.shape)
    _fd_check(lambda x_: IF.fused_partial_rope(x_, _t(cos, grad=False), _t(sin, grad=False)), [x], g, wrt=[0])
    half = IF.fused_partial_rope(_t(x, "bfloat16"), _t(cos, "bfloat16"), _t(sin, "bfloat16"))
    assert half.dtype == oarlock.bfloat16
    np.testing.assert_allclose(half.astype("float32").numpy(), _ref_partial_rope(x, cos, sin), atol=0.05)


def _gelu(v):
    return 0.5 * v * (1 + np.vectorize(math.erf)(v / math.sqrt(2)))


@pytest.mark.parametrize("act", ["gelu", "relu", "swiglu", "geglu"])
def test_fused_bias_act_matches_numpy(act):
    rng = np.random.default_rng(5)
    x, bias = rng.standard_normal((3, 6)), rng.standard_normal(6)
    h = x + bias
    a, bb = h[:, :3], h[:, 3:]
    want = {"gelu": _gelu(h), "relu": np.maximum(h, 0), "swiglu": a / (1 + np.exp(-a)) * bb,
            "geglu": _gelu(a) * bb}[act]
    got = IF.fused_bias_act(_t(x), _t(bias), act_method=act)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-12)
    half = IF.fused_bias_act(_t(x, "bfloat16"), _t(bias, "bfloat16"), act_method=act)   # float32 inside
    assert half.dtype == oarlock.bfloat16
    np.testing.assert_allclose(half.astype("float32").numpy(), want, rtol=0.03, atol=0.03)
    if act != "relu":
        _fd_check(lambda x_, b_: IF.fused_bias_act(x_, b_, act_method=act), [x, bias],
                  rng.standard_normal(want.shape), wrt=[0, 1])


def test_fused_dropout_add(paddle):
    from paddle.incubate.nn.functional import fused_dropout_add
    rng = np.random.default_rng(6)
    x, y = rng.standard_normal((40, 50)).astype("float32"), rng.standard_normal((40, 50)).astype("float32")
    for kwargs in (dict(p=0.0), dict(p=0.3, training=False, mode="downscale_in_infer"), dict(p=0.3, training=False)):
        want = fused_dropout_add(paddle.to_tensor(x), paddle.to_tensor(y), **kwargs)
        got = IF.fused_dropout_add(_t(x, "float32"), _t(y, "float32"), **kwargs)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6, err_msg=str(kwargs))
    ox = _t(x, "float32")
    out = IF.fused_dropout_add(ox, _t(y, "float32"), p=0.25)
    kept = out.numpy() - y
    scaled = np.isclose(kept, x / 0.75, rtol=1e-5, atol=1e-6)
    assert np.all(scaled | (np.abs(kept) < 1e-6)) and 0.65 < scaled.mean() < 0.85
    out.sum().backward()
    np.testing.assert_allclose(ox.grad.numpy(), np.where(scaled, 1 / 0.75, 0.0), rtol=1e-6)


def test_fused_bad_input():
    x = _t(np.ones((2, 4)), "float32")
    with pytest.raises(NotImplementedError, match=r"fused_rms_norm\(\): argument 'quant_scale' = 0.5"):
        IF.fused_rms_norm(x, _t(np.ones(4), "float32"), None, 1e-5, 1, quant_scale=0.5)
    with pytest.raises(ValueError, match=r"fused_layer_norm\(\): argument 'norm_weight' = \[3\]"):
        IF.fused_layer_norm(x, _t(np.ones(3), "float32"), None, 1e-5, 1.0, 1)
    with pytest.raises(ValueError, match=r"fused_rms_norm\(\): argument 'begin_norm_axis' = 2"):
        IF.fused_rms_norm(x, None, None, 1e-5, 2)
    with pytest.raises(ValueError, match=r"fused_partial_rope\(\): argument 'cos' has shape \[1, 2, 1, 3\]"):
        IF.fused_partial_rope(_t(np.ones((1, 2, 1, 4))), _t(np.ones((1, 2, 1, 3))), _t(np.ones((1, 2, 1, 3))))
    with pytest.raises(ValueError, match=r"fused_bias_act\(\): argument 'act_method' = 'tanh'"):
        IF.fused_bias_act(x, act_method="tanh")
    with pytest.raises(ValueError, match=r"fused_bias_act\(\): act_method='swiglu' needs an even last axis"):
        IF.fused_bias_act(_t(np.ones((2, 3))), act_method="swiglu")
    with pytest.raises(ValueError, match=r"fused_dropout_add\(\): argument 'p' = 1.5"):
        IF.fused_dropout_add(x, x, p=1.5)


INCUBATE_FUNCTIONS = ("moe_gate_dispatch", "moe_gate_dispatch_permute", "moe_combine", "moe_combine_no_weight",
                      "cal_aux_loss", "swiglu", "fused_rms_norm", "fused_rms_norm_ext",
                      "fused_rotary_position_embedding", "fused_partial_rope", "fused_bias_act", "fused_dropout_add",
                      "fused_layer_norm", "fused_matmul_bias")


def test_signatures_are_paddles(paddle):
    """Every parameter name, order and default as Paddle 3.2's paddle.incubate.nn.functional has them."""
    import inspect

    import paddle.incubate.nn.functional as PF

    def params(fn):
        return [(p.name, p.default) for p in inspect.signature(fn).parameters.values()]

    for name in INCUBATE_FUNCTIONS:
        assert params(getattr(IF, name)) == params(getattr(PF, name)), name
