"""A 4-rank job for tests/test_reshard.py (`oarlock launch -n 4 reshard_job.py OUT`): the reshard matrix.

On the 1-d mesh [0, 1, 2, 3] and the 2-d mesh [[0, 1], [2, 3]], every pair of placement lists built from
R, S0, S1 and P (on the 2-d mesh this includes the co-sharded [S0, S0]) reshards float32 tensors of shape
(8, 12) and the uneven (7, 5). Values are small integers, so sums of Partial pieces are exact and every
comparison is bit for bit. The oracle is numpy: a rank's piece is cut from the whole with ceil-sized chunks
along the mesh dimensions in order, outer first; a Partial tensor is checked by summing the pieces of the
ranks that differ only on its Partial mesh dimensions (gathered with raw mpi4py, not the code under test).
Gradients: loss = sum(local * W's piece), so every rank seeds the gradient W laid out as the output (Partial
read as Replicate); the source's local gradient must be W's piece for the source layout.
Rank 0 writes {"size", "counts", "failures": {check: [..]}} as JSON to OUT.
"""

from __future__ import annotations

import itertools
import json
import sys
import traceback

import numpy as np
from mpi4py import MPI

import oarlock
import oarlock.distributed as dist

COMM = MPI.COMM_WORLD
RANK = COMM.rank
R, S0, S1, P = dist.Replicate(), dist.Shard(0), dist.Shard(1), dist.Partial()
MESH1 = dist.ProcessMesh([0, 1, 2, 3], dim_names=["x"])
MESH2 = dist.ProcessMesh([[0, 1], [2, 3]], dim_names=["x", "y"])
SHAPES = [(8, 12), (7, 5)]


def expected_piece(whole: np.ndarray, mesh_shape, placements, coord) -> np.ndarray:
    piece = whole
    for axis, p in enumerate(placements):
        if p.is_shard():
            d, n = p.get_dim(), mesh_shape[axis]
            chunk = -(-piece.shape[d] // n)
            index = [slice(None)] * piece.ndim
            index[d] = slice(coord[axis] * chunk, (coord[axis] + 1) * chunk)
            piece = piece[tuple(index)]
    return piece


def coord_of(mesh) -> list:
    return [int(i) for i in np.argwhere(mesh.mesh == RANK)[0]]


def partial_pieces(whole: np.ndarray, mesh, placements, rng) -> np.ndarray:
    """This rank's piece of a tensor laid out by `placements` with Partial: integer pieces that sum, over the
    ranks that differ on the Partial mesh dims, to the non-partial piece (same draws on every rank)."""
    base = expected_piece(whole, mesh.shape, placements, coord_of(mesh))
    partial_axes = [a for a, p in enumerate(placements) if p.is_partial()]
    count = int(np.prod([mesh.shape[a] for a in partial_axes]))
    draws = rng.integers(-5, 6, size=(count, *whole.shape)).astype(np.float32)   # same on every rank
    coord = coord_of(mesh)
    index = int(np.ravel_multi_index([coord[a] for a in partial_axes], [mesh.shape[a] for a in partial_axes]))
    others = expected_piece(draws[index], mesh.shape, placements, coord) if index else None
    if index:
        return others
    rest = sum(expected_piece(draws[i], mesh.shape, placements, coord) for i in range(1, count))
    return base - rest


def represented(local: np.ndarray, mesh, placements) -> np.ndarray:
    """The sum of the local pieces over the Partial mesh dims (through raw MPI)."""
    everything = COMM.allgather((coord_of(mesh), local))
    partial_axes = [a for a, p in enumerate(placements) if p.is_partial()]
    mine = coord_of(mesh)
    same = [arr for coord, arr in everything
            if all(coord[a] == mine[a] for a in range(mesh.ndim) if a not in partial_axes)]
    return sum(same[1:], same[0].copy())


def layouts(mesh) -> list:
    return [list(p) for p in itertools.product([R, S0, S1, P], repeat=mesh.ndim)]


def make(whole, mesh, placements, rng):
    if any(p.is_partial() for p in placements):
        local = oarlock.to_tensor(partial_pieces(whole, mesh, placements, rng))
        local.stop_gradient = False
        return dist.dtensor_from_local(local, mesh, placements, shape=list(whole.shape)), local
    x = dist.shard_tensor(oarlock.to_tensor(whole), mesh, placements)
    x.stop_gradient = False
    return x, x._local_value()


def name(placements) -> str:
    return "[" + ",".join({"Replicate": "R", "Partial": "P"}.get(type(p).__name__, f"S{getattr(p, 'dim', '')}")
                          if not p.is_shard() else f"S{p.get_dim()}" for p in placements) + "]"


def check_matrix(failures: list, counts: dict) -> None:
    rng = np.random.default_rng(7)
    for mesh, shape in itertools.product([MESH1, MESH2], SHAPES):
        whole = rng.integers(-20, 21, size=shape).astype(np.float32)
        weight = rng.integers(-3, 4, size=shape).astype(np.float32)
        coord = coord_of(mesh)
        for src, dst in itertools.product(layouts(mesh), layouts(mesh)):
            what = f"mesh {mesh.shape} {shape} {name(src)}->{name(dst)}"
            x, x_local = make(whole, mesh, src, np.random.default_rng(11))
            y = dist.reshard(x, mesh, dst)
            local = y._local_value().numpy()
            counts["reshards"] = counts.get("reshards", 0) + 1
            if y.placements != dst or y.shape != list(shape) or y.process_mesh != mesh:
                failures.append(f"{what}: result is {y.placements} {y.shape} on {y.process_mesh}")
            want = expected_piece(whole, mesh.shape, dst, coord)
            if not any(p.is_partial() for p in dst):
                if local.shape != want.shape or not np.array_equal(local, want):
                    failures.append(f"{what}: local {local.shape} != expected slice {want.shape}")
            else:
                got = represented(local, mesh, dst)
                if got.shape != want.shape or not np.array_equal(got, want):
                    failures.append(f"{what}: partial pieces sum to the wrong tensor")
                if not any(p.is_partial() for p in src):   # Paddle's r_to_p: index 0 keeps, the others zeros
                    keeps = all(coord[a] == 0 for a, p in enumerate(dst) if p.is_partial())
                    if not np.array_equal(local, want if keeps else np.zeros_like(want)):
                        failures.append(f"{what}: R->P pieces are not (value at index 0, zeros elsewhere)")
            # unshard_dtensor depends on the layout only (the pieces were checked above): once per destination
            if src == layouts(mesh)[0] and not np.array_equal(dist.unshard_dtensor(y).numpy(), whole):
                failures.append(f"{what}: unshard_dtensor differs from the whole tensor")
            # gradient: every rank seeds W laid out as the output (Partial read as Replicate)
            seed = [R if p.is_partial() else p for p in dst]
            w_piece = oarlock.to_tensor(np.ascontiguousarray(expected_piece(weight, mesh.shape, seed, coord)))
            (y._local_value() * w_piece).sum().backward()
            grad = x_local.grad
            want_grad = expected_piece(weight, mesh.shape, [R if p.is_partial() else p for p in src], coord)
            if grad is None or not np.array_equal(grad.numpy(), want_grad):
                failures.append(f"{what}: source gradient {None if grad is None else grad.numpy().ravel()[:4]} "
                                f"!= W's piece {want_grad.ravel()[:4]}")


def check_other_reductions(failures: list, counts: dict) -> None:
    """Partial(kRedMax / kRedMin / kRedAvg) sources become R and S0 with the matching reduction."""
    whole = np.arange(-48, 48, dtype=np.float32).reshape(8, 12)
    offset = np.float32(RANK - 1.5) * 2     # sums to 0 over the 4 ranks: the average is exact
    pieces = {dist.ReduceType.kRedMax: whole - 5 * (RANK != 0), dist.ReduceType.kRedMin: whole + 5 * (RANK != 3),
              dist.ReduceType.kRedAvg: whole + offset}
    for reduce_type, piece in pieces.items():
        for dst in ([R], [S0], [S1]):
            x = dist.dtensor_from_local(oarlock.to_tensor(piece.astype(np.float32)), MESH1, [dist.Partial(reduce_type)])
            y = dist.reshard(x, MESH1, dst)
            want = expected_piece(whole, MESH1.shape, dst, coord_of(MESH1))
            if not np.array_equal(y._local_value().numpy(), want):
                failures.append(f"Partial({reduce_type.name}) -> {name(dst)}: wrong piece")
            counts["other reductions"] = counts.get("other reductions", 0) + 1


def check_between_meshes(failures: list, counts: dict) -> None:
    whole = np.arange(96, dtype=np.float32).reshape(8, 12)
    # the same processes in another shape: [S0] on 4 ranks is [S0, S0] on 2 x 2 (no data moves)
    x = dist.shard_tensor(oarlock.to_tensor(whole), MESH1, [S0])
    y = dist.reshard(x, MESH2, [S0, S0])
    if y._local_value() is not x._local_value():
        failures.append("[S0] on 4 ranks -> [S0, S0] on 2x2 moved data although the pieces match")
    for src_mesh, src, dst_mesh, dst in [(MESH1, [S1], MESH2, [S0, R]), (MESH2, [S1, P], MESH1, [S0]),
                                         (MESH1, [S0], dist.ProcessMesh([3, 2, 1, 0]), [S1])]:
        x, _ = make(whole, src_mesh, src, np.random.default_rng(3))
        y = dist.reshard(x, dst_mesh, dst)
        want = expected_piece(whole, dst_mesh.shape, dst, coord_of(dst_mesh))
        if not np.array_equal(y._local_value().numpy(), want):
            failures.append(f"{name(src)} on {src_mesh.shape} -> {name(dst)} on {dst_mesh}: wrong piece")
        counts["between meshes"] = counts.get("between meshes", 0) + 1
    # the same shape over other processes: [0, 1] -> [2, 3] (pieces sent coordinate to coordinate)
    low, high = dist.ProcessMesh([0, 1]), dist.ProcessMesh([2, 3])
    x = dist.shard_tensor(oarlock.to_tensor(whole), low, [S0])
    y = dist.reshard(x, high, [S1])
    local = y._local_value().numpy()
    if RANK in (2, 3):
        want = expected_piece(whole, [2], [S1], [RANK - 2])
        if not np.array_equal(local, want):
            failures.append("[S0] on [0, 1] -> [S1] on [2, 3]: wrong piece")
    elif local.size != 0:
        failures.append(f"rank {RANK} outside mesh [2, 3] holds a non-empty piece {local.shape}")
    counts["between meshes"] += 1
    # overlapping processes: [0, 1] -> [1, 2] (rank 1 sends its piece to 2 and receives rank 0's)
    y = dist.reshard(x, dist.ProcessMesh([1, 2]), [S0])
    if RANK in (1, 2) and not np.array_equal(y._local_value().numpy(),
                                            expected_piece(whole, [2], [S0], [RANK - 1])):
        failures.append("[S0] on [0, 1] -> [S0] on [1, 2]: wrong piece")
    counts["between meshes"] += 1


def expect_value_error(failures, what, parts, fn):
    try:
        fn()
    except ValueError as error:
        missing = [p for p in parts if p not in str(error)]
        if missing:
            failures.append(f"{what}: message lacks {missing}: {error}")
    except Exception as error:  # noqa: BLE001 - another kind of error is the failure reported
        failures.append(f"{what}: {type(error).__name__}: {error}")
    else:
        failures.append(f"{what}: no error")


def check_bad_input(failures: list, counts: dict) -> None:
    t = oarlock.to_tensor(np.ones((4, 4), np.float32))
    x = dist.shard_tensor(t, MESH2, [S0, R])
    expect_value_error(failures, "placements length", ["reshard()", "placements", "3 entries", "2 dimensions"],
                       lambda: dist.reshard(x, MESH2, [R, R, R]))
    expect_value_error(failures, "shard beyond rank", ["shard_tensor()", "Shard(dim=2)", "2 dimensions"],
                       lambda: dist.shard_tensor(t, MESH1, [dist.Shard(2)]))
    expect_value_error(failures, "mesh sizes", ["reshard()", "no rule", "[2, 2]", "[3]"],
                       lambda: dist.reshard(x, dist.ProcessMesh([0, 1, 2]), [R]))
    counts["bad input"] = 3


COLLECTIVES = ["all_gather", "alltoall", "reduce_scatter", "all_reduce", "gather", "scatter", "broadcast", "reduce",
               "send", "recv", "isend", "irecv"]


def counted_calls(fn, extra=()) -> dict:
    """{collective: calls} while fn() runs (oarlock.distributed's functions wrapped for the count)."""
    calls: dict = {}
    saved = {c: getattr(dist, c) for c in [*COLLECTIVES, *extra]}

    def wrap(c, original):
        def counting(*args, **kwargs):
            calls[c] = calls.get(c, 0) + 1
            return original(*args, **kwargs)
        return counting
    for c, original in saved.items():
        setattr(dist, c, wrap(c, original))
    try:
        fn()
    finally:
        for c, original in saved.items():
            setattr(dist, c, original)
    return calls


def check_collectives(failures: list, counts: dict) -> None:
    """The cheapest collective for each transition: one all-gather, all-to-all, reduce-scatter or all-reduce,
    or none (a local slice); never a gather to one rank."""
    whole = np.arange(96, dtype=np.float32).reshape(8, 12)
    cases = [(MESH1, [S0], [R], {"all_gather": 1}), (MESH1, [R], [S1], {}), (MESH1, [S0], [S1], {"alltoall": 1}),
             (MESH1, [P], [R], {"all_reduce": 1}), (MESH1, [P], [S0], {"reduce_scatter": 1}), (MESH1, [R], [P], {}),
             (MESH2, [S0, S0], [S0, R], {"all_gather": 1}), (MESH2, [S0, R], [S0, S0], {}),
             (MESH2, [S0, S1], [S0, S0], {"alltoall": 1}), (MESH2, [P, P], [S1, S1], {"reduce_scatter": 2}),
             (MESH2, [S0, P], [S0, R], {"all_reduce": 1}), (MESH2, [R, S1], [R, S0], {"alltoall": 1})]
    for mesh, src, dst, want in cases:
        x, _ = make(whole, mesh, src, np.random.default_rng(5))
        calls = counted_calls(lambda x=x, mesh=mesh, dst=dst: dist.reshard(x, mesh, dst))
        if calls != want:
            failures.append(f"{name(src)}->{name(dst)} on {mesh.shape}: collectives {calls}, want {want}")
    counts["collective plans"] = len(cases)
    # the groups of a mesh dimension are cached: the same reshards again create none
    repeat = counted_calls(lambda: [dist.reshard(make(whole, mesh, src, np.random.default_rng(5))[0], mesh, dst)
                                    for mesh, src, dst, _ in cases], extra=["new_group"])
    if repeat.get("new_group"):
        failures.append(f"repeated reshards created {repeat['new_group']} new groups")


CHECKS = {"matrix": check_matrix, "collectives": check_collectives, "other_reductions": check_other_reductions,
          "between_meshes": check_between_meshes,
          "bad_input": check_bad_input}


def main(out: str) -> None:
    dist.init_parallel_env()
    counts: dict = {}
    failures = {}
    for check, fn in CHECKS.items():
        failures[check] = []
        try:
            fn(failures[check], counts)
        except Exception:  # noqa: BLE001 - recorded as the check's failure
            failures[check].append(traceback.format_exc())
    gathered = COMM.gather({k: [f"rank {RANK}: {f}" for f in v] for k, v in failures.items()}, root=0)
    if RANK == 0:
        merged = {k: sum((g[k] for g in gathered), []) for k in CHECKS}
        with open(out, "w") as f:
            json.dump({"size": COMM.size, "counts": counts, "failures": merged}, f)


if __name__ == "__main__":
    main(sys.argv[1])
