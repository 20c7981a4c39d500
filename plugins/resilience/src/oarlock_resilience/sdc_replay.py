"""Compute verification for SDCMonitor: a recorded micro-batch's forward and backward run again, and the
gradients' fingerprints are what the ranks compare; and a known-answer matrix product that breaks a tie between
two ranks that disagree.

The replay leaves training as it was: the parameters' gradients are put aside and restored, every sublayer's
train/eval flag is restored (the replay runs in eval mode, so dropout draws no random numbers and two runs see
the same network), and a DataParallel model replays under no_sync() (no all-reduce: each rank's own arithmetic is
what is being checked).
"""

from __future__ import annotations

import contextlib

import numpy as np

import oarlock
from oarlock_resilience.sdc_fingerprint import fingerprints

_PROJECTION_SEED = 20240522   # the same on every rank: ranks replaying one batch must compute one loss


def projection_loss(output):
    """sum(output * R) for a fixed standard-normal R of output's shape: a loss that needs no labels and sends a
    dense gradient through every parameter the output depends on. output: a Tensor, or a tuple/list whose first
    element is one."""
    if isinstance(output, (tuple, list)):
        output = output[0]
    if not isinstance(output, oarlock.Tensor):
        raise TypeError(f"SDCMonitor replay: the model's output must be a Tensor (or a tuple starting with one) "
                        f"for the default projection loss, got {type(output).__name__}; pass replay_fn=")
    weights = np.random.default_rng(_PROJECTION_SEED).standard_normal(output.shape)
    return (output * oarlock.to_tensor(weights.astype(output.numpy().dtype))).sum()


def gradient_fingerprints(model, params, inputs, replay_fn=None) -> np.ndarray:
    """int64 [len(params)]: fingerprints of the gradients of one replayed forward/backward of `inputs` (the
    positional arguments of model's forward); replay_fn(model, *inputs) -> loss replaces the projection loss."""
    saved = [p.grad for p in params]
    modes = [(layer, layer.training) for layer in model.sublayers(include_self=True)]
    for p in params:
        p.grad = None
    model.eval()
    try:
        no_sync = model.no_sync() if hasattr(model, "no_sync") else contextlib.nullcontext()
        with no_sync, oarlock.enable_grad():
            loss = replay_fn(model, *inputs) if replay_fn is not None else projection_loss(model(*inputs))
            loss.backward()
        return fingerprints([p.grad for p in params])
    finally:
        for p, grad in zip(params, saved):
            p.grad = grad
        for layer, training in modes:
            layer.training = training


def known_answer_ok(size: int = 48, rtol: float = 1e-4) -> bool:
    """Whether oarlock.matmul of two fixed float32 matrices agrees with float64 numpy within rtol (relative to
    the result's largest magnitude): a faulty core fails it."""
    rng = np.random.default_rng(7)
    a, b = (rng.standard_normal((size, size)) for _ in range(2))
    got = oarlock.matmul(oarlock.to_tensor(a.astype("float32")), oarlock.to_tensor(b.astype("float32"))).numpy()
    want = a @ b
    return bool(np.abs(got - want).max() <= rtol * np.abs(want).max())
