"""oarlock.nn.utils' weight_norm / remove_weight_norm / spectral_norm / parameters_to_vector /
vector_to_parameters and the legacy nn.SpectralNorm against real Paddle 3.2 with the same weights (and
the same power-method start vectors): state_dict keys, outputs, the updated u vector and the gradients
of the reparametrised parameters over several training steps."""

from __future__ import annotations

import numpy as np
import pytest

import oarlock
import oarlock.nn as nn


def _same_weights(theirs, ours):
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours.set_state_dict({k: oarlock.to_tensor(v.numpy()) for k, v in theirs.state_dict().items()})


def _close(a, b, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=rtol, atol=atol)


@pytest.mark.parametrize("dim", [0, 1, 3, None, -1])
def test_weight_norm_matches_paddle(paddle, dim):
    theirs, ours = paddle.nn.Conv2D(3, 4, 3), nn.Conv2D(3, 4, 3)
    _same_weights(theirs, ours)
    paddle.nn.utils.weight_norm(theirs, dim=dim)
    assert nn.utils.weight_norm(ours, dim=dim) is ours
    assert list(ours.state_dict()) == list(theirs.state_dict()) == ["bias", "weight_v", "weight_g"]
    assert ours.weight_g.shape == theirs.weight_g.shape
    _close(ours.weight_g, theirs.weight_g)
    x = np.random.default_rng(0).standard_normal((2, 3, 5, 5)).astype(np.float32)
    p_out, o_out = theirs(paddle.to_tensor(x)), ours(oarlock.to_tensor(x))
    _close(o_out, p_out)
    (p_out * p_out).sum().backward()
    (o_out * o_out).sum().backward()
    for name in ("weight_g", "weight_v", "bias"):
        _close(getattr(ours, name).grad, getattr(theirs, name).grad, rtol=1e-4, atol=1e-5)
    paddle.nn.utils.remove_weight_norm(theirs)
    nn.utils.remove_weight_norm(ours)
    assert list(ours.state_dict()) == list(theirs.state_dict()) == ["bias", "weight"]
    _close(ours.weight, theirs.weight)
    assert not ours._forward_pre_hooks


def test_weight_norm_errors():
    layer = nn.Linear(3, 4)
    nn.utils.weight_norm(layer)
    with pytest.raises(RuntimeError, match="weight_norm: the parameter 'weight' of this layer already has"):
        nn.utils.weight_norm(layer)
    with pytest.raises(ValueError, match="weight_norm: Linear has no parameter 'kernel'"):
        nn.utils.weight_norm(layer, name="kernel")
    with pytest.raises(ValueError, match="remove_weight_norm: weight_norm of 'bias' was not found in Linear"):
        nn.utils.remove_weight_norm(layer, name="bias")
    with pytest.raises(ValueError, match=r"weight_norm: dim must be None or in \[-2, 2\)"):
        nn.utils.weight_norm(nn.Linear(3, 4), dim=2)


@pytest.mark.parametrize("make,shape", [(lambda m: m.Linear(5, 4), (2, 5)),
                                        (lambda m: m.Conv2D(3, 4, 3), (2, 3, 5, 5))])
def test_spectral_norm_matches_paddle(paddle, make, shape):
    theirs, ours = make(paddle.nn), make(nn)
    paddle.nn.utils.spectral_norm(theirs, n_power_iterations=2)
    nn.utils.spectral_norm(ours, n_power_iterations=2)
    _same_weights(theirs, ours)   # weight_orig and the start vectors weight_u / weight_v
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    for _ in range(2):   # two training steps: u and v move, and the gradients accumulate
        p_out, o_out = theirs(paddle.to_tensor(x)), ours(oarlock.to_tensor(x))
        _close(o_out, p_out)
        _close(ours.weight_u, theirs.weight_u)
        p_out.sum().backward()
        o_out.sum().backward()
        _close(ours.weight_orig.grad, theirs.weight_orig.grad, rtol=1e-4, atol=1e-5)
    theirs.eval(), ours.eval()
    _close(ours(oarlock.to_tensor(x)), theirs(paddle.to_tensor(x)))
    with pytest.raises(RuntimeError, match="spectral_norm: the parameter 'weight' of this layer already has"):
        nn.utils.spectral_norm(ours)


@pytest.mark.parametrize("dim,iters", [(0, 1), (1, 2), (0, 0)])
def test_legacy_spectral_norm_layer(paddle, dim, iters):
    """Outputs against Paddle; the weight's gradient against the float64 closed form with u, v held fixed,
    (G - u v^T sum(G * W) / sigma) / sigma, which is what the spectral_norm hook and torch compute: Paddle's
    legacy spectral_norm_grad kernel gives something else for a non-constant upstream gradient."""
    w = np.random.default_rng(2).standard_normal((4, 3, 2)).astype(np.float32)
    theirs = paddle.nn.SpectralNorm([4, 3, 2], dim=dim, power_iters=iters)
    ours = nn.SpectralNorm([4, 3, 2], dim=dim, power_iters=iters)
    _same_weights(theirs, ours)
    u, v = ours.weight_u.numpy().astype(np.float64), ours.weight_v.numpy().astype(np.float64)
    _close(ours(oarlock.to_tensor(w)), theirs(paddle.to_tensor(w)))
    _close(ours.weight_u, theirs.weight_u)   # the stored vectors stay as they were
    np.testing.assert_array_equal(ours.weight_u.numpy().astype(np.float64), u)
    o = oarlock.to_tensor(w, stop_gradient=False)
    out = ours(o)
    (out * out).sum().backward()
    matrix = np.moveaxis(w.astype(np.float64), dim, 0).reshape(w.shape[dim], -1)
    for _ in range(iters):
        v = matrix.T @ u
        v /= np.linalg.norm(v)
        u = matrix @ v
        u /= np.linalg.norm(u)
    sigma = u @ matrix @ v
    g = 2 * matrix / sigma
    expected = (g - np.outer(u, v) * np.sum(g * matrix) / sigma) / sigma
    expected = np.moveaxis(expected.reshape(np.moveaxis(w, dim, 0).shape), 0, dim)
    np.testing.assert_allclose(o.grad.numpy(), expected, rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="SpectralNorm: need a weight of at least 2 axes, dim 0 or 1"):
        nn.SpectralNorm([4, 3, 2], dim=2)


def test_parameters_to_vector_and_back(paddle):
    theirs, ours = paddle.nn.Linear(3, 4), nn.Linear(3, 4)
    _same_weights(theirs, ours)
    p_vec = paddle.nn.utils.parameters_to_vector(theirs.parameters())
    o_vec = nn.utils.parameters_to_vector(ours.parameters())
    assert o_vec.shape == p_vec.shape == [16] and not o_vec.stop_gradient
    _close(o_vec, p_vec)
    new = np.arange(20, dtype=np.float32)   # longer than needed: the leading 16 are used
    paddle.nn.utils.vector_to_parameters(paddle.to_tensor(new), theirs.parameters())
    nn.utils.vector_to_parameters(oarlock.to_tensor(new), ours.parameters())
    _close(ours.weight, theirs.weight)
    _close(ours.bias, theirs.bias)
    assert ours.weight.shape == [3, 4]
    with pytest.raises(ValueError, match="vector_to_parameters: the parameters hold 16 elements, more than vec's 5"):
        nn.utils.vector_to_parameters(oarlock.ones([5]), ours.parameters())
