"""Ranks that disagree on a collective, for test_agreement.py.

Every rank runs every case of CASES in order; in each, rank 1 (the odd one out) passes something
else than the others. A rank records per case the error it raised (type and message) or, if none,
what it got; rank 0 gathers the records through raw mpi4py (not through the code under test) and
writes {"size": n, "cases": {case: [record of rank 0, rank 1, ...]}} as JSON to argv[1]. After a
mismatch the ranks go on with the next case: no data was exchanged, so the group is still in
step, which the last case ("after", matching calls checked against numpy) shows.

argv[2] picks the run:
  cases     every case of CASES;
  uncaught  only "numel", with the error left uncaught (the job must fail, not hang);
  switch    run under OARLOCK_COLLECTIVE_CHECK=0: "reduce_op" unchecked, then checked after
            set_collective_check(True), then unchecked again after set_collective_check(False).
  sampled   the default sampling: matching calls up to collective #100 of the group (past the
            first 64, all checked), "reduce_op" there (not due: unchecked), again with
            set_collective_check(True, every_call=True) (checked), then back to sampling and
            matching calls up to #128, "reduce_op" there (due: checked).
"""

from __future__ import annotations

import json
import sys

import numpy as np

import oarlock
import oarlock.distributed as dist

CASES: dict = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def ones(n, dtype="float32"):
    return oarlock.ones([n], dtype=dtype)


@case
def numel(rank, n, odd):
    x = ones(3 if odd else 2)
    dist.all_reduce(x)
    return x


@case
def dtype(rank, n, odd):
    x = ones(2, "float64" if odd else "float32")
    dist.all_reduce(x)
    return x


@case
def barrier(rank, n, odd):
    if odd:
        return dist.barrier()
    x = ones(2)
    dist.all_reduce(x)
    return x


@case
def broadcast_root(rank, n, odd):
    x = ones(2) * rank
    dist.broadcast(x, src=1 if odd else 0)
    return x


@case
def reduce_op(rank, n, odd):
    x = ones(2) * (rank + 1)
    dist.all_reduce(x, op=dist.ReduceOp.MAX if odd else dist.ReduceOp.SUM)
    return x


@case
def all_gather(rank, n, odd):
    out = []
    dist.all_gather(out, ones(3 if odd else 2))
    return out


@case
def reduce_root(rank, n, odd):
    x = ones(2)
    dist.reduce(x, dst=1 if odd else 0)
    return x


@case
def reduce_scatter_op(rank, n, odd):
    out = ones(1)
    dist.reduce_scatter(out, [ones(1) for _ in range(n)], op=dist.ReduceOp.PROD if odd else dist.ReduceOp.SUM)
    return out


@case
def gather(rank, n, odd):
    out = [] if rank == 0 else None
    dist.gather(ones(3 if odd else 2), out, dst=0)
    return out


@case
def scatter(rank, n, odd):
    out = ones(3 if odd else 2)
    dist.scatter(out, [ones(2) for _ in range(n)] if rank == 0 else None, src=0)
    return out


@case
def alltoall(rank, n, odd):
    # rank 1 expects 3 elements from rank 0, which sends 2
    out = [ones(3 if odd and peer == 0 else 2) for peer in range(n)]
    dist.alltoall(out, [ones(2) for _ in range(n)])
    return out


@case
def alltoall_single(rank, n, odd):
    # rank 1 splits its 2n rows unevenly, the others expect 2 rows from everyone
    splits = [1, 3] + [2] * (n - 2) if odd else None
    out = ones(2 * n)
    dist.alltoall_single(out, ones(2 * n), in_split_sizes=splits)
    return out


def _p2p(rank, sent, received):
    """Rank 0 sends `sent`, rank 1 receives into `received`; other ranks sit it out."""
    if rank == 0:
        dist.send(sent, dst=1)
        return None
    if rank == 1:
        dist.recv(received, src=0)
        return received
    return None


@case
def recv_dtype(rank, n, odd):
    return _p2p(rank, ones(3, "float64"), ones(3))


@case
def recv_shorter(rank, n, odd):
    return _p2p(rank, ones(3), ones(2))


@case
def recv_longer(rank, n, odd):
    return _p2p(rank, ones(2), ones(3))


@case
def after(rank, n, odd):
    """Matching calls after all the mismatches: still in step, and right (checked by the caller)."""
    x = oarlock.to_tensor(np.arange(4, dtype=np.float64) * (rank + 1))
    dist.all_reduce(x)
    gathered = []
    dist.all_gather(gathered, oarlock.to_tensor(np.full([2], rank, dtype=np.int32)))
    return [x, *gathered]


def _plain(value):
    if value is None:
        return None
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value.numpy().tolist()


def run(name, rank, n) -> dict:
    try:
        got = CASES[name](rank, n, rank == 1)
    except Exception as exc:
        return {"error": type(exc).__name__, "message": str(exc)}
    return {"error": None, "result": _plain(got)}


def main(out_path: str, mode: str) -> int:
    dist.init_parallel_env()
    rank, n = dist.get_rank(), dist.get_world_size()
    if mode == "uncaught":
        numel(rank, n, rank == 1)
        return 0
    if mode == "switch":
        records = {"unchecked": run("reduce_op", rank, n)}
        records["previous"] = dist.set_collective_check(True)
        records["checked"] = run("reduce_op", rank, n)
        dist.set_collective_check(False)
        records["unchecked_again"] = run("reduce_op", rank, n)
    elif mode == "sampled":
        from oarlock_xccl import agreement, watchdog   # white box: the group's collective count

        def advance_to(sequence):   # matching calls until the next collective is number `sequence`
            while watchdog._entered.get(0, 0) + 1 < sequence:
                dist.all_reduce(ones(1))

        advance_to(100)
        records = {"not_due": run("reduce_op", rank, n), "due_100": [agreement.is_due(100)]}
        dist.set_collective_check(True, every_call=True)
        records["every_call"] = run("reduce_op", rank, n)
        dist.set_collective_check(True, every_call=False)
        advance_to(2 * agreement.EVERY)
        records["due"] = run("reduce_op", rank, n)
    else:
        records = {name: run(name, rank, n) for name in CASES}
    from mpi4py import MPI
    everything = MPI.COMM_WORLD.gather(records, root=0)
    if rank == 0:
        with open(out_path, "w") as fh:
            json.dump({"size": n, "cases": {key: [r[key] for r in everything] for key in records}}, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
