"""The planner's communication probe, run on N ranks by `oarlock launch -n N` (planner_probe starts it):

    python -m oarlock.cli launch -n N planner_comm_job.py OUT.json REPS

times all_reduce and all_gather over groups of every size g dividing N (consecutive ranks), send/recv between
rank pairs, and one transformer block's forward + backward computed by every rank at once (against the same
block timed alone, this gives how much N ranks slow each other's compute on this machine). Rank 0 writes the
median seconds of each measurement to OUT.json.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import oarlock
import oarlock.distributed as dist

SIZES = (4096, 262144, 2097152)   # bytes per rank: latency-bound to bandwidth-bound


def _median_time(run, reps: int, group=None) -> float:
    times = []
    for _ in range(reps + 1):
        dist.barrier(group)
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:])


def _collectives(reps: int) -> dict:
    world, rank = dist.get_world_size(), dist.get_rank()
    found = {"all_reduce": {}, "all_gather": {}}
    for g in (g for g in range(2, world + 1) if world % g == 0):
        groups = [dist.new_group(list(range(s, s + g))) for s in range(0, world, g)]   # every rank creates all
        mine = groups[rank // g]
        for size in SIZES:
            x = oarlock.ones([size // 4], dtype="float32")
            ar = _median_time(lambda x=x, mine=mine: dist.all_reduce(x, group=mine), reps, mine)
            gathered: list = []
            ag = _median_time(lambda x=x, mine=mine, out=gathered: (out.clear(), dist.all_gather(out, x, group=mine)),
                              reps, mine)
            found["all_reduce"].setdefault(str(g), []).append([size, ar])
            found["all_gather"].setdefault(str(g), []).append([size, ag])
    return found


def _p2p(reps: int) -> list:
    world, rank = dist.get_world_size(), dist.get_rank()
    if world < 2:
        return []
    peer = rank ^ 1 if (rank ^ 1) < world else None
    found = []
    for size in SIZES:
        x = oarlock.ones([size // 4], dtype="float32")

        def ping_pong(x=x):
            if peer is None:
                return
            if rank % 2 == 0:
                dist.send(x, dst=peer)
                dist.recv(x, src=peer)
            else:
                dist.recv(x, src=peer)
                dist.send(x, dst=peer)
        found.append([size, _median_time(ping_pong, reps) / 2])   # one way
    return found


def main(out: str, reps: int) -> None:
    from oarlock_autoparallel.planner_compute import measure_block
    from oarlock_autoparallel.planner_probe import CONTENTION_SPEC, CONTENTION_ROWS

    dist.init_parallel_env()
    report = {"ranks": dist.get_world_size(), **_collectives(reps), "p2p": _p2p(reps)}
    dist.barrier()
    together = measure_block(CONTENTION_SPEC, CONTENTION_ROWS, 1, reps).seconds   # all ranks compute at once
    times: list = []
    dist.all_gather_object(times, together)
    report["concurrent_block_s"] = statistics.median(times)
    if dist.get_rank() == 0:
        with open(out, "w") as fh:
            json.dump(report, fh)
    dist.barrier()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
