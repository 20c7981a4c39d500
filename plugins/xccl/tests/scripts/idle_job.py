"""A rank that waits on a late peer, for test_waiting.py: rank 0 sleeps argv[1] seconds before each
of an all_reduce and a send; rank 1 enters the all_reduce, then the recv, at once, and prints
"WAITED <what> wall=<seconds> cpu=<seconds>" for each, its process CPU time (user + system, all
threads) over the wait."""

import resource
import sys
import time

import numpy as np

import oarlock
import oarlock.distributed as dist


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def timed(what, fn):
    wall, cpu = time.monotonic(), cpu_seconds()
    fn()
    print(f"WAITED {what} wall={time.monotonic() - wall:.3f} cpu={cpu_seconds() - cpu:.3f}", flush=True)


late_s = float(sys.argv[1])
dist.init_parallel_env()
rank = dist.get_rank()
x = oarlock.to_tensor(np.arange(3, dtype=np.float32))
dist.all_reduce(x)                      # start-up (communicators, the agreement check's) outside the timing
if rank == 0:
    time.sleep(late_s)
    dist.all_reduce(x)
    time.sleep(late_s)
    dist.send(x, dst=1)
else:
    timed("all_reduce", lambda: dist.all_reduce(x))
    timed("recv", lambda: dist.recv(x, src=0))
    np.testing.assert_array_equal(x.numpy(), np.arange(3, dtype=np.float32) * 4)
