"""Paddle 3.2's remaining activations (functional and layers) against real Paddle: values and input
gradients on random inputs (kept off the kinks, where the two may legitimately pick different one-sided
slopes), parameter gradients of PReLU, and the statistics of the random ones (rrelu, gumbel_softmax)."""

from __future__ import annotations

import numpy as np
import pytest

import oarlock
import oarlock.nn as nn
import oarlock.nn.functional as F
from paddle_compare import compare

ELEMENTWISE = [
    ("log_sigmoid", {}), ("softsign", {}), ("tanhshrink", {}), ("mish", {}),
    ("celu", {}), ("celu", {"alpha": 0.7}), ("selu", {}), ("selu", {"scale": 1.5, "alpha": 0.3}),
    ("softplus", {}), ("softplus", {"beta": 2.0, "threshold": 3.0}),
    ("softshrink", {}), ("softshrink", {"threshold": 1.2}), ("hardshrink", {}), ("hardshrink", {"threshold": 1.2}),
    ("hardtanh", {}), ("hardtanh", {"min": -0.4, "max": 2.5}),
    ("thresholded_relu", {}), ("thresholded_relu", {"threshold": 0.3, "value": -0.5}),
]
LAYERS = {"log_sigmoid": "LogSigmoid", "softsign": "Softsign", "tanhshrink": "Tanhshrink", "mish": "Mish",
          "celu": "CELU", "selu": "SELU", "softplus": "Softplus", "softshrink": "Softshrink",
          "hardshrink": "Hardshrink", "hardtanh": "Hardtanh", "thresholded_relu": "ThresholdedReLU"}


def _off_kinks(shape, seed, kinks=(-2.5, -1.2, -1.0, -0.5, -0.4, 0.0, 0.3, 0.5, 1.0, 1.2, 1.5, 2.5, 3.0)):
    x = np.random.default_rng(seed).uniform(-4.0, 4.0, shape)
    for k in kinks:
        x = np.where(np.abs(x - k) < 1e-2, k + 0.05, x)
    return x.astype(np.float32)


@pytest.mark.parametrize("name,kwargs", ELEMENTWISE, ids=[f"{n}-{i}" for i, (n, _) in enumerate(ELEMENTWISE)])
def test_functional_and_layer_match_paddle(paddle, name, kwargs):
    x = _off_kinks((4, 5), seed=len(name))
    compare(paddle, lambda t: getattr(F, name)(t, **kwargs), lambda t: getattr(paddle.nn.functional, name)(t, **kwargs),
            [x])
    layer = LAYERS[name]
    compare(paddle, getattr(nn, layer)(**kwargs), getattr(paddle.nn, layer)(**kwargs), [x])


def test_wide_inputs_stay_finite_like_paddle(paddle):
    x = np.array([-200.0, -50.0, -20.0, 19.0, 21.0, 50.0, 200.0], np.float32)
    for name in ("log_sigmoid", "softplus", "mish", "celu", "selu"):
        # Paddle's celu gradient at 200 is nan (its exp(x) overflows in the discarded branch); ours is 1
        up_to = 50.0 if name == "celu" else 200.0
        compare(paddle, getattr(F, name), getattr(paddle.nn.functional, name), [x[x <= up_to]], rtol=1e-5, atol=1e-6)


def test_in_place_variants(paddle):
    x = _off_kinks((3, 4), seed=1)
    for name, kwargs in (("hardtanh_", {"min": -0.5, "max": 0.5}), ("thresholded_relu_", {"threshold": 0.2})):
        ours = oarlock.to_tensor(x)
        assert getattr(F, name)(ours, **kwargs) is ours
        expected = getattr(paddle.nn.functional, name.rstrip("_"))(paddle.to_tensor(x), **kwargs)
        np.testing.assert_allclose(ours.numpy(), expected.numpy(), rtol=1e-6)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_glu(paddle, axis):
    x = _off_kinks((4, 6, 2), seed=3)
    compare(paddle, lambda t: F.glu(t, axis), lambda t: paddle.nn.functional.glu(t, axis), [x])
    compare(paddle, nn.GLU(axis), paddle.nn.GLU(axis), [x])
    with pytest.raises(ValueError, match="glu: the size of x along axis 2 must be even"):
        F.glu(oarlock.ones([4, 6, 3]), axis=2)


@pytest.mark.parametrize("axis", [1, -1])
def test_maxout(paddle, axis):
    x = _off_kinks((2, 6, 3, 6), seed=4)
    compare(paddle, lambda t: F.maxout(t, 3, axis), lambda t: paddle.nn.functional.maxout(t, 3, axis), [x])
    compare(paddle, nn.Maxout(2, axis), paddle.nn.Maxout(2, axis), [x])
    with pytest.raises(ValueError, match="maxout: groups must be a positive int dividing the 6 channels, got 4"):
        F.maxout(oarlock.to_tensor(x), 4, axis)


@pytest.mark.parametrize("data_format,shape", [("NCHW", (2, 3, 4, 5)), ("NHWC", (2, 4, 5, 3)), ("NCL", (2, 3, 4)),
                                               ("NC", (5, 3))])
def test_prelu(paddle, data_format, shape):
    x = _off_kinks(shape, seed=5)
    w = np.array([0.1, -0.3, 0.7], np.float32)
    compare(paddle, lambda t, u: F.prelu(t, u, data_format), lambda t, u: paddle.nn.functional.prelu(t, u, data_format),
            [x, w])
    compare(paddle, lambda t, u: F.prelu(t, u, data_format), lambda t, u: paddle.nn.functional.prelu(t, u, data_format),
            [x, w[:1]])
    ours, theirs = nn.PReLU(3, init=0.4, data_format=data_format), paddle.nn.PReLU(3, init=0.4, data_format=data_format)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    compare(paddle, ours, theirs, [x])
    up = np.random.default_rng(0).standard_normal(x.shape).astype(np.float32)
    (ours(oarlock.to_tensor(x)) * oarlock.to_tensor(up)).sum().backward()
    # x must want a gradient on Paddle's side: its prelu_grad kernel crashes (SIGSEGV) when only the weight does
    (theirs(paddle.to_tensor(x, stop_gradient=False)) * paddle.to_tensor(up)).sum().backward()
    np.testing.assert_allclose(ours._weight.grad.numpy(), theirs._weight.grad.numpy(), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="prelu: weight has 2 elements"):
        F.prelu(oarlock.to_tensor(x), oarlock.to_tensor(w[:2]), data_format)


def test_rrelu(paddle):
    x = _off_kinks((400,), seed=6)
    # eval: the mean slope, exactly Paddle's
    compare(paddle, lambda t: F.rrelu(t, 0.1, 0.3, training=False),
            lambda t: paddle.nn.functional.rrelu(t, 0.1, 0.3, training=False), [x])
    layer = nn.RReLU(0.1, 0.3)
    layer.eval()
    np.testing.assert_allclose(layer(oarlock.to_tensor(x)).numpy(), np.where(x >= 0, x, 0.2 * x), rtol=1e-6)
    # training: each negative element gets its own slope in [lower, upper], and that slope is its gradient
    t = oarlock.to_tensor(x, stop_gradient=False)
    out = F.rrelu(t, 0.1, 0.3, training=True)
    out.sum().backward()
    neg = x < 0
    slopes = out.numpy()[neg] / x[neg]
    assert slopes.min() >= 0.1 - 1e-6 and slopes.max() <= 0.3 + 1e-6 and slopes.std() > 0.03
    np.testing.assert_allclose(t.grad.numpy()[neg], slopes, rtol=1e-5)
    np.testing.assert_array_equal(out.numpy()[~neg], x[~neg])
    with pytest.raises(ValueError, match="rrelu: need 0 <= lower <= upper <= 1"):
        F.rrelu(t, 0.5, 0.2)


def test_gumbel_softmax():
    oarlock.seed(0)
    logits = np.log(np.array([0.1, 0.2, 0.7], np.float32))
    x = oarlock.to_tensor(np.tile(logits, (20000, 1)))
    hard = F.gumbel_softmax(x, hard=True)
    counts = hard.numpy().sum(0) / 20000
    assert set(np.unique(hard.numpy())) == {0.0, 1.0} and (hard.numpy().sum(1) == 1).all()
    # the Gumbel-max trick samples the softmax distribution: 20000 draws, 3 standard errors
    np.testing.assert_allclose(counts, [0.1, 0.2, 0.7], atol=3 * np.sqrt(0.25 / 20000))
    soft = F.gumbel_softmax(x[:5], temperature=0.5)
    np.testing.assert_allclose(soft.numpy().sum(1), 1.0, rtol=1e-6)
    # straight-through: the hard sample's gradient is the soft sample's (same noise: same seed)
    w = oarlock.to_tensor(np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32))
    grads = []
    for hard_flag in (False, True):
        oarlock.seed(7)
        t = oarlock.to_tensor(np.tile(logits, (4, 1)), stop_gradient=False)
        (F.gumbel_softmax(t, temperature=0.8, hard=hard_flag) * w).sum().backward()
        grads.append(t.grad.numpy())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-5, atol=1e-7)


def test_softmax2d_and_log_softmax_layers(paddle):
    x = _off_kinks((2, 3, 4, 5), seed=8)
    compare(paddle, nn.Softmax2D(), paddle.nn.Softmax2D(), [x])
    compare(paddle, nn.Softmax2D(), paddle.nn.Softmax2D(), [x[0]])
    compare(paddle, nn.LogSoftmax(1), paddle.nn.LogSoftmax(1), [x])
    with pytest.raises(ValueError, match="Softmax2D: expected a 3-D"):
        nn.Softmax2D()(oarlock.to_tensor(x[0, 0]))
