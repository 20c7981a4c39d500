"""FlexCheckpoint with flattened shards (Paddle's is_flattened / flattened_range), run by every rank of
an MPI job: `flex_flat_job.py save|load CHECKPOINT LAYOUT OUT.json [--pickle] [--async]`.

Five tensors (float32, float64, int32, 0-d, and one whose boxes are row halves flattened within, as
sharding does inside a tensor-parallel shard) are held under one of four layouts:
  flat    stage-3 style: each box's flattening cut into ceil(n / parts) ranges (the last ranks' may be empty)
  uneven  the whole flattening cut at seeded random points (empty ranges included)
  nd      rows split over the ranks (numpy.array_split), plain n-d shards
  whole   every tensor whole on every rank
A flat range's 1-D tensor is a view of the first elements of a longer, padded tensor (as a stage-3
piece is), so an in-place load must reach that tensor too. `save` writes the checkpoint; `load` fills
tensors holding a sentinel and checks, bit for bit against the seeded values, the loaded tensors
themselves and the padded tensors behind them (padding untouched). Rank 0 writes the failures of every
rank's checks, gathered with raw mpi4py, as JSON.
"""

from __future__ import annotations

import json
import math
import sys

import numpy as np
from mpi4py import MPI

import oarlock
import oarlock.distributed as dist
from oarlock.plugin_api import array_of, wrap

TENSORS = {"a": ("float32", (5, 7, 3)), "b": ("float64", (13,)), "c": ("int32", (4, 6)), "s": ("float32", ()),
           "e": ("float32", (6, 4, 5))}
PAD = 3   # extra elements behind each flat range's 1-D tensor
SENTINEL = {"float32": -7.5, "float64": -7.5, "int32": -7}
CHECKS = ["saved", "values", "in_place", "padding_kept", "metadata"]


def full_value(key: str) -> np.ndarray:
    dtype, shape = TENSORS[key]
    rng = np.random.default_rng(sorted(TENSORS).index(key) + 11)
    if dtype == "int32":
        return rng.integers(-2**31, 2**31 - 1, size=shape, dtype=np.int32)
    return rng.standard_normal(shape).astype(dtype)


def _ranges(n: int, parts: int) -> list:
    chunk = math.ceil(n / parts)
    return [(min(p * chunk, n), min((p + 1) * chunk, n)) for p in range(parts)]


def _uneven(key: str, n: int, parts: int) -> list:
    rng = np.random.default_rng(sorted(TENSORS).index(key) + 101)
    cuts = [0, *sorted(int(c) for c in rng.integers(0, n + 1, size=parts - 1)), n]
    return list(zip(cuts[:-1], cuts[1:]))


def spec(layout: str, key: str, rank: int, size: int):
    """(local_shape, global_offset, flat range or None) this rank holds of `key` under `layout`."""
    shape = TENSORS[key][1]
    zero = (0,) * len(shape)
    if layout == "whole" or (layout == "nd" and not shape):
        return shape, zero, None
    if layout == "nd":
        bounds = np.array_split(np.arange(shape[0]), size)[rank]
        start = int(bounds[0]) if len(bounds) else 0
        return (len(bounds), *shape[1:]), (start, *zero[1:]), None
    if layout == "uneven":
        return shape, zero, _uneven(key, math.prod(shape), size)[rank]
    if key == "e" and size % 2 == 0:   # row halves (a tensor-parallel split), each flattened over size / 2 ranks
        half = shape[0] // 2
        box = (half, *shape[1:])
        return box, (half * (rank % 2), *zero[1:]), _ranges(math.prod(box), size // 2)[rank // 2]
    return shape, zero, _ranges(max(math.prod(shape), 1), size)[rank]


def expected(layout: str, key: str, rank: int, size: int) -> np.ndarray:
    local_shape, offset, flat = spec(layout, key, rank, size)
    box = full_value(key)[tuple(slice(o, o + n) for o, n in zip(offset, local_shape))]
    return box if flat is None else box.reshape(-1)[flat[0]:flat[1]]


def build(layout: str, rank: int, size: int, fill: bool) -> tuple[dict, dict]:
    """({key: ShardedWeight}, {key: (local tensor, padded tensor or None)}): the seeded values, or the sentinel."""
    state, held = {}, {}
    for key, (dtype, shape) in TENSORS.items():
        local_shape, offset, flat = spec(layout, key, rank, size)
        values = expected(layout, key, rank, size)
        if not fill:
            values = np.full(values.shape, SENTINEL[dtype], dtype=dtype)
        if flat is None:
            tensor = oarlock.to_tensor(values)
            held[key] = (tensor, None)
            state[key] = dist.ShardedWeight(key, tensor, local_shape, shape, offset)
            continue
        padded = oarlock.to_tensor(np.concatenate([values, np.full(PAD, SENTINEL[dtype], dtype=dtype)]))
        tensor = wrap(array_of(padded)[:values.size], padded.place)
        held[key] = (tensor, padded)
        state[key] = dist.ShardedWeight(key, tensor, local_shape, shape, offset, is_flattened=True,
                                        flattened_range=slice(*flat))
    return state, held


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def run(phase: str, path: str, layout: str, flags: list) -> dict:
    rank, size = dist.get_rank(), dist.get_world_size()
    failures = {name: [] for name in CHECKS}
    if phase == "save":
        state, _ = build(layout, rank, size, fill=True)
        dist.save_state_dict(state, path, safetensors="--pickle" not in flags, async_save="--async" in flags)
        dist.wait_async_save()
        MPI.COMM_WORLD.Barrier()
        meta = json.loads(open(f"{path}/0.metadata").read())
        for key, (_, shape) in TENSORS.items():
            entry = meta["tensors"][key]
            if entry["global_shape"] != list(shape) or any(len(s["shape"]) != len(shape) for s in entry["shards"]):
                failures["metadata"].append(f"{key}: not stored as n-d boxes of {list(shape)}: {entry}")
            covered = sum(math.prod(s["shape"]) for s in entry["shards"])
            if covered != math.prod(shape):
                failures["metadata"].append(f"{key}: boxes cover {covered} of {math.prod(shape)} elements")
        return failures
    state, held = build(layout, rank, size, fill=False)
    dist.load_state_dict(state, path)
    for key in TENSORS:
        tensor, padded = held[key]
        want = expected(layout, key, rank, size)
        if state[key].local_tensor is not tensor:
            failures["in_place"].append(f"{key}: the state dict's tensor was replaced")
        if not same_bits(np.asarray(tensor.numpy()), want):
            failures["values"].append(f"{key}: rank {rank} loaded {tensor.numpy()!r}, expected {want!r}")
        if padded is not None:
            behind = np.asarray(padded.numpy())
            if not same_bits(behind[:want.size], want):
                failures["in_place"].append(f"{key}: the padded tensor behind the flat range was not written")
            if not (behind[want.size:] == SENTINEL[TENSORS[key][0]]).all():
                failures["padding_kept"].append(f"{key}: the padding behind the flat range changed: "
                                                f"{behind[want.size:]}")
    return failures


def main(phase: str, path: str, layout: str, out: str, flags: list) -> None:
    try:
        failures = run(phase, path, layout, flags)
    except Exception as exc:   # reported by every check, so pytest shows it
        failures = {name: [f"{type(exc).__name__}: {exc}"] for name in CHECKS}
    gathered = MPI.COMM_WORLD.gather(failures, root=0)
    if MPI.COMM_WORLD.rank == 0:
        merged = {name: [f"rank {r}: {f}" for r, report in enumerate(gathered) for f in report[name]]
                  for name in CHECKS}
        with open(out, "w") as f:
            json.dump({"size": MPI.COMM_WORLD.size, "failures": merged}, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:])
