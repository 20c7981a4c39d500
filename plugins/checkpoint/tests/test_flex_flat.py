"""FlexCheckpoint with flattened shards (Paddle's ShardedWeight(is_flattened=True, flattened_range=slice(a, b))).

In-process: flat.decompose against numpy for random shapes and ranges (the boxes, in order, are exactly
the range's elements), ShardedWeight's errors, and the metadata and `oarlock checkpoint verify` of a
checkpoint whose flat ranges need several boxes. In real MPI jobs (scripts/flex_flat_job.py): flat
ranges saved on 4 ranks load bit for bit into n-d shards on 2 ranks, whole into one process and into
flat ranges of another split on 3 ranks; n-d shards saved (pickle) on 2 ranks load into flat ranges on
4; an async save of flat ranges loads too. Every load is checked in place: the flat 1-D tensors are
views of longer padded tensors, which must see the values, their padding untouched.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import oarlock
import oarlock.distributed as dist
from oarlock_checkpoint.flex.flat import decompose, flat_pieces

JOB = Path(__file__).parent / "scripts" / "flex_flat_job.py"

# name: (ranks, phase, checkpoint, layout, flags); a load's checkpoint is written by the save of that name first
JOBS = {
    "save_flat4": (4, "save", "flat4", "flat", []),
    "load_nd2": (2, "load", "flat4", "nd", []),
    "load_whole1": (1, "load", "flat4", "whole", []),
    "load_uneven3": (3, "load", "flat4", "uneven", []),
    "save_nd2_pickle": (2, "save", "nd2", "nd", ["--pickle"]),
    "load_flat4_from_nd": (4, "load", "nd2", "flat", []),
    "save_uneven2_async": (2, "save", "async2", "uneven", ["--async"]),
    "load_flat4_from_async": (4, "load", "async2", "flat", []),
}
SAVE_OF = {"flat4": "save_flat4", "nd2": "save_nd2_pickle", "async2": "save_uneven2_async"}


def _checks() -> list:
    pytest.importorskip("mpi4py")
    spec = importlib.util.spec_from_file_location("flex_flat_job", JOB)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CHECKS


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """run(name) -> (merged failures, checkpoint dir); each job runs once, its save first."""
    pytest.importorskip("mpi4py")
    root, done = tmp_path_factory.mktemp("flat"), {}

    def get(name: str):
        if name not in done:
            ranks, phase, checkpoint, layout, flags = JOBS[name]
            if phase == "load":
                get(SAVE_OF[checkpoint])
            out = root / f"{name}.json"
            env = dict(os.environ, OARLOCK_COLLECTIVE_TIMEOUT="120", PYTHONWARNINGS="ignore")
            finished = subprocess.run([sys.executable, "-m", "oarlock.cli", "launch", "-n", str(ranks), str(JOB),
                                       phase, str(root / checkpoint), layout, str(out), *flags],
                                      capture_output=True, text=True, timeout=300, env=env)
            assert finished.returncode == 0 and out.exists(), (
                f"{name} exited {finished.returncode}:\n{finished.stdout[-3000:]}\n{finished.stderr[-3000:]}")
            report = json.loads(out.read_text())
            assert report["size"] == ranks
            done[name] = report["failures"], root / checkpoint
        return done[name]

    return get


@pytest.mark.parametrize("check", ["saved", "values", "in_place", "padding_kept", "metadata"])
@pytest.mark.parametrize("name", list(JOBS))
def test_job(run, name, check):
    failures, _ = run(name)
    assert not failures[check], "\n".join(failures[check])


def test_job_checks_are_the_ones_tested():
    assert _checks() == ["saved", "values", "in_place", "padding_kept", "metadata"]


def test_flat_ranges_are_stored_as_named_nd_boxes(run):
    _, checkpoint = run("save_flat4")
    meta = json.loads((checkpoint / "0.metadata").read_text())
    a = meta["tensors"]["a"]   # (5, 7, 3) cut in 4 ranges of 27: most ranges need several boxes
    assert all(len(s["shape"]) == 3 for s in a["shards"])
    names = [s.get("name") for s in a["shards"] if s["file"] == "0_0.safetensors"]
    assert names == ["a@0", "a@1"], "rank 0's range [0, 27) is a whole (7, 3) row then 2 rows of 3 of the next"
    assert "name" not in meta["tensors"]["b"]["shards"][0], "a range that is one box keeps the key as its name"
    done = subprocess.run([sys.executable, "-m", "oarlock.cli", "checkpoint", "verify", str(checkpoint)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


# -- in-process -------------------------------------------------------------------------------------------------
def _union_in_order(shape, boxes) -> np.ndarray:
    index = np.arange(math.prod(shape)).reshape(shape)
    parts = [index[tuple(slice(lo, hi) for lo, hi in box)].reshape(-1) for box in boxes]
    return np.concatenate(parts) if parts else np.empty(0, dtype=index.dtype)


def test_decompose_matches_numpy_for_random_shapes_and_ranges():
    rng = np.random.default_rng(0)
    for _ in range(2000):
        shape = tuple(int(n) for n in rng.integers(1, 6, size=rng.integers(0, 5)))
        n = math.prod(shape)
        start = int(rng.integers(0, n + 1))
        stop = int(rng.integers(start, n + 1))
        boxes = decompose(shape, start, stop)
        assert np.array_equal(_union_in_order(shape, boxes), np.arange(start, stop)), (shape, start, stop, boxes)
        assert len(boxes) <= max(1, 2 * len(shape) - 1)
        assert all(hi > lo for box in boxes for lo, hi in box), "no empty boxes"


@pytest.mark.parametrize("shape, start, stop, boxes", [
    ((4, 6), 0, 24, [((0, 4), (0, 6))]),
    ((4, 6), 6, 18, [((1, 3), (0, 6))]),
    ((4, 6), 3, 20, [((0, 1), (3, 6)), ((1, 3), (0, 6)), ((3, 4), (0, 2))]),
    ((4, 6), 8, 10, [((1, 2), (2, 4))]),
    ((4, 6), 5, 5, []),
    ((), 0, 1, [()]),
    ((2, 3, 4), 5, 19, [((0, 1), (1, 2), (1, 4)), ((0, 1), (2, 3), (0, 4)), ((1, 2), (0, 1), (0, 4)),
                        ((1, 2), (1, 2), (0, 3))]),
])
def test_decompose_examples(shape, start, stop, boxes):
    assert decompose(shape, start, stop) == boxes


def test_flat_pieces_are_spans_of_the_local_tensor_in_global_coordinates():
    pieces = flat_pieces((2, 3), (4, 0), 2, 5)
    assert pieces == [(((4, 5), (2, 3)), (0, 1)), (((5, 6), (0, 2)), (1, 3))]
    global_values = np.arange(8 * 3).reshape(8, 3)
    local = global_values[4:6].reshape(-1)[2:5]
    for box, (first, end) in pieces:
        assert np.array_equal(global_values[tuple(slice(lo, hi) for lo, hi in box)].reshape(-1), local[first:end])


def test_decompose_refuses_a_range_outside_the_shape():
    with pytest.raises(ValueError, match=r"decompose\(\): range \[3, 25\) is not inside the 24 elements"):
        decompose((4, 6), 3, 25)


@pytest.mark.parametrize("kwargs, error, message", [
    ({"is_flattened": True}, ValueError, "'w' has is_flattened=True but no flattened_range"),
    ({"is_flattened": True, "flattened_range": slice(2, 9)}, ValueError,
     r"flattened_range of 'w' is \[2, 9\), which runs past the 8 elements of its box"),
    ({"is_flattened": True, "flattened_range": slice(5, 2)}, ValueError, r"is \[5, 2\), which runs past"),
    ({"is_flattened": True, "flattened_range": slice(1, 4)}, ValueError,
     r"'w' is flattened with range \[1, 4\), so its local_tensor must be 1-D with 3 elements, got shape \[2\]"),
    ({"is_flattened": True, "flattened_range": (0, 2)}, TypeError,
     r"flattened_range of 'w' must be a slice\(a, b\) of ints \(step 1\), got \(0, 2\)"),
    ({"is_flattened": True, "flattened_range": slice(0, 4, 2)}, TypeError, "must be a slice"),
    ({"is_flattened": "yes", "flattened_range": slice(0, 2)}, TypeError, "is_flattened of 'w' must be a bool"),
    ({"flattened_range": slice(0, 2)}, ValueError, "'w' has flattened_range slice\\(0, 2, None\\) but "
     "is_flattened=False"),
])
def test_sharded_weight_checks_flat_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        dist.ShardedWeight("w", oarlock.ones([2]), (2, 4), (4, 4), (0, 0), **kwargs)


def test_a_flat_weight_keeps_paddles_attributes():
    w = dist.ShardedWeight("w", oarlock.ones([3]), (2, 4), (4, 4), (2, 0), is_flattened=True,
                           flattened_range=slice(1, 4))
    assert w.is_flattened and w.flattened_range == slice(1, 4) and w.local_shape == (2, 4)
    assert "flattened_range=slice(1, 4, None)" in repr(w)
    plain = dist.ShardedWeight("v", oarlock.ones([2]), (2,), (2,), (0,))
    assert plain.is_flattened is False and plain.flattened_range is None


def test_a_key_clashing_with_a_flat_box_name_is_refused(tmp_path):
    state = {"w": dist.ShardedWeight("w", oarlock.ones([5]), (2, 4), (2, 4), (0, 0), is_flattened=True,
                                     flattened_range=slice(2, 7)),
             "w@1": oarlock.ones([1])}
    with pytest.raises(ValueError, match="the shard name 'w@1' is taken twice"):
        dist.save_state_dict(state, tmp_path)


def test_one_process_round_trip_in_place(tmp_path):
    values = np.arange(24, dtype=np.float32).reshape(4, 6)
    dist.save_state_dict({"w": oarlock.to_tensor(values)}, tmp_path)
    target = oarlock.zeros([13])
    weight = dist.ShardedWeight("w", target, (4, 6), (4, 6), (0, 0), is_flattened=True,
                                flattened_range=slice(0, 13))
    rest = dist.ShardedWeight("w", oarlock.zeros([11]), (4, 6), (4, 6), (0, 0), is_flattened=True,
                              flattened_range=slice(13, 24))
    dist.load_state_dict({"w": weight}, tmp_path)
    assert np.array_equal(target.numpy(), values.reshape(-1)[:13])
    dist.load_state_dict({"w": rest}, tmp_path)
    assert np.array_equal(rest.local_tensor.numpy(), values.reshape(-1)[13:])
