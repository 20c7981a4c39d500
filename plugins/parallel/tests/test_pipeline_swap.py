"""pipeline_swap.ActivationSwap, the "O"/"L" actions of the 1F1BOffload schedule, in one process: offloading a
micro-batch's saved activations frees their device memory (oarlock.device.memory_allocated, the cpu allocator's
counter) and fills the host pool (host_memory_allocated); loading them back and running backward gives exactly
the gradients of the same forward without swapping."""

import contextlib
import gc

import numpy as np
import pytest

import oarlock
import oarlock.nn as nn
from oarlock.device import host_memory_allocated, memory_allocated
from oarlock_parallel.pipeline_swap import ActivationSwap


def _model():
    oarlock.seed(0)
    return nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.Linear(128, 128), nn.LayerNorm(128), nn.Softmax(-1),
                         nn.Dropout(0.2), nn.Linear(128, 32))


def _input(seed=0):
    x = oarlock.to_tensor(np.random.default_rng(seed).standard_normal([64, 32]).astype("float32"))
    x.stop_gradient = False       # a received stage input: its gradient is sent back
    return x


def _grads(model, x):
    return [p.grad.numpy().copy() for p in model.parameters()] + [x.grad.numpy().copy()]


def _forward(model, x, swap=None, key=(0, 0)):
    oarlock.seed(5)               # the same dropout mask in every run
    with swap.recording(key) if swap is not None else contextlib.nullcontext():
        return (model(x) ** 2).mean()


def _reference():
    model, x = _model(), _input()
    _forward(model, x).backward()
    return _grads(model, x)


@contextlib.contextmanager
def _no_collection():
    """memory_allocated() counts the whole process: a cyclic-garbage collection in the middle of the measurement
    (another test's leftovers, on the same xdist worker) would free memory that is not ours and skew the deltas."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.parametrize("load_before_backward", [True, False])
def test_offload_frees_device_memory_and_gradients_are_unchanged(load_before_backward):
    with _no_collection():
        _check_offload(load_before_backward)


def _check_offload(load_before_backward):
    expected = _reference()
    model, x = _model(), _input()
    swap = ActivationSwap([(0, 0)])
    before, host_before = memory_allocated(), host_memory_allocated()
    loss = _forward(model, x, swap)
    held = memory_allocated() - before
    swap.offload((0, 0))
    swap.settle(wait=True)
    after_offload = memory_allocated() - before
    moved = host_memory_allocated() - host_before
    # 64 x 128 float32 activations (32 KiB each): most of what the forward held leaves the device
    assert held > 5 * 32768 and after_offload < 0.1 * held
    assert moved == swap.offloaded_bytes and moved >= 0.9 * held
    if load_before_backward:
        swap.load((0, 0), wait=True)
        assert memory_allocated() - before >= 0.9 * held
        assert host_memory_allocated() == host_before       # the host blocks were freed by the load
    loss.backward()
    for got, want in zip(_grads(model, x), expected):
        np.testing.assert_array_equal(got, want)


def test_only_the_listed_micro_batches_are_recorded():
    model, x = _model(), _input()
    swap = ActivationSwap([(1, 0)])
    _forward(model, x, swap, key=(0, 0))
    with pytest.raises(RuntimeError, match=r"ActivationSwap.offload\(\): micro-batch \(0, 0\) has no recorded "
                                           r"forward to offload \(offloaded pairs: \[\(1, 0\)\]\)"):
        swap.offload((0, 0))
    loss = _forward(model, x, swap, key=(1, 0))
    swap.offload((1, 0))
    swap.load((1, 0))
    with pytest.raises(RuntimeError, match=r"ActivationSwap.load\(\): micro-batch \(1, 0\) is not offloaded"):
        swap.load((1, 0))
    loss.backward()


def test_a_tensor_saved_by_several_ops_moves_once():
    swap = ActivationSwap([(0, 0)])
    w = oarlock.to_tensor(np.ones([256, 256], "float32"))
    w.stop_gradient = False
    with swap.recording((0, 0)):
        h = oarlock.tanh(_input()[:, :1].tile([1, 256]) @ w)   # saved as tanh's output and by both products
        loss = (h @ w).sum() + (h * h).sum()
    swap.offload((0, 0))
    assert swap.offloaded_bytes == 64 * 256 * 4 * 2           # h, and the tiled input of the first product
    loss.backward()


@pytest.mark.parametrize("path", ["load_while_copying", "backward_without_load", "backward_while_copying"])
def test_every_interleaving_of_the_asynchronous_copies_gives_the_same_gradients(path):
    """The copies run on the device's copy queue (the cpu's copy worker): a load issued before the copy to host
    has been settled keeps the device tensor, a backward that finds a handle still on host loads it then, and a
    backward during the copy to host reads the device tensor; each frees its host blocks."""
    expected = _reference()
    model, x = _model(), _input()
    swap = ActivationSwap([(0, 0)])
    host_before = host_memory_allocated()
    loss = _forward(model, x, swap)
    swap.offload((0, 0))
    if path == "load_while_copying":
        swap.load((0, 0))
    elif path == "backward_without_load":
        swap.settle(wait=True)
        assert host_memory_allocated() - host_before == swap.offloaded_bytes > 0
    loss.backward()
    swap.settle(wait=True)
    del loss
    gc.collect()
    assert host_memory_allocated() == host_before
    for got, want in zip(_grads(model, x), expected):
        np.testing.assert_array_equal(got, want)
