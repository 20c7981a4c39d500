"""A leaf's gradient hooks fire as soon as its gradient is final, while backward still runs the
rules of earlier layers (what DataParallel's overlapping all-reduce stands on), and
queue_callback runs after every .grad is in place."""

import numpy as np
import pytest

import oarlock
from oarlock.autograd import queue_callback


def _chain():
    """x -> (w1) -> (w2) -> loss: w2's gradient is final before w1's rule runs."""
    w1 = oarlock.to_tensor(np.full([3], 2.0, "float32"), stop_gradient=False)
    w2 = oarlock.to_tensor(np.full([3], 3.0, "float32"), stop_gradient=False)
    x = oarlock.to_tensor(np.arange(3, dtype="float32"))
    return w1, w2, x


def test_leaf_hook_fires_before_earlier_layers_finish():
    w1, w2, x = _chain()
    events = []
    w2.register_hook(lambda g: events.append(("w2", w1.grad is None)))
    w1.register_hook(lambda g: events.append(("w1", w2.grad is not None)))
    h = (x * w1).exp()                      # w1's gradient needs exp's and the first mul's rules
    h.register_hook(lambda g: events.append(("h", None)))
    loss = (h * w2).sum() + (h * w2 * w2).sum()
    loss.backward()
    # w2 gets two contributions: its hook ran once, with both summed, before backward reached h
    assert events == [("w2", True), ("h", None), ("w1", True)]
    hx = np.exp(np.arange(3) * 2.0)
    np.testing.assert_allclose(w2.grad.numpy(), hx + 2 * 3.0 * hx, rtol=1e-6)


def test_queue_callback_runs_after_all_grads():
    w1, w2, x = _chain()
    seen = []
    w2.register_hook(lambda g: queue_callback(lambda: seen.append((w1.grad is not None, w2.grad is not None))))
    (x * w1 * w2).sum().backward()
    assert seen == [(True, True)]
    with pytest.raises(RuntimeError, match="queue_callback\\(\\): no backward is running"):
        queue_callback(lambda: None)
