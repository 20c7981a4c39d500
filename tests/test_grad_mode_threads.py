"""Grad mode is thread-local, as in PyTorch and Paddle: no_grad / set_grad_enabled in one thread never change
another thread's mode, and a new thread starts with grad enabled whatever its parent's mode is.

The interleaving scenarios run on oarlock and, as oracles of the same rules, on torch and paddle (which share
the names no_grad / enable_grad / set_grad_enabled / is_grad_enabled); the oracle runs skip when the framework
is absent. Threads are ordered with Barriers (every wait has a timeout, and a failing thread aborts the barrier)
so a broken implementation fails fast instead of hanging. The last test trains four small oarlock models in
concurrent threads and requires bit-identical losses to the same runs done sequentially."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import oarlock
from threads import TIMEOUT, fast_switching
from threads import run_threads as _run_threads


@pytest.fixture(params=["oarlock", "torch", "paddle"])
def fw(request):
    """The framework module under test: oarlock, or an oracle (torch / paddle, skipped when absent)."""
    module = oarlock if request.param == "oarlock" else request.getfixturevalue(request.param)
    yield module
    module.set_grad_enabled(True)  # a failing run must not leave the main thread in no-grad mode


@pytest.fixture(autouse=True)
def _restore_oarlock_grad_mode():
    yield
    oarlock.set_grad_enabled(True)


def _records_graph(fw) -> bool:
    """Whether an op on a tensor that requires grad records a graph in the calling thread right now."""
    if fw.__name__ == "torch":
        x = fw.ones(2, requires_grad=True)
        return (x * x).requires_grad
    x = fw.to_tensor([1.0, 2.0], stop_gradient=False)
    return not (x * x).stop_gradient


# -- (1) no_grad in one thread does not turn grad off in another ---------------------------------------------

def test_no_grad_in_one_thread_leaves_another_thread_recording(fw):
    barrier = threading.Barrier(2, timeout=TIMEOUT)
    seen = {}

    def a():
        with fw.no_grad():
            seen["a_inside"] = fw.is_grad_enabled()
            barrier.wait()            # 1: A is inside no_grad
            barrier.wait()            # 2: B has looked (and run its own no_grad block)
            seen["a_inside_after_b"] = fw.is_grad_enabled()
            seen["a_records"] = _records_graph(fw)
        seen["a_after"] = fw.is_grad_enabled()

    def b():
        barrier.wait()                # 1
        seen["b_enabled"] = fw.is_grad_enabled()
        seen["b_records"] = _records_graph(fw)
        with fw.no_grad():
            seen["b_inside"] = fw.is_grad_enabled()
        seen["b_after"] = fw.is_grad_enabled()
        barrier.wait()                # 2

    _run_threads(a, b, barrier=barrier)
    assert seen == {"a_inside": False, "b_enabled": True, "b_records": True, "b_inside": False, "b_after": True,
                    "a_inside_after_b": False, "a_records": False, "a_after": True}
    assert fw.is_grad_enabled()


# -- (2) interleaved no_grad blocks leave grad mode on in both threads ----------------------------------------

def test_interleaved_no_grad_blocks_restore_each_threads_own_mode(fw):
    # A enters, B enters, A exits, B exits: a process-global save/restore would leave grad off at the end.
    barrier = threading.Barrier(2, timeout=TIMEOUT)
    seen = {}

    def a():
        with fw.no_grad():
            barrier.wait()            # 1: A entered
            barrier.wait()            # 2: B entered
            seen["a_inside"] = fw.is_grad_enabled()
        seen["a_exited"] = fw.is_grad_enabled()
        barrier.wait()                # 3: A exited
        barrier.wait()                # 4: B exited
        seen["a_end"] = fw.is_grad_enabled()
        seen["a_records"] = _records_graph(fw)

    def b():
        barrier.wait()                # 1
        with fw.no_grad():
            barrier.wait()            # 2
            barrier.wait()            # 3: A has exited its block; B is still inside its own
            seen["b_inside_after_a_exit"] = fw.is_grad_enabled()
            seen["b_records_inside"] = _records_graph(fw)
        barrier.wait()                # 4
        seen["b_end"] = fw.is_grad_enabled()
        seen["b_records"] = _records_graph(fw)

    _run_threads(a, b, barrier=barrier)
    assert seen == {"a_inside": False, "a_exited": True, "b_inside_after_a_exit": False, "b_records_inside": False,
                    "a_end": True, "a_records": True, "b_end": True, "b_records": True}
    assert fw.is_grad_enabled() and _records_graph(fw)


# -- (4) a new thread starts with grad enabled, whatever its parent's mode ---------------------------------------

@pytest.mark.parametrize("how", ["no_grad", "set_grad_enabled_call"])
def test_a_new_thread_starts_with_grad_enabled(fw, how):
    seen = {}

    def child():
        seen["enabled"] = fw.is_grad_enabled()
        seen["records"] = _records_graph(fw)

    if how == "no_grad":
        with fw.no_grad():
            _run_threads(child)
            seen["parent"] = fw.is_grad_enabled()
    else:
        fw.set_grad_enabled(False)
        try:
            _run_threads(child)
            seen["parent"] = fw.is_grad_enabled()
        finally:
            fw.set_grad_enabled(True)
    assert seen == {"enabled": True, "records": True, "parent": False}


# -- (5) set_grad_enabled(False) in one thread is invisible to the others ---------------------------------------

def test_set_grad_enabled_is_invisible_to_other_threads(fw):
    barrier = threading.Barrier(2, timeout=TIMEOUT)
    seen = {}

    def a():
        fw.set_grad_enabled(False)     # plain call, never restored in this thread
        barrier.wait()                 # 1: A switched grad off
        barrier.wait()                 # 2: B switched its own mode off and on again
        seen["a_still_off"] = fw.is_grad_enabled()
        seen["a_records"] = _records_graph(fw)

    def b():
        barrier.wait()                 # 1
        seen["b_sees"] = fw.is_grad_enabled()
        seen["b_records"] = _records_graph(fw)
        fw.set_grad_enabled(False)
        fw.set_grad_enabled(True)
        barrier.wait()                 # 2

    _run_threads(a, b, barrier=barrier)
    assert seen == {"b_sees": True, "b_records": True, "a_still_off": False, "a_records": False}
    assert fw.is_grad_enabled()        # the main thread never saw A's switch
    fresh = {}
    _run_threads(lambda: fresh.setdefault("enabled", fw.is_grad_enabled()))
    assert fresh == {"enabled": True}


# -- (3) concurrent independent training == sequential training, bit for bit -------------------------------------

N_MODELS, STEPS, REPEATS = 4, 20, 3


def _problem(seed):
    rng = np.random.default_rng(seed)
    return {
        "x": rng.standard_normal((16, 5)).astype("float32"),
        "y": rng.standard_normal((16, 1)).astype("float32"),
        "w1": (rng.standard_normal((5, 8)) * 0.5).astype("float32"),
        "b1": (rng.standard_normal(8) * 0.1).astype("float32"),
        "w2": (rng.standard_normal((8, 1)) * 0.5).astype("float32"),
        "b2": (rng.standard_normal(1) * 0.1).astype("float32"),
    }


def _train(seed):
    """20 SGD steps of a Linear-tanh-Linear model; each step also evaluates the loss under no_grad, so
    no_grad regions of concurrent runs overlap the forward passes of the others. Returns the losses."""
    p = _problem(seed)
    lin1, lin2 = oarlock.nn.Linear(5, 8), oarlock.nn.Linear(8, 1)
    for layer, w, b in ((lin1, p["w1"], p["b1"]), (lin2, p["w2"], p["b2"])):
        layer.weight.set_value(w)
        layer.bias.set_value(b)
    params = list(lin1.parameters()) + list(lin2.parameters())
    opt = oarlock.optimizer.SGD(learning_rate=0.05, parameters=params)
    x, y = oarlock.to_tensor(p["x"]), oarlock.to_tensor(p["y"])

    def loss_fn():
        return ((lin2(lin1(x).tanh()) - y) ** 2).mean()

    losses, evals = [], []
    for step in range(STEPS):
        loss = loss_fn()
        assert not loss.stop_gradient, f"seed {seed} step {step}: the training forward recorded no graph"
        loss.backward()
        opt.step()
        opt.clear_grad()
        losses.append(loss.item())
        with oarlock.no_grad():
            ev = loss_fn()
            assert ev.stop_gradient, f"seed {seed} step {step}: the no_grad forward recorded a graph"
            evals.append(ev.item())
    return losses + evals


def test_concurrent_training_matches_sequential_bit_for_bit():
    seeds = [100 + i for i in range(N_MODELS)]
    expected = {s: _train(s) for s in seeds}
    assert all(np.all(np.isfinite(v)) for v in expected.values())
    with fast_switching():             # switch threads as often as possible: maximal interleaving
        for rep in range(REPEATS):
            got = {}
            barrier = threading.Barrier(N_MODELS, timeout=TIMEOUT)

            def worker(seed, got=got, barrier=barrier):
                barrier.wait()         # start together
                got[seed] = _train(seed)

            _run_threads(*[lambda s=s: worker(s) for s in seeds], barrier=barrier)
            for s in seeds:
                assert got[s] == expected[s], f"repetition {rep}, model {s}: losses differ from the sequential run"
    assert oarlock.is_grad_enabled()
