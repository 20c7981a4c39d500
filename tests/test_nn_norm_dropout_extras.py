"""InstanceNorm1D/2D/3D and F.instance_norm against real Paddle 3.2 (values, input and parameter
gradients), alpha_dropout / feature_alpha_dropout (the statistics they promise, Paddle's formula on the
kept and dropped entries, eval identity) and ParameterDict (Paddle's container semantics)."""

from __future__ import annotations

import numpy as np
import pytest

import oarlock
import oarlock.nn as nn
import oarlock.nn.functional as F
from paddle_compare import compare

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("cls,shape", [("InstanceNorm1D", (2, 3, 5)), ("InstanceNorm1D", (4, 3)),
                                       ("InstanceNorm2D", (2, 3, 4, 5)), ("InstanceNorm3D", (2, 3, 2, 3, 4))])
def test_instance_norm_layers(paddle, cls, shape):
    theirs, ours = getattr(paddle.nn, cls)(3, epsilon=1e-3), getattr(nn, cls)(3, epsilon=1e-3)
    assert list(ours.state_dict()) == list(theirs.state_dict()) == ["scale", "bias"]
    values = {k: RNG.standard_normal(v.shape).astype(np.float32) for k, v in theirs.state_dict().items()}
    theirs.set_state_dict({k: paddle.to_tensor(v) for k, v in values.items()})
    ours.set_state_dict({k: oarlock.to_tensor(v) for k, v in values.items()})
    x = RNG.standard_normal(shape).astype(np.float32)
    compare(paddle, ours, theirs, [x], atol=1e-5)
    up = RNG.standard_normal(shape).astype(np.float32)
    # x wants a gradient on Paddle's side: its instance_norm backward refuses to run otherwise
    (theirs(paddle.to_tensor(x, stop_gradient=False)) * paddle.to_tensor(up)).sum().backward()
    (ours(oarlock.to_tensor(x)) * oarlock.to_tensor(up)).sum().backward()
    for name in ("scale", "bias"):
        np.testing.assert_allclose(getattr(ours, name).grad.numpy(), getattr(theirs, name).grad.numpy(), rtol=1e-4,
                                   atol=1e-5)


def test_instance_norm_functional_and_no_affine(paddle):
    x = RNG.standard_normal((2, 3, 6)).astype(np.float32)
    compare(paddle, lambda t: F.instance_norm(t, eps=1e-4), lambda t: paddle.nn.functional.instance_norm(t, eps=1e-4),
            [x], atol=1e-5)
    w, b = RNG.standard_normal(3).astype(np.float32), RNG.standard_normal(3).astype(np.float32)
    compare(paddle, lambda t, u, v: F.instance_norm(t, weight=u, bias=v),
            lambda t, u, v: paddle.nn.functional.instance_norm(t, weight=u, bias=v),
            [x, w, b], atol=1e-5)
    ours = nn.InstanceNorm2D(3, weight_attr=False, bias_attr=False)
    assert list(ours.state_dict()) == [] and ours.scale is None
    with pytest.raises(ValueError, match="InstanceNorm2D: weight_attr and bias_attr must be False together"):
        nn.InstanceNorm2D(3, weight_attr=False)
    with pytest.raises(ValueError, match="InstanceNorm2D: expected 4-D input"):
        ours(oarlock.ones([2, 3, 4]))


@pytest.mark.parametrize("p", [0.2, 0.5])
def test_alpha_dropout(p):
    oarlock.seed(3)
    x = oarlock.to_tensor(RNG.standard_normal((400, 250)).astype(np.float32))
    out = F.alpha_dropout(x, p).numpy()
    # a standard normal input keeps mean 0 and variance 1 (the point of alpha dropout); 1e5 samples
    assert abs(out.mean()) < 0.02 and abs(out.var() - 1) < 0.03
    alpha_p = -1.6732632423543772848170429916717 * 1.0507009873554804934193349852946
    a = ((1 - p) * (1 + p * alpha_p ** 2)) ** -0.5
    b = -a * alpha_p * p
    host = x.numpy()
    dropped = np.isclose(out, a * alpha_p + b, atol=1e-5)   # (a kept x near alpha_p maps there too: either way)
    np.testing.assert_allclose(out[~dropped], a * host[~dropped] + b, rtol=1e-5, atol=1e-6)
    assert abs(dropped.mean() - p) < 0.01
    assert F.alpha_dropout(x, p, training=False) is x
    layer = nn.AlphaDropout(p)
    layer.eval()
    assert layer(x) is x


def test_feature_alpha_dropout_drops_whole_channels():
    oarlock.seed(4)
    x = oarlock.to_tensor(RNG.standard_normal((64, 32, 3, 3)).astype(np.float32))
    out = F.feature_alpha_dropout(x, 0.5).numpy()
    constant = np.ptp(out.reshape(64, 32, -1), axis=2) < 1e-6    # a dropped channel is one constant value
    assert 0.4 < constant.mean() < 0.6
    np.testing.assert_allclose(nn.FeatureAlphaDropout(0.5)(x).shape, [64, 32, 3, 3])
    with pytest.raises(ValueError, match="feature_alpha_dropout: x must be at least 2-D"):
        F.feature_alpha_dropout(oarlock.ones([3]), 0.5)


def test_parameter_dict(paddle):
    made = [nn.Linear(2, 3).weight, nn.Linear(3, 1).weight]
    params = nn.ParameterDict({"a": made[0]})
    params.update([("b", made[1])])
    params["c"] = nn.Linear(1, 1).bias
    assert len(params) == 3 and list(params) == ["a", "b", "c"] and params["b"] is made[1] and "c" in params
    assert list(params.state_dict()) == ["a", "b", "c"]
    holder = nn.LayerList([params])
    assert [n for n, _ in holder.named_parameters()] == ["0.a", "0.b", "0.c"]
    copy = nn.ParameterDict(params)
    assert list(copy) == ["a", "b", "c"]
    theirs = paddle.nn.ParameterDict({"a": paddle.nn.Linear(2, 3).weight})
    assert list(theirs.state_dict()) == list(nn.ParameterDict({"a": made[0]}).state_dict())
    with pytest.raises(TypeError, match="ParameterDict: 'd' must be a Parameter, got Tensor"):
        params["d"] = oarlock.ones([2])
    with pytest.raises(ValueError, match=r"ParameterDict.update\(\): element 0 must be a \(key, parameter\) pair"):
        params.update([("x",)])
