"""A 4-rank job for tests/test_pipeline.py (`oarlock launch -n 4 pp_gpt_job.py OUT`): the GPT of auto_gpt_job.py
under parallelize with pp_config (two pipeline stages) equals one process.

Runs, 20 AdamW steps each on the same batches, every step's loss within 1e-5 relative of one process's:
  pp2_dp2 -- mesh [[0, 1], [2, 3]] named ["pp", "dp"], split_spec "blocks" (blocks.0 and the embeddings on
             ranks 0/1, blocks.1, ln_f and head on ranks 2/3), dp_config; the batch Shard(0) over dp;
  pp2_mp2 -- mesh named ["pp", "mp"], split_spec {"blocks.0": SplitPoint.END}, the column / row parallel
             mp_config of auto_gpt_job's parallelize run on each stage; the batch replicated.
The inputs go on the first stage's mesh, the labels on the last's; every rank calls loss.backward(). Each rank
also checks that it holds pieces only of its own stage's parameters and that their final values equal one
process's. Rank 0 writes {"size", "losses": {run: [...]}, "failures": {run: [...]}} as JSON to OUT.
"""

from __future__ import annotations

import sys

from auto_gpt_job import STEPS, batch, new_model, new_optimizer, run_and_report
from mpi4py import MPI

import oarlock
import oarlock.distributed as dist
import oarlock.nn.functional as F

COMM = MPI.COMM_WORLD
RANK = COMM.rank
R = dist.Replicate()


def pp_train(model, optimizer, mesh, batch_placements) -> list:
    first, last = mesh.get_mesh_with_dim("pp", 0), mesh.get_mesh_with_dim("pp", 1)
    losses = []
    for step in range(STEPS):
        tokens, labels = (oarlock.to_tensor(a) for a in batch(step))
        tokens = dist.shard_tensor(tokens, first, batch_placements)
        labels = dist.shard_tensor(labels, last, batch_placements)
        loss = F.cross_entropy(model(tokens), labels)
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
        mine = float(dist.unshard_dtensor(loss).numpy()) if loss._is_initialized() else None
        losses.append(next(v for v in COMM.allgather(mine) if v is not None))
    return losses


def my_params(model) -> dict:
    """The unsharded parameters of this rank's stage; a piece of another stage's is an error."""
    out = {}
    for key, v in model.state_dict().items():
        if v._is_initialized():
            out[key] = dist.unshard_dtensor(v).numpy()
        elif v._local_value().size:
            raise AssertionError(f"rank {RANK} holds a piece of {key}, which is on mesh {v.process_mesh}")
    return out


def run_pp2_dp2():
    mesh = dist.ProcessMesh([[0, 1], [2, 3]], dim_names=["pp", "dp"])
    model = new_model()
    model, optimizer = dist.parallelize(model, new_optimizer(model), mesh=mesh, config={
        "pp_config": {"split_spec": "blocks"}, "dp_config": {"sharding_level": 0}})
    return pp_train(model, optimizer, mesh, [dist.Shard(0)]), my_params(model)


def run_pp2_mp2():
    mesh = dist.ProcessMesh([[0, 1], [2, 3]], dim_names=["pp", "mp"])
    plan = {f"blocks.*.{n}": dist.ColWiseParallel() for n in ("attn.qkv", "fc1")}
    plan.update({f"blocks.*.{n}": dist.RowWiseParallel() for n in ("attn.out", "fc2")})
    plan["head"] = dist.ColWiseParallel()
    model = new_model()
    model, optimizer = dist.parallelize(model, new_optimizer(model), mesh=mesh, config={
        "pp_config": {"split_spec": {"blocks.0": dist.SplitPoint.END}}, "mp_config": {"parallelize_plan": plan}})
    return pp_train(model, optimizer, mesh, [R]), my_params(model)


RUNS = {"pp2_dp2": run_pp2_dp2, "pp2_mp2": run_pp2_mp2}


def main(out):
    run_and_report(RUNS, out, every_parameter=False)


if __name__ == "__main__":
    main(sys.argv[1])
