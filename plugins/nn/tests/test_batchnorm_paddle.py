"""BatchNorm against real Paddle 3.2: the running statistics `_mean`/`_variance` are parameters that take no
gradient (named_parameters, state_dict, stop_gradient and trainable as Paddle lists them), the legacy
nn.BatchNorm (act=, is_test=, data_layout=, use_global_stats=, trainable_statistics=) gives Paddle's values,
gradients and running statistics, optimizers leave the statistics alone, and the mobile activation layers
(ReLU6, Hardswish, Hardsigmoid, Swish, Silu) match Paddle's values and gradients."""

from __future__ import annotations

import numpy as np
import pytest

import oarlock
import oarlock.nn as nn
from errors import raises_naming


def _listing(layer):
    return [(name, tuple(p.shape), bool(p.stop_gradient), bool(getattr(p, "trainable", not p.stop_gradient)))
            for name, p in layer.named_parameters()]


def _ours_listing(layer):
    return [(name, tuple(p.shape), bool(p.stop_gradient), bool(p.param_attrs.trainable))
            for name, p in layer.named_parameters()]


LAYERS = [("BatchNorm1D", (3,), {}), ("BatchNorm2D", (4,), {}), ("BatchNorm3D", (2,), {}),
          ("BatchNorm", (5,), {}), ("BatchNorm", (5,), {"act": "relu", "is_test": True}),
          ("BatchNorm2D", (4,), {"weight_attr": False, "bias_attr": False}),
          ("BatchNorm", (3,), {"param_attr": False})]


@pytest.mark.parametrize("cls,args,kwargs", LAYERS, ids=[f"{c}-{k}" for c, _, k in LAYERS])
def test_parameters_listed_as_paddle(paddle, cls, args, kwargs):
    theirs = getattr(paddle.nn, cls)(*args, **kwargs)
    ours = getattr(nn, cls)(*args, **kwargs)
    assert _ours_listing(ours) == _listing(theirs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert [n for n, _ in ours.named_buffers()] == [n for n, _ in theirs.named_buffers()] == []
    assert ours.training == theirs.training


def _pair(paddle, cls, args, kwargs):
    """Our layer and Paddle's with the same random weight, bias and running statistics."""
    theirs, ours = getattr(paddle.nn, cls)(*args, **kwargs), getattr(nn, cls)(*args, **kwargs)
    rng = np.random.default_rng(0)
    state = {k: (rng.uniform(0.5, 1.5, v.shape) if k in ("weight", "_variance") else rng.normal(size=v.shape))
             .astype("float32") for k, v in theirs.state_dict().items()}
    theirs.set_state_dict({k: paddle.to_tensor(v) for k, v in state.items()})
    ours.set_state_dict({k: oarlock.to_tensor(v) for k, v in state.items()})
    return ours, theirs


def _run(lib, layer, x):
    t = lib.to_tensor(x, stop_gradient=False)
    out = layer(t)
    (out * lib.to_tensor(np.linspace(-1, 1, out.size, dtype="float32").reshape(out.shape))).sum().backward()
    grads = {n: p.grad.numpy() for n, p in layer.named_parameters() if p.grad is not None}
    return out.numpy(), t.grad.numpy(), grads, {k: v.numpy() for k, v in layer.state_dict().items()}


LEGACY = [((2, 5, 3, 4), {}), ((2, 5, 3, 4), {"act": "relu"}), ((6, 5), {"act": "sigmoid"}), ((2, 5, 7), {}),
          ((2, 3, 2, 2, 5), {"data_layout": "NHWC"}), ((2, 3, 4, 5), {"data_layout": "NHWC", "act": "tanh"}),
          ((2, 5, 3, 3), {"is_test": True}), ((2, 5, 3, 3), {"is_test": True, "trainable_statistics": True}),
          ((2, 5, 3, 3), {"use_global_stats": True}), ((2, 5, 1, 2, 2), {"momentum": 0.5, "epsilon": 1e-3})]


def _torch_batch_statistics_gradients(torch, ours, x):
    """Input, weight and bias gradients of batch-statistics normalisation, from torch."""
    t = torch.tensor(x, requires_grad=True)
    w, b = (torch.tensor(ours.state_dict()[k].numpy(), requires_grad=True) for k in ("weight", "bias"))
    out = torch.nn.functional.batch_norm(t, None, None, w, b, training=True, eps=1e-5)
    (out * torch.linspace(-1, 1, out.numel()).reshape(out.shape)).sum().backward()
    return t.grad.numpy(), {"weight": w.grad.numpy(), "bias": b.grad.numpy()}


@pytest.mark.parametrize("shape,kwargs", LEGACY, ids=[f"{len(s)}d-{k}" for s, k in LEGACY])
def test_legacy_batchnorm_matches_paddle(paddle, torch, shape, kwargs):
    ours, theirs = _pair(paddle, "BatchNorm", (5,), kwargs)
    x = np.random.default_rng(1).normal(size=shape).astype("float32") * 2 + 0.5
    expected, got = _run(paddle, theirs, x), _run(oarlock, ours, x)
    if kwargs.get("trainable_statistics"):
        # Departure: in eval mode with trainable_statistics Paddle normalises with the batch statistics but its
        # backward treats them as constants; ours differentiates what the forward computed (torch's gradient).
        input_grad, param_grads = _torch_batch_statistics_gradients(torch, ours, x)
        expected = (expected[0], input_grad, param_grads, expected[3])
    for what, e, g in zip(("output", "input gradient"), expected[:2], got[:2]):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5, err_msg=what)
    assert sorted(got[2]) == sorted(expected[2])  # the statistics take no gradient in either
    for name in expected[2]:
        np.testing.assert_allclose(got[2][name], expected[2][name], rtol=1e-4, atol=1e-5, err_msg=name)
    for name in expected[3]:  # running statistics after the step
        np.testing.assert_allclose(got[3][name], expected[3][name], rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("optimizer", ["SGD", "Momentum", "Adam", "AdamW"])
def test_optimizers_leave_statistics_to_forward(paddle, optimizer):
    """Two training steps of Linear + BatchNorm1D with weight decay: every state entry (the statistics moved
    only by the forward passes) equals Paddle's. Random biases and statistics to start: zero biases around a
    BatchNorm have gradients of rounding noise, which Adam's normalisation would magnify. The first Linear has
    no bias for the same reason."""
    def build(lib):
        lib.seed(0)
        model = lib.nn.Sequential(lib.nn.Linear(4, 3, bias_attr=False), lib.nn.BatchNorm1D(3), lib.nn.Linear(3, 2))
        opt = getattr(lib.optimizer, optimizer)(learning_rate=0.1, parameters=model.parameters(),
                                                weight_decay=0.05)
        return model, opt
    ours, our_opt = build(oarlock)
    theirs, their_opt = build(paddle)
    rng = np.random.default_rng(2)
    state = {k: rng.uniform(0.5, 1.5, v.shape).astype("float32") for k, v in theirs.state_dict().items()}
    theirs.set_state_dict({k: paddle.to_tensor(v) for k, v in state.items()})
    ours.set_state_dict({k: oarlock.to_tensor(v) for k, v in state.items()})
    for _ in range(2):
        x = rng.normal(size=(8, 4)).astype("float32")
        for lib, model, opt in ((oarlock, ours, our_opt), (paddle, theirs, their_opt)):
            (model(lib.to_tensor(x)) ** 2).mean().backward()
            opt.step()
            opt.clear_grad()
    expected = theirs.state_dict()
    for name, value in ours.state_dict().items():
        np.testing.assert_allclose(value.numpy(), expected[name].numpy(), rtol=1e-5, atol=1e-6, err_msg=name)


ACTIVATIONS = [("ReLU6", {}), ("Hardswish", {}), ("Hardsigmoid", {}), ("Swish", {}), ("Silu", {})]


@pytest.mark.parametrize("cls,kwargs", ACTIVATIONS, ids=[c for c, _ in ACTIVATIONS])
def test_activation_layers_match_paddle(paddle, cls, kwargs):
    x = np.concatenate([np.linspace(-8, 8, 41), [-3.0, 3.0, 0.0, 6.0]]).astype("float32").reshape(5, 9)
    results = []
    for lib in (paddle, oarlock):
        t = lib.to_tensor(x, stop_gradient=False)
        out = getattr(lib.nn, cls)(**kwargs)(t)
        out.sum().backward()
        results.append((out.numpy(), t.grad.numpy()))
    (expected, expected_grad), (got, got_grad) = results
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got_grad, expected_grad, rtol=1e-6, atol=1e-6)


def test_legacy_batchnorm_refuses_bad_arguments():
    raises_naming(lambda: nn.BatchNorm(4, act="nonsense"), ValueError, "BatchNorm", "act", "nonsense")
    raises_naming(lambda: nn.BatchNorm(4, data_layout="NCL"), ValueError, "BatchNorm", "data_layout", "NCL")
    raises_naming(lambda: nn.BatchNorm(0), ValueError, "BatchNorm", "num_channels", "0")
    raises_naming(lambda: nn.BatchNorm(4)(oarlock.zeros([2, 3, 5, 5])), ValueError, "BatchNorm", "4 channels",
                  "[2, 3, 5, 5]")
