"""Checkpoint disaster recovery in one process: oarlock.distributed.resilience.save / resume with real files.

Each copy of a file is checked against the manifest's SHA-256 before use: a damaged primary is replaced
by the replica in memory or the mirror (and the rank directory rebuilt from it), a checkpoint with no
good copy of some file is skipped for the older one, and when nothing can be reassembled the error names
the function, the directory and every copy rejected. The random generators come back with the tensors.
(The buddy transfer itself needs several ranks: test_elastic's MPI jobs.)
"""

from __future__ import annotations

import os
import random
import shutil

import numpy as np
import pytest

import oarlock
from oarlock.distributed import resilience
from oarlock_resilience import recovery_files as files
from oarlock_resilience import recovery_replicas as replicas


@pytest.fixture
def store(tmp_path, monkeypatch):
    root = tmp_path / "memory"
    monkeypatch.setenv(replicas.ROOT_ENV, str(root))
    return root


def model_and_state(seed: int):
    oarlock.seed(seed)
    model = oarlock.nn.Linear(4, 3)
    return model, {"model": model.state_dict()}


def saved_steps(path, steps):
    """Save checkpoints `steps` of a model whose weight is filled with the step number; returns the model."""
    model, state = model_and_state(0)
    for step in steps:
        model.weight.set_value(np.full([4, 3], step, np.float32))
        resilience.save(state, path, step)
    return model, state


def flip_byte(path, offset=-5):
    data = bytearray(open(path, "rb").read())
    data[offset] ^= 0x10
    open(path, "wb").write(bytes(data))


def test_fresh_start_and_round_trip(tmp_path, store):
    path = tmp_path / "ckpt"
    model, state = model_and_state(0)
    assert resilience.resume(state, path) is None
    model, state = saved_steps(path, [2, 5, 8])
    assert sorted(files.manifests_in(files.rank_dir(str(path), 0))) == [5, 8]   # keep=2
    model.weight.set_value(np.zeros([4, 3], np.float32))
    assert resilience.resume(state, path) == 8
    np.testing.assert_array_equal(model.weight.numpy(), np.full([4, 3], 8, np.float32))
    assert resilience.last_restore()["rebuilt"] == [] and resilience.last_restore()["rejected"] == []


def test_random_generators_restored(tmp_path, store):
    model, state = model_and_state(3)
    np.random.seed(7)
    random.seed(7)
    resilience.save(state, tmp_path / "ckpt", 1)
    drawn = (oarlock.rand([5]).numpy(), np.random.rand(3), random.random())
    oarlock.seed(99)
    np.random.seed(99)
    random.seed(99)
    assert resilience.resume(state, tmp_path / "ckpt") == 1
    again = (oarlock.rand([5]).numpy(), np.random.rand(3), random.random())
    np.testing.assert_array_equal(drawn[0], again[0])
    np.testing.assert_array_equal(drawn[1], again[1])
    assert drawn[2] == again[2]


def test_damaged_primary_replaced_by_mirror(tmp_path, store):
    path, mirror = tmp_path / "ckpt", tmp_path / "mirror"
    model, state = saved_steps(path, [3, 6])
    shutil.copytree(files.rank_dir(str(path), 0), files.rank_dir(str(mirror), 0))   # another node's disk
    data = os.path.join(files.rank_dir(str(path), 0), "0_6.safetensors")
    good = open(data, "rb").read()
    flip_byte(data)
    model.weight.set_value(np.zeros([4, 3], np.float32))
    assert resilience.resume(state, path, mirror=mirror) == 6
    np.testing.assert_array_equal(model.weight.numpy(), np.full([4, 3], 6, np.float32))
    report = resilience.last_restore()
    assert [(os.path.basename(t), kind) for t, kind, _ in report["rebuilt"]] == [("0_6.safetensors", "mirror")]
    assert open(data, "rb").read() == good   # the primary was rewritten from the verified copy
    assert any("0_6.safetensors" in why and "SHA-256" in why for why in report["rejected"])


def test_lost_directory_rebuilt_from_memory_replica(tmp_path, store):
    path = tmp_path / "ckpt"
    model, state = saved_steps(path, [4])
    own = files.rank_dir(str(path), 0)
    entries = []
    for name in sorted(os.listdir(own)):
        entries.append((name, open(os.path.join(own, name), "rb").read()))
    replicas.write_replica(replicas.held_dir(str(path), 1, 0), entries, 4, keep=2)   # what a buddy stores
    shutil.rmtree(own)
    model.weight.set_value(np.zeros([4, 3], np.float32))
    assert resilience.resume(state, path) == 4
    np.testing.assert_array_equal(model.weight.numpy(), np.full([4, 3], 4, np.float32))
    kinds = {kind for _, kind, _ in resilience.last_restore()["rebuilt"]}
    assert kinds == {"replica in memory"}
    assert sorted(files.manifests_in(own)) == [4]   # the directory is whole again


def test_bad_newest_checkpoint_falls_back_to_older(tmp_path, store):
    path = tmp_path / "ckpt"
    model, state = saved_steps(path, [3, 6])
    flip_byte(os.path.join(files.rank_dir(str(path), 0), "0_6.rng.json"), offset=3)
    assert resilience.resume(state, path) == 3
    np.testing.assert_array_equal(model.weight.numpy(), np.full([4, 3], 3, np.float32))


def test_nothing_reassemblable_is_a_clear_error(tmp_path, store):
    path = tmp_path / "ckpt"
    _, state = saved_steps(path, [3])
    flip_byte(os.path.join(files.rank_dir(str(path), 0), "0_3.safetensors"))
    with pytest.raises(RuntimeError) as info:
        resilience.resume(state, path)
    message = str(info.value)
    assert message.startswith("oarlock.distributed.resilience.resume(): no checkpoint in")
    assert str(path) in message and "0_3.safetensors" in message and "SHA-256" in message


@pytest.mark.parametrize("kwargs, message", [
    ({"step": -1}, "save(step=...): got -1; accepts an int >= 0"),
    ({"step": 2.0}, "save(step=...): got 2.0; accepts an int >= 0"),
    ({"step": 1, "keep": 0}, "save(keep=...): got 0; accepts an int >= 1"),
])
def test_bad_arguments(tmp_path, kwargs, message):
    _, state = model_and_state(0)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        resilience.save(state, tmp_path / "ckpt", **kwargs)


def test_pack_sizes_match(tmp_path):
    for name, size in (("a.bin", 10), ("b.bin", 0), ("c.manifest.json", 33)):
        (tmp_path / name).write_bytes(os.urandom(size))
    names = ["a.bin", "b.bin", "c.manifest.json"]
    packed = replicas.pack(str(tmp_path), names)
    listed = {"a.bin": {"bytes": 10}, "b.bin": {"bytes": 0}}
    assert replicas.packed_size(str(tmp_path), names, listed) == len(packed)
    assert replicas.unpack(packed) == [(name, (tmp_path / name).read_bytes()) for name in names]
