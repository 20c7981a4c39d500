"""Run one function in real Paddle 3.2 and in oarlock on the same arrays, backward with the same upstream
gradient, and compare the outputs and the gradient of every float input (the oracle helper of the
tests of Paddle's nn.functional names)."""

from __future__ import annotations

import numpy as np

import oarlock


def _as(framework, a, grad):
    if a is None or not isinstance(a, np.ndarray):
        return a
    t = framework.to_tensor(a)
    if grad and a.dtype.kind == "f":
        t.stop_gradient = False
    return t


def run(framework, fn, arrays, up_seed=0, grad=True, constants=()):
    """fn(*tensors) in `framework` (paddle or oarlock); returns (output, [input gradients]). The inputs at
    the indices in `constants` (labels, targets) get no gradient."""
    tensors = [_as(framework, a, grad and i not in constants) for i, a in enumerate(arrays)]
    out = fn(*tensors)
    up = np.random.default_rng(up_seed).standard_normal(out.shape).astype(out.numpy().dtype)
    grads = [None] * len(tensors)
    wants = [t for t in tensors if isinstance(t, framework.Tensor) and not t.stop_gradient]
    if grad and wants and out.dtype in (framework.float32, framework.float64):
        (out * framework.to_tensor(up)).sum().backward()
        grads = [t.grad.numpy() if isinstance(t, framework.Tensor) and not t.stop_gradient and t.grad is not None
                 else None for t in tensors]
    return out.numpy(), grads


def compare(paddle, ours, theirs, arrays, rtol=1e-5, atol=1e-6, grad_rtol=1e-4, grad=True, up_seed=0, constants=()):
    """ours(*oarlock tensors) against theirs(*paddle tensors): output values, shape and the gradient of every
    float input not listed in `constants`."""
    p_out, p_grads = run(paddle, theirs, arrays, up_seed, grad, constants)
    o_out, o_grads = run(oarlock, ours, arrays, up_seed, grad, constants)
    assert o_out.shape == p_out.shape, (o_out.shape, p_out.shape)
    assert o_out.dtype == p_out.dtype, (o_out.dtype, p_out.dtype)
    np.testing.assert_allclose(o_out, p_out, rtol=rtol, atol=atol)
    for i, (o, p) in enumerate(zip(o_grads, p_grads)):
        assert (o is None) == (p is None), f"input {i}: gradient {'missing' if o is None else 'unexpected'}"
        if p is not None:
            np.testing.assert_allclose(o, p, rtol=grad_rtol, atol=atol * 10, err_msg=f"gradient of input {i}")
    return o_out
