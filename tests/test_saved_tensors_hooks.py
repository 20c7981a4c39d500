"""oarlock.autograd.saved_tensors_hooks against Paddle 3.2's paddle.autograd.saved_tensors_hooks (which tensors
are packed, how often backward unpacks, the gradients, nesting, writes after packing) and PyTorch's (higher-order
gradients through unpacked tensors)."""

import numpy as np
import pytest

import oarlock

RNG = np.random.default_rng(19)
A = RNG.standard_normal((3, 4)).astype("float32")
B = RNG.standard_normal((3, 4)).astype("float32")
W = RNG.standard_normal((4, 5)).astype("float32")


def _program(fw, log):
    """multiply, exp, tanh, matmul, relu: ops whose saved tensors are the same in Paddle and oarlock."""
    def pack(t):
        log.append(("pack", tuple(t.shape), round(float(t.numpy().astype("float64").sum()), 4)))
        return t.numpy()

    def unpack(a):
        log.append(("unpack", tuple(a.shape)))
        return fw.to_tensor(a)

    a, b, w = fw.to_tensor(A), fw.to_tensor(B), fw.to_tensor(W)
    for t in (a, b, w):
        t.stop_gradient = False
    with fw.autograd.saved_tensors_hooks(pack, unpack):
        y = fw.tanh(fw.exp(fw.multiply(a, b)))
        loss = fw.nn.functional.relu(fw.matmul(y, w)).sum()
    packed = list(log)
    log.clear()
    loss.backward()
    return packed, list(log), [t.grad.numpy() for t in (a, b, w)]


def test_pack_and_unpack_like_paddle(paddle):
    ours, theirs = _program(oarlock, []), _program(paddle, [])
    assert ours[0] == theirs[0]           # the same tensors packed, in the same order
    assert sorted(ours[1]) == sorted(theirs[1]) and len(ours[1]) == len(ours[0])
    for g, h in zip(ours[2], theirs[2]):
        np.testing.assert_allclose(g, h, rtol=1e-5, atol=1e-6)


def _pylayer_program(fw, log):
    class Mul(fw.autograd.PyLayer):
        @staticmethod
        def forward(ctx, x, y):
            ctx.save_for_backward(x, y)
            return x * y

        @staticmethod
        def backward(ctx, dz):
            x, y = ctx.saved_tensor()
            return dz * y, dz * x

    def pack(t):
        log.append("pack")
        return t.numpy() * 1   # a host copy: the unpacked tensor is a new one

    a, b = fw.to_tensor(A), fw.to_tensor(B)
    a.stop_gradient = b.stop_gradient = False
    with fw.autograd.saved_tensors_hooks(pack, lambda v: (log.append("unpack"), fw.to_tensor(v))[1]):
        z = Mul.apply(a, b)
    (z * z).sum().backward()
    return log, a.grad.numpy(), b.grad.numpy()


def test_pylayer_save_for_backward_like_paddle(paddle):
    ours, theirs = _pylayer_program(oarlock, []), _pylayer_program(paddle, [])
    assert ours[0].count("pack") == theirs[0].count("pack") == 2
    assert ours[0].count("unpack") == theirs[0].count("unpack")
    np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-6)
    np.testing.assert_allclose(ours[2], theirs[2], rtol=1e-6)


def test_one_pair_at_a_time_like_paddle(paddle):
    for fw in (oarlock, paddle):
        hooks = fw.autograd.saved_tensors_hooks
        x = fw.to_tensor(A)
        x.stop_gradient = False
        calls = []
        with hooks(lambda t, calls=calls: (calls.append(1), t)[1], lambda t: t):
            with pytest.raises(ValueError, match="one pair of hooks"):
                with hooks(lambda t: t, lambda t: t):
                    pass
            fw.exp(x)
        assert calls == [1]               # the outer pair stayed active after the refusal
        fw.exp(x)                         # leaving the context removed the hooks
        assert calls == [1]


def _second_order(fw, x0, hooks):
    """d/dx of sum(d/dx sum(tanh(x*x) * x*x)), with the saved tensors going through numpy copies."""
    import contextlib
    x = fw.tensor(x0, requires_grad=True) if fw.__name__ == "torch" else fw.to_tensor(x0, stop_gradient=False)
    if fw.__name__ == "torch":
        ctx = fw.autograd.graph.saved_tensors_hooks(lambda t: t.detach().numpy().copy(),
                                                    lambda a: fw.from_numpy(a)) if hooks else contextlib.nullcontext()
    else:
        ctx = fw.autograd.saved_tensors_hooks(lambda t: t.numpy().copy(), lambda a: fw.to_tensor(a)) \
            if hooks else contextlib.nullcontext()
    with ctx:
        h = x * x
        y = (fw.tanh(h) * h).sum()
    g, = fw.autograd.grad(y, x, create_graph=True) if fw.__name__ == "torch" else fw.grad(y, x, create_graph=True)
    gg, = fw.autograd.grad(g.sum(), x)
    return g.detach().numpy(), gg.detach().numpy()


def test_higher_order_gradients_through_unpacked_tensors(torch):
    x0 = RNG.standard_normal(6)
    ours = _second_order(oarlock, x0, hooks=True)
    theirs = _second_order(torch, x0, hooks=True)
    for g, h in zip(ours, theirs):
        np.testing.assert_allclose(g, h, rtol=1e-10)


def test_a_packed_copy_is_a_snapshot_like_paddle(paddle):
    """A write into a tensor after a copying pack hook took it is not checked and does not change the gradient
    (Paddle's and PyTorch's behaviour: the hook owns the value); without hooks the write is refused."""
    grads = []
    for fw in (oarlock, paddle):
        x = fw.to_tensor(A, stop_gradient=False)
        with fw.autograd.saved_tensors_hooks(lambda t: t.numpy().copy(), lambda a, fw=fw: fw.to_tensor(a)):
            h = x * 2.0
            y = (h * h).sum()     # saves h
        h.add_(fw.ones_like(h))
        y.backward()
        grads.append(x.grad.numpy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-6)
    np.testing.assert_allclose(grads[0], 8.0 * A.astype("float64"), rtol=1e-6)   # d/dx sum((2x)^2) = 8x
    x = oarlock.to_tensor(A, stop_gradient=False)
    h = x * 2.0
    y = (h * h).sum()
    h.add_(oarlock.ones_like(h))
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_unpack_hook_must_give_the_saved_tensor_back():
    x = oarlock.to_tensor(A, stop_gradient=False)
    with oarlock.autograd.saved_tensors_hooks(lambda t: t, lambda t: oarlock.ones([2])):
        y = oarlock.exp(x).sum()
    with pytest.raises(RuntimeError, match=r"unpack_hook returned a Tensor of shape \[2\].*shape \[3, 4\]"):
        y.backward()
    with pytest.raises(TypeError, match="'unpack_hook' must be callable; got int"):
        oarlock.autograd.saved_tensors_hooks(lambda t: t, 3)
