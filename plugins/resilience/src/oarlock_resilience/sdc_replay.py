"""Compute verification for SDCMonitor: a recorded micro-batch's forward and backward run again, and the
gradients' fingerprints are compared; and a known-answer matrix product that breaks a tie between two ranks that
disagree. Two replays:

- shared: the group's first rank's last forward inputs, on every rank, in eval mode (dropout draws nothing), with
  a fixed random projection of the output as the loss (or replay_fn): the ranks' gradients must agree, and so
  must two replays on one rank;
- own batch (with SDCMonitor's loss_fn and the batch given to record_loss): the rank's own last micro-batch
  through the training loss, in the training's modes with the random state its forward started from, at the
  parameters the step used: its gradients must equal the ones the training backward computed.

A replay leaves training as it was: gradients, train/eval flags and the non-trainable parameters are put back,
and a DataParallel model replays under no_sync() (no all-reduce: each rank's own arithmetic is checked).
"""

from __future__ import annotations

import contextlib
import functools

import numpy as np

import oarlock
from oarlock.plugin_api import array_of, wrap
from oarlock_resilience.sdc_fingerprint import array_fingerprint, fingerprints

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
    weights = oarlock.to_tensor(np.random.default_rng(_PROJECTION_SEED).standard_normal(output.shape))
    return (output * weights.astype(output.dtype).to(output.place)).sum()


def gradient_fingerprints(model, params, loss_closure, eval_mode: bool = True) -> np.ndarray:
    """int64 [len(params)]: fingerprints of the gradients one loss_closure() -> loss and its backward leave in
    `params`, which start from no gradient; their gradients, the train/eval flags and the values of the model's
    non-trainable parameters (BatchNorm's running statistics, which a train-mode forward moves) are put back.
    eval_mode: run in eval mode (the shared replay); else in the modes training used (the own-batch replay)."""
    saved = [p.grad for p in params]
    modes = [(layer, layer.training) for layer in model.sublayers(include_self=True)]
    frozen = [(p, array_of(p).copy()) for p in model.parameters() if p.stop_gradient]
    for p in params:
        p.grad = None
    if eval_mode:
        model.eval()
    try:
        no_sync = model.no_sync() if hasattr(model, "no_sync") else contextlib.nullcontext()
        with no_sync, oarlock.enable_grad():
            loss_closure().backward()
        return fingerprints([p.grad for p in params])
    finally:
        for p, grad in zip(params, saved):
            p.grad = grad
        for layer, training in modes:
            layer.training = training
        with oarlock.no_grad():
            for p, array in frozen:
                p.set_value(wrap(array, p.place))


def shared_batch_loss(model, inputs, replay_fn=None):
    """The loss closure of the shared replay: replay_fn(model, *inputs), or the projection loss of the output."""
    if replay_fn is not None:
        return lambda: replay_fn(model, *inputs)
    return lambda: projection_loss(model(*inputs))


def own_batch_loss(model, batch, loss_fn, rng_state):
    """The loss closure of the own-batch replay: loss_fn(model, batch) with the random state the training
    forward started from (its dropout masks), the current state restored afterwards."""
    def closure():
        now = oarlock.get_rng_state()
        oarlock.set_rng_state(rng_state)
        try:
            return loss_fn(model, batch)
        finally:
            oarlock.set_rng_state(now)
    return closure


def known_answer_ok(size: int = 48, rtol: float = 1e-4) -> bool:
    """Whether oarlock.matmul of two fixed float32 matrices agrees with float64 numpy within rtol (relative to
    the result's largest magnitude): a faulty core fails it."""
    rng = np.random.default_rng(7)
    a, b = (rng.standard_normal((size, size)) for _ in range(2))
    got = oarlock.matmul(oarlock.to_tensor(a.astype("float32")), oarlock.to_tensor(b.astype("float32"))).numpy()
    want = a @ b
    return bool(np.abs(got - want).max() <= rtol * np.abs(want).max())


class TrainingGradients:
    """While armed (for one training step), fingerprints of the gradients the training backward computes for
    `params` (gradient hooks, which see each parameter's final local gradient before any all-reduce) and the
    random state of the last forward (note_forward), for the own-batch replay to reproduce."""

    def __init__(self, params):
        self.params, self.handles, self.fps, self.rng_state = params, [], None, None

    @property
    def armed(self) -> bool:
        return bool(self.handles)

    def arm(self) -> None:
        self.disarm()
        self.fps, self.rng_state = np.zeros(len(self.params), dtype=np.int64), None
        self.handles = [p.register_hook(functools.partial(self._take, i)) for i, p in enumerate(self.params)]

    def _take(self, index, grad):
        self.fps[index] = array_fingerprint(array_of(grad))

    def note_forward(self) -> None:
        if self.handles:
            self.rng_state = oarlock.get_rng_state()

    def disarm(self) -> tuple:
        """(fingerprints, random state) captured; the hooks are removed."""
        for handle in self.handles:
            handle.remove()
        self.handles = []
        return self.fps, self.rng_state
