"""Helper for test_launch_restart: `restart_job.py` fails its first runs in two ways, then succeeds.

OARLOCK_RESTART_COUNT 0: rank 1 sleeps instead of joining the second all_reduce (a hang the collective watchdog,
--timeout, turns into an error on rank 0); 1: rank 1 raises ValueError; 2 and later: all ranks succeed.
Every rank prints "restart C world W"."""

import os
import time

import oarlock
import oarlock.distributed as dist

dist.init_parallel_env()
rank, world = dist.get_rank(), dist.get_world_size()
restart = int(os.environ["OARLOCK_RESTART_COUNT"])
print(f"restart {restart} world {world}", flush=True)
dist.all_reduce(oarlock.ones([2]))   # the world's communicator is set up in its first collective
if restart == 0 and rank == 1:
    time.sleep(60)
if restart == 1 and rank == 1:
    raise ValueError("boom on restart 1")
dist.all_reduce(oarlock.ones([2]))
