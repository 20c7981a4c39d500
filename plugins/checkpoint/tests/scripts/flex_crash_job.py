"""A job that saves a small checkpoint (id 0) and then a large one (id 1), for the test that kills
a rank in the middle of the second save. Each rank first writes its pid to PIDS.<rank>.

    flex_crash_job.py DIR PIDS MEGABYTES_PER_RANK [--async]
"""

import os
import sys

import numpy as np

import oarlock
import oarlock.distributed as dist

directory, pids, megabytes = sys.argv[1], sys.argv[2], int(sys.argv[3])
rank = dist.get_rank()
with open(f"{pids}.{rank}", "w") as f:
    f.write(str(os.getpid()))
small = oarlock.to_tensor(np.full(8, rank + 1.0, np.float32))
dist.save_state_dict({"w": dist.ShardedWeight("w", small, (8,), (8 * dist.get_world_size(),), (8 * rank,))},
                     directory)
big = oarlock.to_tensor(np.ones(megabytes << 18, np.float32))   # 4-byte floats: MB * 2**18 of them
dist.save_state_dict({"big": dist.shard_weight("big", big, 0)}, directory, async_save="--async" in sys.argv)
dist.wait_async_save()
print("second save finished", flush=True)
