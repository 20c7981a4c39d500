"""clear_grad() zeroes gradients in place and tells the engine (autograd.mark_zero_grads): the next backward stores
each leaf's gradient instead of adding it to the zeros. Values must be exactly those of accumulation, and any
write to a zeroed gradient since (its version moved) must bring accumulation back. A gradient nothing else
references is not zeroed in memory at all (autograd.zero_grads leaves a DeferredZero, made as zeros when read): no
one may be able to tell the difference."""

import numpy as np

import oarlock
from oarlock import nn


def _model_and_grads(steps_before=1):
    oarlock.seed(3)
    model = nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 2))
    opt = oarlock.optimizer.SGD(learning_rate=0.1, parameters=model.parameters())
    x = oarlock.to_tensor(np.random.default_rng(0).standard_normal((6, 5)).astype(np.float32))
    for _ in range(steps_before):
        model(x).sum().backward()
        opt.clear_grad()
    return model, opt, x


def test_zeroed_gradients_are_replaced_with_the_same_values():
    model, opt, x = _model_and_grads()
    before = [p.grad for p in model.parameters()]
    assert all(float(g.abs().sum()) == 0.0 for g in before)      # clear_grad zeroed them in place (Paddle)
    model(x).sum().backward()
    got = [p.grad.numpy().copy() for p in model.parameters()]
    model.clear_grad()           # the Layer's own clear_grad does not mark: accumulation into zeros
    model(x).sum().backward()
    want = [p.grad.numpy() for p in model.parameters()]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert all(float(g.abs().sum()) == 0.0 for g in before)      # the zeroed tensors were not written


def test_a_write_after_zeroing_is_accumulated_into():
    model, opt, x = _model_and_grads()
    first = model.parameters()[0]
    with oarlock.no_grad():
        first.grad.add_(oarlock.ones(first.grad.shape))           # moves its version: no longer known zero
    model(x).sum().backward()
    with_one = first.grad.numpy().copy()
    plain = model.parameters()[1].grad.numpy().copy()
    opt.clear_grad()
    model(x).sum().backward()
    np.testing.assert_allclose(with_one - 1.0, first.grad.numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(plain, model.parameters()[1].grad.numpy())


def test_second_backward_accumulates():
    model, opt, x = _model_and_grads()
    model(x).sum().backward()
    once = [p.grad.numpy().copy() for p in model.parameters()]
    model(x).sum().backward()
    for g, p in zip(once, model.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), 2 * g, rtol=1e-6)


def test_an_unreferenced_gradient_is_deferred_and_reads_as_zeros():
    from oarlock._tensor import DeferredZero
    model, opt, x = _model_and_grads(steps_before=0)
    model(x).sum().backward()
    opt.clear_grad()
    assert all(p._grad.__class__ is DeferredZero for p in model.parameters())   # no pass over their memory
    first = model.parameters()[0]
    zeros = first.grad                      # read: made now, as zeros of the parameter's shape and dtype
    assert zeros.dtype == first.dtype and zeros.shape == first.shape and float(zeros.abs().sum()) == 0.0
    model(x).sum().backward()               # the read one is accumulated into (a write could have happened)
    got = [p.grad.numpy().copy() for p in model.parameters()]
    model.clear_grad()
    model(x).sum().backward()
    for g, p in zip(got, model.parameters()):
        np.testing.assert_array_equal(g, p.grad.numpy())
    assert float(zeros.abs().sum()) == 0.0   # the zeros handed out were not written by the later backwards


def test_a_held_gradient_is_zeroed_in_place_as_paddle_does():
    model, opt, x = _model_and_grads(steps_before=0)
    model(x).sum().backward()
    held = model.parameters()[0].grad        # someone keeps it (a hook, a buffer, user code)
    view = model.parameters()[2].grad[0]     # a view keeps the array of another
    opt.clear_grad()
    assert float(held.abs().sum()) == 0.0 and float(view.abs().sum()) == 0.0
    assert model.parameters()[0]._grad is held
