"""incubate's swiglu, fused_matmul_bias / fused_linear / FusedLinear and the offload helpers against real
Paddle 3.2: swiglu with Paddle's own CPU kernel; the fused GEMMs (GPU-only in Paddle) against
paddle.matmul + bias, which Paddle documents them to equal. Values and gradients."""

import numpy as np
import pytest

import oarlock
import oarlock.incubate.nn as inn
import oarlock.incubate.nn.functional as IF
from oarlock.incubate.tensor.manipulation import async_offload, async_reload, create_async_load


def _both(paddle, array):
    p = paddle.to_tensor(array)
    p.stop_gradient = False
    o = oarlock.to_tensor(array)
    o.stop_gradient = False
    return p, o


@pytest.mark.parametrize("split", [False, True])
def test_swiglu_matches_paddle(paddle, split):
    from paddle.incubate.nn.functional import swiglu
    rng = np.random.default_rng(0)
    x = rng.standard_normal([3, 4, 6]).astype("float32")
    y = rng.standard_normal([3, 4, 6]).astype("float32")
    g = rng.standard_normal([3, 4, 3 if split else 6]).astype("float32")
    px, ox = _both(paddle, x)
    py, oy = _both(paddle, y)
    want = swiglu(px) if split else swiglu(px, py)
    got = IF.swiglu(ox) if split else IF.swiglu(ox, oy)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    (want * paddle.to_tensor(g)).sum().backward()
    (got * oarlock.to_tensor(g)).sum().backward()
    np.testing.assert_allclose(ox.grad.numpy(), px.grad.numpy(), rtol=1e-5, atol=1e-6)
    if not split:
        np.testing.assert_allclose(oy.grad.numpy(), py.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("transpose_x, transpose_y", [(False, False), (True, False), (False, True)])
def test_fused_matmul_bias_matches_paddle_matmul_plus_bias(paddle, transpose_x, transpose_y):
    rng = np.random.default_rng(1)
    x = rng.standard_normal([2, 5, 4] if transpose_x else [2, 4, 5]).astype("float32")
    y = rng.standard_normal([3, 5] if transpose_y else [5, 3]).astype("float32")
    b = rng.standard_normal([3]).astype("float32")
    (px, ox), (py, oy), (pb, ob) = _both(paddle, x), _both(paddle, y), _both(paddle, b)
    want = paddle.matmul(px, py, transpose_x, transpose_y) + pb
    got = IF.fused_matmul_bias(ox, oy, ob, transpose_x, transpose_y)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
    want.sum().backward()
    got.sum().backward()
    for o, p in ((ox, px), (oy, py), (ob, pb)):
        np.testing.assert_allclose(o.grad.numpy(), p.grad.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("transpose_weight", [False, True])
def test_fused_linear_layer_matches_paddle_linear(paddle, transpose_weight):
    layer = inn.FusedLinear(4, 3, transpose_weight=transpose_weight)
    assert list(layer.weight.shape) == ([3, 4] if transpose_weight else [4, 3])
    assert sorted(n for n, _ in layer.named_parameters()) == ["bias", "weight"]
    w = layer.weight.numpy()
    x = np.random.default_rng(2).standard_normal([6, 4]).astype("float32")
    ref = paddle.nn.Linear(4, 3)
    ref.weight.set_value(w.T if transpose_weight else w)
    ref.bias.set_value(layer.bias.numpy())
    want = ref(paddle.to_tensor(x))
    got = layer(oarlock.to_tensor(x))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
    want.sum().backward()
    got.sum().backward()
    gw = ref.weight.grad.numpy()
    np.testing.assert_allclose(layer.weight.grad.numpy(), gw.T if transpose_weight else gw, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(layer.bias.grad.numpy(), ref.bias.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_fused_bad_input_names_the_function_and_argument():
    with pytest.raises(ValueError, match=r"swiglu\(\): argument 'x' of shape \[2, 3\]"):
        IF.swiglu(oarlock.ones([2, 3]))
    with pytest.raises(ValueError, match=r"swiglu\(\): arguments 'x' \[2, 4\] and 'y' \[2, 2\]"):
        IF.swiglu(oarlock.ones([2, 4]), oarlock.ones([2, 2]))
    with pytest.raises(ValueError, match=r"fused_matmul_bias\(\): argument 'bias'"):
        IF.fused_linear(oarlock.ones([2, 4]), oarlock.ones([4, 3]), oarlock.ones([4]))
    with pytest.raises(TypeError, match=r"fused_matmul_bias\(\): argument 'x' must be a Tensor"):
        IF.fused_matmul_bias([[1.0]], oarlock.ones([1, 1]))


def test_offload_and_reload_copy_values():
    loader = create_async_load()
    x = oarlock.randn([3, 4])
    x.stop_gradient = False
    host, task = async_offload(x, loader)
    task.cpu_wait()
    assert task.is_completed() and str(host.place) == "cpu"
    back, task = async_reload(host, loader)
    task.cuda_wait()
    np.testing.assert_array_equal(back.numpy(), x.numpy())
    assert back.stop_gradient is False
    with oarlock.no_grad():
        host.zero_()
    assert np.abs(x.numpy()).sum() > 0                      # new storage: writing the copy leaves x alone
    with pytest.raises(TypeError, match="async_offload\\(\\): argument 'async_load'"):
        async_offload(x, object())


def test_fused_rms_norm_ext_matches_float64_and_torch_rms_norm(torch):
    """Values against float64 numpy, gradients against torch.nn.functional.rms_norm's autograd."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal([2, 3, 8])
    w = rng.uniform(0.5, 1.5, size=[8])
    g = rng.standard_normal([2, 3, 8])
    ox, ow = oarlock.to_tensor(x.astype("float32")), oarlock.to_tensor(w.astype("float32"))
    ox.stop_gradient = ow.stop_gradient = False
    y, invvar = IF.fused_rms_norm_ext(ox, ow, 1e-6)
    inv = 1.0 / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(y.numpy(), x * inv * w, rtol=1e-5, atol=1e-6)
    assert invvar.dtype == oarlock.float32 and list(invvar.shape) == [6]
    np.testing.assert_allclose(invvar.numpy(), inv.reshape(-1), rtol=1e-5)
    (y * oarlock.to_tensor(g.astype("float32"))).sum().backward()
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    (torch.nn.functional.rms_norm(tx, [8], tw, eps=1e-6) * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(ox.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ow.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-5)
    half = IF.fused_rms_norm_ext(ox.astype("bfloat16"), ow, 1e-6)[0]
    assert half.dtype == oarlock.bfloat16
    with pytest.raises(ValueError, match=r"fused_rms_norm_ext\(\): argument 'scale' has shape \[4\]"):
        IF.fused_rms_norm_ext(ox, oarlock.ones([4]))
