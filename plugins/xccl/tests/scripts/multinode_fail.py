"""Helper for test_multinode: every rank joins the world and checks it with an all_reduce; then global
rank argv[1] raises while the others wait in a barrier (which never completes)."""

import sys

import oarlock
import oarlock.distributed as dist

dist.init_parallel_env()
rank, world = dist.get_rank(), dist.get_world_size()
total = oarlock.to_tensor([float(rank)])
dist.all_reduce(total)
print(f"rank {rank} of {world} sum {float(total):g}", flush=True)
if rank == int(sys.argv[1]):
    raise ValueError(f"boom on rank {rank}")
dist.barrier()
