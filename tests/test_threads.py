"""Threads: independent models train at once with results bit-identical to lone runs, and every piece of
process state an op touches is per thread (grad mode, autocast) or safe to share (plugin loading, the
generator, places).

- Four threads at once, five times over: an MLP with SGD, a small transformer block (LayerNorm, GELU,
  softmax attention) with AdamW, the same block evaluated under no_grad, and the block trained under
  amp.auto_cast(bfloat16). Each thread's losses and final weights must equal, bit for bit, the same loop
  run alone (models without randomness, weights set from numpy).
- auto_cast in one thread casts that thread's ops only, also when the op's fast path is warm; entries and
  exits interleaved across threads (ordered by barriers) leave each thread its own state. torch, whose
  autocast is per thread too, runs the same scenario as the oracle. (Grad mode: test_grad_mode_threads.)
- Plugins loaded from several threads at once, in a fresh interpreter: every thread sees them all.
- The shared generator: another thread reading its state sees it only between whole draws.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import warnings

import numpy as np
import pytest

import oarlock
from oarlock import dispatch
from threads import TIMEOUT, fast_switching, run_threads

F = oarlock.nn.functional
amp = oarlock.amp
REPEATS, STEPS = 5, 6


@pytest.fixture(autouse=True)
def _main_thread_state_intact():
    """Every test must leave the main thread with grad on and autocast off, whatever its threads did."""
    yield
    assert oarlock.is_grad_enabled() and not amp.is_autocast_enabled()
    assert dispatch.AUTOCAST_THREADS.count == 0, "a thread's autocast is still counted after it ended"


# -- the four jobs -------------------------------------------------------------------------------------------

def _set_weights(layers, rng, scale):
    for layer in layers:
        for p in layer.parameters():
            p.set_value((rng.standard_normal(p.shape) * scale).astype("float32"))


def _mlp_sgd(seed):
    rng = np.random.default_rng(seed)
    x = oarlock.to_tensor(rng.standard_normal((16, 6)).astype("float32"))
    y = oarlock.to_tensor(rng.standard_normal((16, 1)).astype("float32"))
    layers = [oarlock.nn.Linear(6, 12), oarlock.nn.Linear(12, 1)]
    _set_weights(layers, rng, 0.4)
    params = [p for layer in layers for p in layer.parameters()]
    opt = oarlock.optimizer.SGD(learning_rate=0.05, parameters=params)
    losses = []
    for _ in range(STEPS):
        loss = ((layers[1](F.relu(layers[0](x))) - y) ** 2).mean()
        assert not loss.stop_gradient, "the training forward recorded no graph"
        loss.backward()
        opt.step()
        opt.clear_grad()
        losses.append(loss.item())
    return losses, [p.numpy().copy() for p in params]


def _block(seed, mode):
    """A transformer-ish block: x + attention(LayerNorm(x)), then GELU(Linear) and a mean-square loss.
    mode: "train" (AdamW), "amp" (AdamW, forward under auto_cast bfloat16) or "eval" (forward under no_grad)."""
    rng = np.random.default_rng(seed)
    x = oarlock.to_tensor(rng.standard_normal((2, 8, 16)).astype("float32"))
    ln, q, k, v, ff = (oarlock.nn.LayerNorm(16), *(oarlock.nn.Linear(16, 16) for _ in range(4)))
    layers = [ln, q, k, v, ff]
    _set_weights(layers, rng, 0.3)
    params = [p for layer in layers for p in layer.parameters()]
    opt = oarlock.optimizer.AdamW(learning_rate=0.01, parameters=params, weight_decay=0.01)

    def forward():
        h = ln(x)
        scores = F.softmax(oarlock.matmul(q(h), k(h), transpose_y=True) / 4.0, axis=-1)
        return (F.gelu(ff(x + oarlock.matmul(scores, v(h)))) ** 2).mean()

    losses = []
    for _ in range(STEPS):
        if mode == "eval":
            with oarlock.no_grad():
                loss = forward()
            assert loss.stop_gradient, "the no_grad forward recorded a graph"
            losses.append(loss.item())
            continue
        if mode == "amp":
            with amp.auto_cast(dtype="bfloat16"):
                assert q(x).dtype == oarlock.bfloat16, "auto_cast did not cast this thread's linear"
                loss = forward()
        else:
            loss = forward()
        assert not loss.stop_gradient, "the training forward recorded no graph"
        loss.backward()
        opt.step()
        opt.clear_grad()
        losses.append(loss.astype("float32").item())
    return losses, [p.numpy().copy() for p in params]


JOBS = {"mlp+sgd": lambda: _mlp_sgd(1), "block+adamw": lambda: _block(2, "train"),
        "block eval under no_grad": lambda: _block(3, "eval"), "block under auto_cast": lambda: _block(4, "amp")}


def _same(got, expected):
    return got[0] == expected[0] and all(np.array_equal(a, b) for a, b in zip(got[1], expected[1]))


def test_four_models_trained_at_once_match_their_lone_runs_bit_for_bit():
    alone = {name: job() for name, job in JOBS.items()}
    assert all(np.all(np.isfinite(losses)) for losses, _ in alone.values())
    with fast_switching(1e-5):
        for rep in range(REPEATS):
            got = {}
            barrier = threading.Barrier(len(JOBS), timeout=TIMEOUT)

            def worker(name, got=got, barrier=barrier):
                barrier.wait()   # start together
                got[name] = JOBS[name]()

            run_threads(*[lambda n=n: worker(n) for n in JOBS], barrier=barrier)
            differ = [name for name in JOBS if not _same(got[name], alone[name])]
            assert not differ, f"repetition {rep}: {differ} differ from the same loop run alone"


# -- autocast is per thread ------------------------------------------------------------------------------------

class _OarlockAmp:
    def __init__(self):
        rng = np.random.default_rng(0)
        self.x = oarlock.to_tensor(rng.standard_normal((4, 4)).astype("float32"))
        oarlock.matmul(self.x, self.x)   # warm the fast path: an autocast thread must still not take it

    def block(self):
        return amp.auto_cast(dtype="bfloat16")

    def enabled(self):
        return amp.is_autocast_enabled()

    def casts(self):
        return oarlock.matmul(self.x, self.x).dtype == oarlock.bfloat16


class _TorchAmp:
    def __init__(self, torch):
        self.torch = torch
        self.x = torch.from_numpy(np.random.default_rng(0).standard_normal((4, 4)).astype("float32"))

    def block(self):
        return self.torch.autocast("cpu", dtype=self.torch.bfloat16)

    def enabled(self):
        return self.torch.is_autocast_enabled("cpu")

    def casts(self):
        return (self.x @ self.x).dtype == self.torch.bfloat16


@pytest.fixture(params=["oarlock", "torch"])
def fw(request):
    return _OarlockAmp() if request.param == "oarlock" else _TorchAmp(request.getfixturevalue("torch"))


def _look(fw, seen, key):
    seen[key] = (fw.enabled(), fw.casts())


def test_auto_cast_in_one_thread_leaves_another_thread_uncast(fw):
    barrier = threading.Barrier(2, timeout=TIMEOUT)
    seen = {}

    def a():
        with fw.block():
            _look(fw, seen, "a inside")
            barrier.wait()            # 1: A is inside its block
            barrier.wait()            # 2: B has looked
        _look(fw, seen, "a after")

    def b():
        barrier.wait()                # 1
        _look(fw, seen, "b while a inside")
        barrier.wait()                # 2

    run_threads(a, b, barrier=barrier)
    assert seen == {"a inside": (True, True), "b while a inside": (False, False), "a after": (False, False)}


def test_interleaved_auto_cast_blocks_restore_each_threads_own_state(fw):
    # A enters, B enters, A exits, B looks, B exits: a process-wide save/restore would switch B's autocast
    # off when A exits, and leave it on (A's saved state) when B exits
    barrier = threading.Barrier(2, timeout=TIMEOUT)
    seen = {}

    def a():
        with fw.block():
            barrier.wait()            # 1: A entered
            barrier.wait()            # 2: B entered
        _look(fw, seen, "a exited")
        barrier.wait()                # 3: A exited
        barrier.wait()                # 4: B exited
        _look(fw, seen, "a end")

    def b():
        barrier.wait()                # 1
        with fw.block():
            barrier.wait()            # 2
            barrier.wait()            # 3
            _look(fw, seen, "b inside after a exited")
        barrier.wait()                # 4
        _look(fw, seen, "b end")

    run_threads(a, b, barrier=barrier)
    off, on = (False, False), (True, True)
    assert seen == {"a exited": off, "b inside after a exited": on, "a end": off, "b end": off}


def test_one_auto_cast_object_entered_by_two_threads_keeps_a_state_per_thread():
    block = amp.auto_cast(dtype="bfloat16")
    barrier = threading.Barrier(2, timeout=TIMEOUT)
    seen = {}

    def a():
        with block:
            barrier.wait()            # 1: A entered
            barrier.wait()            # 2: B entered
        barrier.wait()                # 3: A exited
        seen["a"] = amp.is_autocast_enabled()

    def b():
        barrier.wait()                # 1
        with block:
            barrier.wait()            # 2
            barrier.wait()            # 3
            seen["b inside"] = amp.is_autocast_enabled()
        seen["b"] = amp.is_autocast_enabled()

    run_threads(a, b, barrier=barrier)
    assert seen == {"a": False, "b inside": True, "b": False}


def test_a_thread_ending_inside_an_auto_cast_block_is_no_longer_counted():
    def leave_it_on():
        amp.auto_cast(dtype="bfloat16").__enter__()   # never exited
        assert dispatch.AUTOCAST_THREADS.count == 1

    run_threads(leave_it_on)
    # the fixture checks that the count is back to 0: the fast paths read only that, once again


def test_a_bfloat16_block_in_one_thread_does_not_turn_off_another_threads_grad_scaler():
    barrier = threading.Barrier(2, timeout=TIMEOUT)
    scaled = {}

    def bfloat16_thread():
        with amp.auto_cast(dtype="bfloat16"):
            barrier.wait()            # 1: this thread's last block is bfloat16

    def float16_thread():
        scaler = amp.GradScaler(init_loss_scaling=1024.0)
        barrier.wait()                # 1
        with warnings.catch_warnings():
            warnings.simplefilter("error")   # the scaler's "turns itself off" warning fails the test
            scaled["loss"] = scaler.scale(oarlock.to_tensor(2.0)).item()

    run_threads(bfloat16_thread, float16_thread, barrier=barrier)
    assert scaled == {"loss": 2048.0}


# -- plugins loaded from several threads at once -----------------------------------------------------------

_FIRST_USE = textwrap.dedent("""
    import faulthandler, importlib, sys, threading
    faulthandler.dump_traceback_later({timeout}, exit=True)   # a deadlock prints every thread's stack
    import oarlock
    sys.setswitchinterval(1e-6)

    def op():
        x = oarlock.to_tensor([1.0, -2.0], stop_gradient=False)
        oarlock.nn.functional.relu(x * 2).sum().backward()
        assert x.grad.numpy().tolist() == [2.0, 0.0]

    def namespace_import():
        import oarlock.nn.functional as F
        assert F.gelu(oarlock.to_tensor([0.0])).item() == 0.0

    def from_import():
        from oarlock.nn import Linear
        assert Linear(2, 3).weight.shape == [2, 3]

    def attribute():
        assert callable(oarlock.optimizer.SGD)

    def plugin_module():   # a plugin module imported directly: the load defers that plugin meanwhile
        importlib.import_module("oarlock_nn.amp.autocast")
        assert oarlock.amp.is_autocast_enabled() is False

    barrier = threading.Barrier(5)
    errors = []

    def run(f):
        barrier.wait()
        try:
            f()
        except Exception as e:
            errors.append(f"{{f.__name__}}: {{e!r}}")

    threads = [threading.Thread(target=run, args=(f,)) for f in (op, namespace_import, from_import, attribute,
                                                                 plugin_module)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(errors)
""")


def test_threads_using_oarlock_first_at_the_same_time_all_see_every_plugin():
    script = _FIRST_USE.format(timeout=int(TIMEOUT))
    env = {k: v for k, v in os.environ.items() if k not in ("OARLOCK_DISABLE_PLUGINS",
                                                            "OARLOCK_DISABLE_PLUGIN_AUTOLOAD")}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=TIMEOUT + 30,
                          env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout[-4000:]


# -- the shared generator: draws are whole for other threads -------------------------------------------------

def _states_seen_between_draws(draw, state, n_draws):
    """The states `state()` returns sequentially after 0..n_draws draws, and those another thread sees
    while one thread makes the n_draws draws (draw() restarts the stream when called with restart=True)."""
    draw(restart=True)
    boundaries = [state()]
    for _ in range(n_draws):
        draw()
        boundaries.append(state())
    draw(restart=True)
    seen, done = [], threading.Event()

    def drawer():
        try:
            for _ in range(n_draws):
                draw()
        finally:
            done.set()

    def reader():
        while not done.is_set():
            seen.append(state())

    with fast_switching():
        run_threads(drawer, reader)
    return boundaries, seen


def test_another_thread_sees_the_cpu_generator_only_between_whole_draws():
    # a draw of 2**20 values fills its result in blocks, and numpy leaves the GIL while it draws one: a state
    # read in between used to see the generator half way through a draw (and unlocked, mid-update)
    if not isinstance(np.random.default_rng().bit_generator.lock, type(threading.RLock())):
        pytest.skip("this numpy's bit generators take a plain Lock, which a blocked fill cannot hold across draws")

    def draw(restart=False):
        if restart:
            oarlock.seed(7)
        else:
            oarlock.rand([1 << 20])

    def state():
        return oarlock.get_rng_state("cpu")[0]["state"]["state"]

    boundaries, seen = _states_seen_between_draws(draw, state, 8)
    assert len(set(boundaries)) == 9 and seen
    inside = [s for s in seen if s not in boundaries]
    assert not inside, f"{len(inside)} of {len(seen)} states read were inside a draw"


def test_another_thread_sees_the_gpu_counter_generator_only_between_whole_draws():
    # the gpu generator with its host engine (no GPU needed): the same block-wise fill as the gpu's rand
    rng = pytest.importorskip("oarlock_cuda.rng")
    from oarlock_ops.draws import uniform_into

    gen = {"g": None}

    def draw(restart=False):
        if restart:
            gen["g"] = rng.CounterGenerator(7)
        else:
            uniform_into(np, gen["g"], np.empty(1 << 20, dtype=np.float32), 0.0, 1.0)

    def state():
        return gen["g"].state["offset"]

    boundaries, seen = _states_seen_between_draws(draw, state, 6)
    assert boundaries == [k << 20 for k in range(7)] and seen
    inside = [s for s in seen if s not in boundaries]
    assert not inside, f"{len(inside)} of {len(seen)} states read were inside a draw"


def test_places_made_at_once_by_several_threads_are_one_object_each():
    from oarlock.device import Place
    made = {}

    def make(k):
        made[k] = [Place("threadtest", i) for i in range(3000)]

    with fast_switching():
        run_threads(*[lambda k=k: make(k) for k in range(6)])
    split = [i for i in range(3000) if len({id(made[k][i]) for k in made}) > 1]
    assert not split, f"{len(split)} places were made twice (places compare with `is`)"
