"""Shared helpers of the tests that compare an op against PyTorch: run both frameworks on the same
arrays with the same upstream gradient, and compare float32 results with a scale-aware tolerance."""

import numpy as np

import oarlock


def close(ours, theirs, rtol=1e-5, atol=1e-6):
    """float32 comparison: relative `rtol`, absolute `atol` relative to the largest value (near-zero entries)."""
    theirs = np.asarray(theirs)
    np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=atol * max(1.0, float(np.abs(theirs).max(initial=0))))


def run_ours(fn, arrays, grad_out_seed=0):
    """fn applied to Tensors made from arrays (None stays None); returns (output, gradients, upstream)."""
    tensors = [None if a is None else oarlock.to_tensor(a, stop_gradient=False) for a in arrays]
    out = fn(*tensors)
    up = np.random.default_rng(grad_out_seed).standard_normal(out.shape).astype(np.float32)
    out.backward(oarlock.to_tensor(up))
    return out.numpy(), [None if t is None else t.grad.numpy() for t in tensors], up


def run_torch(torch, fn, arrays, up):
    """The same with torch, given the upstream gradient run_ours drew; returns (output, gradients)."""
    tensors = [None if a is None else torch.tensor(a, requires_grad=True) for a in arrays]
    out = fn(*tensors)
    out.backward(torch.tensor(up))
    return out.detach().numpy(), [None if t is None else t.grad.numpy() for t in tensors]
