"""oarlock-autoparallel: Paddle 3.2's auto-parallel API (paddle.distributed.ProcessMesh, Shard / Replicate /
Partial, shard_tensor, reshard, dtensor_from_fn / _from_local / _to_local, unshard_dtensor, shard_layer,
shard_optimizer, shard_dataloader, parallelize, local_map) and a parallel planner (`oarlock plan`).

A distributed tensor is a DistTensor (dtensor.py), an oarlock.Tensor subclass holding this rank's local piece,
its ProcessMesh, its placements and the global shape; the core dispatcher hands every op called on one to
`DistTensor.__oarlock_dispatch__`, which applies the op's SPMD rule (spmd.py)."""
