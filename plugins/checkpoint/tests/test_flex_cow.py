"""The copy-on-write async save (OARLOCK_ASYNC_SAVE=cow, the default): training writes every saved
tensor right after save_state_dict returns -- through in-place ops, a view, setitem, copy_, and the
optimizers' fused steps (whose kernels also write the moments and master weights behind the
dispatcher's back) and batch norm's running statistics -- and the checkpoint still holds the values
of the moment of the call. The writer is held at chosen points (before it starts; in the middle of
a tensor) so that the guards, and not a race, decide what it reads. Once the save is written no
guard is left: later writes copy nothing."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import oarlock
import oarlock.distributed as dist
from oarlock import nn
from oarlock_checkpoint.flex import cow

WIDE = 512   # Linear(WIDE, 2 * WIDE) weights are 2 MiB of float32: above cow.SMALL, so they are guarded


class Net(nn.Layer):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(WIDE, 2 * WIDE)
        self.norm = nn.BatchNorm1D(2 * WIDE)   # running statistics: written by the forward pass's kernel
        self.down = nn.Linear(2 * WIDE, WIDE)

    def forward(self, x):
        return self.down(nn.functional.relu(self.norm(self.up(x))))


def _step(model, opt) -> None:
    model.train()
    model(oarlock.randn([8, WIDE])).mean().backward()
    opt.step()
    opt.clear_grad()


def _setup():
    """Three models with three optimizers: Adam with amsgrad (three moments per parameter), AdamW with
    float32 master weights over bfloat16 parameters, Momentum (a velocity); each stepped once so that
    every optimizer tensor exists."""
    oarlock.seed(3)
    models = [Net(), Net(), Net()]
    models[1].to(dtype="bfloat16")
    opts = [oarlock.optimizer.Adam(1e-2, parameters=models[0].parameters(), amsgrad=True),
            oarlock.optimizer.AdamW(1e-2, parameters=models[1].parameters(), multi_precision=True),
            oarlock.optimizer.Momentum(1e-2, parameters=models[2].parameters())]
    for model, opt in zip(models, opts):
        if model is models[1]:
            model.norm.to(dtype="float32")   # batch norm keeps float32 statistics and affine weights
        _step(model, opt)
    free = {"w": oarlock.to_tensor(np.arange(1 << 20, dtype=np.float32)),     # 4 MiB, not a parameter
            "tied": oarlock.to_tensor(np.ones((1024, 512), np.float32))}
    state = {"free": free}   # first: free.w is the first tensor the writer reads
    for i, (model, opt) in enumerate(zip(models, opts)):
        state[f"m{i}"] = {"model": model.state_dict(), "opt": opt.state_dict()}
    state["free_again"] = {"tied": free["tied"]}   # the same tensor under two keys shares one guard
    return models, opts, free, state


def _values(state) -> dict:
    """{flat key: numpy copy} of every tensor of a nested state dict."""
    out = {}
    for key, value in state.items():
        if isinstance(value, dict):
            out.update({f"{key}.{k}": v for k, v in _values(value).items()})
        elif isinstance(value, oarlock.Tensor):
            out[key] = value.numpy().copy()
    return out


def _zeros_like(state):
    return {k: _zeros_like(v) if isinstance(v, dict) else
            oarlock.zeros(v.shape, dtype=v.dtype.name) if isinstance(v, oarlock.Tensor) else v
            for k, v in state.items()}


def _train_on(models, opts, free) -> None:
    """What training does right after the call: every tensor written in place, several ways."""
    w = free["w"]
    view = w[1000:3000]          # a view: its write goes into w's storage
    view.add_(5.0)
    w[0:10] = -1.0               # setitem
    free["tied"].copy_(oarlock.zeros([1024, 512]))
    free["tied"].scale_(3.0)
    for model, opt in zip(models, opts):
        _step(model, opt)        # the optimizers' fused steps; batch norm's statistics in the forward


class _HeldLock:
    """Stands in for a Source's lock: the writer thread stops before taking it for the (after + 1)-th
    time (between two pieces, holding nothing) until `release` is set."""

    def __init__(self, after: int, reached: threading.Event, release: threading.Event):
        self._lock, self._after, self._taken = threading.Lock(), after, 0
        self._reached, self._release = reached, release

    def __enter__(self):
        if threading.current_thread().name == "oarlock-async-save":
            self._taken += 1
            if self._taken == self._after + 1:
                self._reached.set()
                assert self._release.wait(60)
        self._lock.acquire()

    def __exit__(self, *exc):
        self._lock.release()


@pytest.fixture
def cow_mode(monkeypatch):
    monkeypatch.setenv("OARLOCK_ASYNC_SAVE", "cow")
    monkeypatch.setenv("OARLOCK_ASYNC_SAVE_PRECOPY", "0")   # (the default) the guards must do the work
    for what in cow.counts:
        monkeypatch.setitem(cow.counts, what, 0)


def _hold_writer(monkeypatch, key: str, after_pieces: int):
    """Make the writer stop at tensor `key` after `after_pieces` pieces; returns (reached, release)."""
    reached, release = threading.Event(), threading.Event()
    made = cow.Snapshot.__init__

    def init(self, items):
        made(self, items)
        self.sources[key]._lock = _HeldLock(after_pieces, reached, release)

    monkeypatch.setattr(cow.Snapshot, "__init__", init)
    return reached, release


@pytest.mark.parametrize("where", ["before_writing", "mid_tensor", "racing"])
def test_training_right_after_an_async_save_does_not_reach_the_checkpoint(tmp_path, monkeypatch, cow_mode, where):
    models, opts, free, state = _setup()
    before = _values(state)
    held = None
    if where == "before_writing":   # the first tensor in the file, before its first piece
        held = _hold_writer(monkeypatch, "free.w", 0)
    elif where == "mid_tensor":     # free.w half written when training writes it
        monkeypatch.setattr(cow, "READ_CHUNK", 1 << 20)
        held = _hold_writer(monkeypatch, "free.w", 2)
    else:   # the writer and the copier run free, racing training
        monkeypatch.setenv("OARLOCK_ASYNC_SAVE_PRECOPY", "1")
    dist.save_state_dict(state, tmp_path, async_save=True)
    if held is not None:
        assert held[0].wait(60)
    _train_on(models, opts, free)
    if held is not None:
        held[1].set()
    assert not np.array_equal(free["w"].numpy(), before["free.w"])
    dist.wait_async_save()
    target = _zeros_like(state)
    dist.load_state_dict(target, tmp_path)
    got = _values(target)
    assert sorted(got) == sorted(before)
    for key, value in before.items():
        assert got[key].tobytes() == value.tobytes(), key
    if where == "mid_tensor":   # only the unwritten 2 of 4 MiB of free.w were copied for it
        assert cow.counts["guard_calls"] > 0
    if where == "before_writing":
        assert cow.counts["guard_copies"] >= len([k for k, v in before.items() if v.nbytes > cow.SMALL]) - 1


def test_mid_tensor_copies_only_what_is_not_written_yet(tmp_path, monkeypatch, cow_mode):
    w = oarlock.to_tensor(np.arange(1 << 20, dtype=np.float32), stop_gradient=False)   # a parameter
    monkeypatch.setattr(cow, "READ_CHUNK", 1 << 20)
    reached, release = _hold_writer(monkeypatch, "w", 3)
    dist.save_state_dict({"w": w}, tmp_path, async_save=True)
    assert reached.wait(60)
    with oarlock.no_grad():
        w.scale_(0.0)   # 3 of its 4 MiB are written: the guard copies the last one
    release.set()
    dist.wait_async_save()
    assert cow.counts == {"guard_calls": 1, "guard_copies": 1, "precopies": 0, "copied_bytes": 1 << 20}
    target = oarlock.zeros([1 << 20])
    dist.load_state_dict({"w": target}, tmp_path)
    np.testing.assert_array_equal(target.numpy(), np.arange(1 << 20, dtype=np.float32))


def test_no_guard_is_left_once_the_save_is_written(tmp_path, cow_mode):
    models, opts, free, state = _setup()
    dist.save_state_dict(state, tmp_path, async_save=True)
    dist.wait_async_save()
    seen = dict(cow.counts)
    _train_on(models, opts, free)   # every tensor written again: nothing is copied any more
    assert cow.counts == seen


def test_a_save_without_trainable_parameters_copies_optimizer_state_at_once(tmp_path, cow_mode):
    """No parameter's guard would fire before an optimizer step writes the moments: they are copied
    before the call returns."""
    models, opts, _, _ = _setup()
    state = opts[0].state_dict()
    before = _values(state)
    dist.save_state_dict(state, tmp_path, async_save=True)
    assert cow.counts["precopies"] == len(before)
    _step(models[0], opts[0])
    dist.wait_async_save()
    target = _zeros_like(state)
    dist.load_state_dict(target, tmp_path)
    got = _values(target)
    assert all(got[k].tobytes() == v.tobytes() for k, v in before.items())
