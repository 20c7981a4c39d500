"""A 4-rank job for tests/test_cross_mesh.py (`oarlock launch -n 4 cross_mesh_job.py OUT`): a two-stage
computation whose activation moves between meshes of other processes (as a pipeline moves it between stages)
gives one process's loss and gradients.

Stage 0 on mesh A: h = tanh(x @ W0) with x Shard(0); h resharded onto mesh B; stage 1 on B: loss =
mean((h @ W1)^2). Every rank calls loss.backward() (Paddle's convention), so stage 0's ranks receive the
gradient of h from stage 1's. Cases: A = [0, 1] -> B = [2, 3] (disjoint, h moved as Shard(0) and as
Replicate -> Shard(1)), and A = [0, 1] -> B = [1, 2] (rank 1 sends and receives, rank 3 takes no part).
The oracle: the same computation on plain tensors in this process.
Rank 0 writes {"size", "failures": {case: [...]}} as JSON to OUT.
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
R, S0, S1 = dist.Replicate(), dist.Shard(0), dist.Shard(1)
RNG = np.random.default_rng(7)
X, W0, W1 = (RNG.standard_normal(s).astype(np.float32) for s in ((8, 4), (4, 6), (6, 3)))


def one_process():
    w0, w1 = (oarlock.to_tensor(w, stop_gradient=False) for w in (W0, W1))
    loss = oarlock.mean(oarlock.matmul(oarlock.tanh(oarlock.matmul(oarlock.to_tensor(X), w0)), w1) ** 2)
    loss.backward()
    return float(loss.numpy()), w0.grad.numpy(), w1.grad.numpy()


def two_stages(a, b, src, dst):
    x = dist.shard_tensor(X, a, [S0])
    w0 = dist.shard_tensor(W0, a, [R], stop_gradient=False)
    w1 = dist.shard_tensor(W1, b, [R], stop_gradient=False)
    h = oarlock.tanh(oarlock.matmul(x, w0))
    h = dist.reshard(dist.reshard(h, a, src), b, dst)
    loss = oarlock.mean(oarlock.matmul(h, w1) ** 2)
    loss.backward()
    out = {}
    if b.contains(RANK):
        out["loss"] = float(dist.unshard_dtensor(loss).numpy())
        out["w1"] = w1.grad.numpy()
    if a.contains(RANK):
        out["w0"] = w0.grad.numpy()
    elif w0._local_value().size:
        raise AssertionError(f"rank {RANK} outside mesh A holds a piece of W0")
    return out


CASES = {
    "disjoint_s0": ([0, 1], [2, 3], [S0], [S0]),
    "disjoint_r_to_s1": ([0, 1], [2, 3], [R], [S1]),
    "overlapping": ([0, 1], [1, 2], [S0], [S0]),
}


def main(out):
    want_loss, want_w0, want_w1 = one_process()
    failures = {}
    for name, (a, b, src, dst) in CASES.items():
        mine = []
        try:
            got = two_stages(dist.ProcessMesh(a, dim_names=["pp"]), dist.ProcessMesh(b, dim_names=["pp"]), src, dst)
            if "loss" in got and abs(got["loss"] - want_loss) > 1e-6 * abs(want_loss):
                mine.append(f"loss {got['loss']!r} != one process {want_loss!r}")
            for key, want in (("w0", want_w0), ("w1", want_w1)):
                if key in got and not np.allclose(got[key], want, rtol=1e-5, atol=1e-6):
                    mine.append(f"grad of {key} differs by {np.abs(got[key] - want).max():.3g}")
            if RANK in a and "w0" not in got or RANK in b and "w1" not in got:
                mine.append("a stage's rank has no gradient")
        except Exception:
            mine.append(traceback.format_exc(limit=8))
        everyone = COMM.gather(mine, root=0)
        if RANK == 0:
            failures[name] = [f"rank {r}: {f}" for r, fs in enumerate(everyone) for f in fs]
    if RANK == 0:
        with open(out, "w") as f:
            json.dump({"size": COMM.size, "failures": failures}, f)


if __name__ == "__main__":
    main(sys.argv[1])
