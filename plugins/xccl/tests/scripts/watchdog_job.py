"""A rank that skips a collective, for test_watchdog.py: argv = skipping rank, what it does instead
("sleep": computes for 60 s; "reshape": passes a tensor of the same size but another shape, which
OARLOCK_DISTRIBUTED_DEBUG=1 catches; "p2p": rank 0 waits for a message the skipping rank never
sends). The waiting ranks print the watchdog's error
after "WATCHDOG after <seconds>:" and re-raise it, which fails the job."""

import sys
import time

import numpy as np

import oarlock
import oarlock.distributed as dist

skipper, mode = int(sys.argv[1]), sys.argv[2]
dist.init_parallel_env()
rank = dist.get_rank()
x = oarlock.to_tensor(np.ones(3, np.float32))
dist.all_reduce(x)                      # everyone: collective #1
start = time.monotonic()
try:
    if rank == skipper:
        if mode == "reshape":
            dist.all_reduce(x.reshape([1, 3]))
        time.sleep(60)
    elif mode == "p2p":
        if rank == 0:
            dist.recv(x, src=skipper)
        else:
            time.sleep(60)
    else:
        dist.all_reduce(x)              # collective #2, which the skipping rank never enters
except (dist.CollectiveTimeoutError, RuntimeError) as exc:
    print(f"WATCHDOG after {time.monotonic() - start:.2f}: {exc}", flush=True)
    raise
