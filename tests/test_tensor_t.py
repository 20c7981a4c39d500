"""Tensor.T (all axes reversed, a property) and Tensor.t() / oarlock.t (0-D and 1-D unchanged, 2-D
transposed, more axes an error), compared with Paddle and PyTorch; both are transposes, so they are views
and carry gradients."""

import numpy as np
import pytest

import oarlock

SHAPES = [(), (3,), (2, 3), (2, 3, 4), (2, 1, 3, 2)]


def _data(shape):
    return np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_T_reverses_every_axis_like_paddle_and_torch(shape):
    data = _data(shape)
    got = oarlock.to_tensor(data).T
    assert got.shape == list(data.T.shape) and np.array_equal(got.numpy(), data.T)
    paddle = pytest.importorskip("paddle")
    assert got.shape == paddle.to_tensor(data).T.shape
    torch = pytest.importorskip("torch")
    if len(shape) == 2:   # torch's Tensor.T is deprecated beyond 2-D (and an error in newer releases)
        assert np.array_equal(got.numpy(), torch.tensor(data).T.numpy())


@pytest.mark.parametrize("shape", SHAPES[:3], ids=str)
def test_t_like_paddle_and_torch(shape):
    data = _data(shape)
    x = oarlock.to_tensor(data)
    for got in (x.t(), oarlock.t(x), oarlock.t(input=x)):
        assert np.array_equal(got.numpy(), data.T) and got.shape == list(data.T.shape)
    paddle = pytest.importorskip("paddle")
    assert np.array_equal(paddle.to_tensor(data).t().numpy(), data.T)
    torch = pytest.importorskip("torch")
    assert np.array_equal(torch.tensor(data).t().numpy(), data.T)


def test_t_refuses_more_than_two_axes_as_paddle_does():
    x = oarlock.ones([2, 3, 4])
    with pytest.raises(ValueError, match=r"only support N-D \(N<=2\) tensor, but received length of Input\(input\) "
                                         r"is 3.*oarlock.transpose\(\)"):
        x.t()
    with pytest.raises(TypeError, match="must be a Tensor"):
        oarlock.t([[1.0, 2.0]])


def test_T_is_a_property_and_both_carry_gradients():
    x = oarlock.to_tensor(_data((2, 3)), stop_gradient=False)
    weight = oarlock.to_tensor([[1.0], [2.0], [3.0]])
    assert not callable(x.T) and isinstance(x.T, oarlock.Tensor)
    ((x.T * weight).sum() + (x.t() * weight).sum()).backward()
    assert x.grad.tolist() == [[2.0, 4.0, 6.0], [2.0, 4.0, 6.0]]


def test_T_and_t_are_views():
    x = oarlock.to_tensor(_data((2, 3)))
    y = x.T
    with oarlock.no_grad():
        y[0, 1] = 100.0   # y[0, 1] is x[1, 0]
    assert x.numpy()[1, 0] == 100.0
