"""oarlock-incubate: moe_gate_dispatch_op, moe_combine_op (and its backward moe_combine_grad_op),
fused_partial_rope_op and fused_bias_act_op, the internal ops behind oarlock.incubate.nn.functional's
moe_gate_dispatch / moe_combine / fused_partial_rope / fused_bias_act (Paddle's GPU-only kernels). Checked here
against numpy and finite differences; plugins/incubate/tests/test_moe_ops.py and test_fused_ops.py have the full
matrix and plugins/cuda/tests/test_moe_kernels.py the CUDA kernels."""

import numpy as np

from op_specs.base import OpSpec, library_op


def _check_dispatch(oarlock):
    rng = np.random.default_rng(0)
    s, e, k, cap = 6, 3, 2, 3                      # 12 slots over 3 experts of capacity 3: some are dropped
    x = rng.standard_normal((s, 4)).astype("float32")
    gate = rng.random((s, e)).astype("float32")
    ox, og = oarlock.to_tensor(x), oarlock.to_tensor(gate)
    ox.stop_gradient = og.stop_gradient = False
    y, cw, si, off, eid = library_op("moe_gate_dispatch_op")(ox, og, None, k, cap, True)
    want_eid = np.argsort(-gate, axis=1, kind="stable")[:, :k]
    np.testing.assert_array_equal(eid.numpy(), want_eid)
    np.testing.assert_array_equal(off.numpy(), np.cumsum(np.bincount(want_eid.ravel(), minlength=e)))
    cwn, sin, yn = cw.numpy(), si.numpy(), y.numpy()
    assert list(y.shape) == [e * cap, 4] and (cwn == 0).any()
    for t in range(s):
        for j in range(k):
            if cwn[t, j] > 0:
                assert cwn[t, j] == gate[t, want_eid[t, j]]
                np.testing.assert_array_equal(yn[sin[j, t]], x[t])
    y.sum().backward()
    np.testing.assert_allclose(ox.grad.numpy(), (cwn > 0).sum(1, keepdims=True) * np.ones((s, 4)))


def _check_combine(oarlock):
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((8, 3)), rng.random((4, 2))
    index = rng.permutation(8)[:8].reshape(4, 2).astype("int32")
    ox, ow = oarlock.to_tensor(x), oarlock.to_tensor(w)
    ox.stop_gradient = ow.stop_gradient = False
    y = library_op("moe_combine_op")(ox, ow, oarlock.to_tensor(index))
    np.testing.assert_allclose(y.numpy(), (x[index] * w[..., None]).sum(1), rtol=1e-12)
    y.sum().backward()
    np.testing.assert_allclose(ow.grad.numpy(), x[index].sum(-1), rtol=1e-12)
    dx = np.zeros_like(x)
    np.add.at(dx, index.ravel(), np.repeat(w.ravel()[:, None], 3, axis=1))
    np.testing.assert_allclose(ox.grad.numpy(), dx, rtol=1e-12)


def _check_partial_rope(oarlock):
    rng = np.random.default_rng(2)
    x, ang = rng.standard_normal((1, 2, 1, 6)), rng.uniform(0, 3, (1, 2, 1, 4))
    cos, sin = np.cos(ang), np.sin(ang)
    ox = oarlock.to_tensor(x)
    ox.stop_gradient = False
    out = library_op("fused_partial_rope_op")(ox, oarlock.to_tensor(cos), oarlock.to_tensor(sin))
    p = x[..., 2:]
    q = np.concatenate([p[..., 0::2], p[..., 1::2]], -1)
    want = np.concatenate([x[..., :2], q * cos + np.concatenate([-q[..., 2:], q[..., :2]], -1) * sin], -1)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-12, atol=1e-12)
    g = rng.standard_normal(x.shape)
    (out * oarlock.to_tensor(g)).sum().backward()
    jac = np.zeros((x.size, x.size))             # the map is linear in x: its matrix column by column
    for i in range(x.size):
        e = np.zeros(x.size)
        e[i] = 1
        jac[:, i] = library_op("fused_partial_rope_op")(oarlock.to_tensor(e.reshape(x.shape)), oarlock.to_tensor(cos),
                                                        oarlock.to_tensor(sin)).numpy().ravel()
    np.testing.assert_allclose(ox.grad.numpy().ravel(), jac.T @ g.ravel(), rtol=1e-12, atol=1e-12)


def _check_combine_grad(oarlock):
    rng = np.random.default_rng(3)
    x, w, g = rng.standard_normal((5, 3)), rng.random((3, 2)), rng.standard_normal((3, 3))
    w[1, 0] = 0.0                                  # a dropped slot: no gradient to its row of x
    index = np.array([[0, 4], [2, 4], [1, 3]], dtype="int32")   # row 4 reached twice: summed
    dx, dw = library_op("moe_combine_grad_op")(oarlock.to_tensor(x), oarlock.to_tensor(w), oarlock.to_tensor(index),
                                              oarlock.to_tensor(g))
    want = np.zeros_like(x)
    np.add.at(want, index[w != 0], (g[:, None, :] * w[..., None])[w != 0])
    np.testing.assert_allclose(dx.numpy(), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dw.numpy(), np.einsum("sh,skh->sk", g, x[index]), rtol=1e-12)


def _check_bias_act(oarlock):
    import math
    rng = np.random.default_rng(4)
    x, b = rng.standard_normal((3, 4)), rng.standard_normal(4)
    h = x + b
    gelu = h * 0.5 * (1 + np.vectorize(math.erf)(h / math.sqrt(2)))
    wants = {"gelu": gelu, "relu": np.maximum(h, 0), "swiglu": h[:, :2] / (1 + np.exp(-h[:, :2])) * h[:, 2:],
             "geglu": gelu[:, :2] * h[:, 2:]}
    for act, want in wants.items():
        ox, ob = oarlock.to_tensor(x), oarlock.to_tensor(b)
        ox.stop_gradient = ob.stop_gradient = False
        out = library_op("fused_bias_act_op")(ox, ob, act)
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-12, atol=1e-12, err_msg=act)
        if act == "relu":
            continue
        g = rng.standard_normal(want.shape)
        (out * oarlock.to_tensor(g)).sum().backward()
        eps, fd = 1e-6, np.zeros_like(x)
        for idx in np.ndindex(*x.shape):
            xp_, xm = x.copy(), x.copy()
            xp_[idx] += eps
            xm[idx] -= eps
            fd[idx] = ((library_op("fused_bias_act_op")(oarlock.to_tensor(xp_), oarlock.to_tensor(b), act).numpy()
                        - library_op("fused_bias_act_op")(oarlock.to_tensor(xm), oarlock.to_tensor(b), act).numpy())
                       * g).sum() / (2 * eps)
        np.testing.assert_allclose(ox.grad.numpy(), fd, rtol=1e-6, atol=1e-8, err_msg=act)
        np.testing.assert_allclose(ob.grad.numpy(), fd.sum(0), rtol=1e-6, atol=1e-8, err_msg=act)


SPECS = [
    OpSpec("moe_gate_dispatch_op", [], check=_check_dispatch),
    OpSpec("moe_combine_op", [], check=_check_combine),
    OpSpec("moe_combine_grad_op", [], check=_check_combine_grad, grad=False),
    OpSpec("fused_partial_rope_op", [], check=_check_partial_rope),
    OpSpec("fused_bias_act_op", [], check=_check_bias_act),
]
