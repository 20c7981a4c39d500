"""A 4-rank job for tests/test_like.py (`oarlock launch -n 4 like_job.py OUT`): zeros_like / full_like /
randn_like of a tensor sharded on the 2x2 mesh [[0, 1], [2, 3]] give each rank its piece of the result.

x (8, 12) is laid out [Shard(0), Shard(1)] (and [Partial(), Shard(1)]); the oracle is numpy: each rank's piece
of the full result, cut with ceil-sized chunks; randn_like's whole equals oarlock.randn((8, 12)) drawn in this
process after the same seed. Rank 0 writes {"size", "failures": [...]} as JSON to OUT.
"""

from __future__ import annotations

import json
import sys
import traceback

import numpy as np
from mpi4py import MPI

import oarlock
import oarlock.distributed as dist

COMM = MPI.COMM_WORLD
RANK = COMM.rank
MESH = dist.ProcessMesh([[0, 1], [2, 3]], dim_names=["x", "y"])
SHAPE = (8, 12)


def piece(whole):
    i, j = divmod(RANK, 2)
    return whole[i * 4:(i + 1) * 4, j * 6:(j + 1) * 6]


def check():
    failures = []
    x = dist.shard_tensor(np.arange(96, dtype=np.float32).reshape(SHAPE), MESH, [dist.Shard(0), dist.Shard(1)])
    for name, y, want in [("zeros_like", oarlock.zeros_like(x), np.zeros(SHAPE, np.float32)),
                          ("full_like", oarlock.full_like(x, 3.0), np.full(SHAPE, 3.0, np.float32))]:
        if y.placements != x.placements or not np.array_equal(y._local_value().numpy(), piece(want)):
            failures.append(f"{name}: placements {y.placements}, local {y._local_value().shape}")
    oarlock.seed(11)
    y = oarlock.randn_like(x)
    oarlock.seed(11)
    want = oarlock.randn(SHAPE).numpy()
    if not np.array_equal(y._local_value().numpy(), piece(want)):
        failures.append("randn_like: this rank's piece is not its piece of one process's draw")
    p = dist.shard_tensor(np.ones(SHAPE, np.float32), MESH, [dist.Partial(), dist.Shard(1)])
    whole = dist.unshard_dtensor(oarlock.ones_like(p)).numpy()
    if not np.array_equal(whole, np.ones(SHAPE, np.float32)):
        failures.append(f"ones_like of a Partial tensor: whole {whole.ravel()[:4]}..., want ones")
    return failures


def main(out):
    try:
        mine = check()
    except Exception:
        mine = [traceback.format_exc(limit=8)]
    everyone = COMM.gather(mine, root=0)
    if RANK == 0:
        with open(out, "w") as f:
            json.dump({"size": COMM.size, "failures": [f"rank {r}: {m}" for r, ms in enumerate(everyone)
                                                       for m in ms]}, f)


if __name__ == "__main__":
    main(sys.argv[1])
