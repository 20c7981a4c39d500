"""The planner's communication probe, run on N ranks by `oarlock launch -n N` (planner_probe starts it):

    python -m oarlock.cli launch -n N planner_comm_job.py OUT.json REPS [SPEC.json]

times all_reduce and all_gather over groups of every size g dividing N (consecutive ranks), send/recv between
rank pairs, and compute done by every rank at once: one small transformer block (against the same block timed
alone, the contention factor), and, given SPEC.json ({"model": ModelSpec fields, "shapes": [[rows, mp], ...]}),
the block and the ends at every shape the layouts need (their step's compute as the ranks really do it, sharing
the cores). Then the cost of a synchronising collective between compute segments (tensor parallelism's
all-reduces): SEGMENTS rounds of (a segment of compute, an all-reduce over a group of g) timed against the
segments alone and the all-reduces alone; the difference per all-reduce is the wait for the slowest rank of the
group, which back-to-back collectives do not show when ranks time-share cores. Rank 0 writes the median seconds
of each measurement to OUT.json.
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


SEGMENTS = 8   # compute segments (each followed by an all-reduce) per timed round of the synchronisation probe


def _everyone(value: float) -> float:
    """The median over the ranks of a per-rank measurement."""
    times: list = []
    dist.all_gather_object(times, value)
    return statistics.median(times)


def _concurrent_shapes(spec_file: str, reps: int) -> dict:
    """{"rows,mp": [block seconds, ends seconds]} with every rank computing the same shape at once."""
    from oarlock_autoparallel.planner_compute import measure_block, measure_ends
    from oarlock_autoparallel.planner_model import ModelSpec

    with open(spec_file) as fh:
        request = json.load(fh)
    spec, found = ModelSpec(**request["model"]), {}
    for rows, mp in request["shapes"]:
        dist.barrier()
        block = _everyone(measure_block(spec, rows, mp, reps).seconds)
        dist.barrier()
        ends = _everyone(measure_ends(spec, rows, mp, reps).seconds)
        found[f"{rows},{mp}"] = [block, ends]
    return found


def _sync(reps: int) -> dict:
    """{g: extra seconds per all-reduce when it separates compute segments, over groups of g ranks}."""
    world, rank = dist.get_world_size(), dist.get_rank()
    a, b = oarlock.randn([256, 128]), oarlock.randn([128, 512])
    x = oarlock.ones([262144 // 4], dtype="float32")   # a tensor-parallel activation's size (256 KiB)
    found = {}
    for g in (g for g in range(2, world + 1) if world % g == 0):
        groups = [dist.new_group(list(range(s, s + g))) for s in range(0, world, g)]
        mine = groups[rank // g]

        def segments(with_reduce: bool, compute: bool = True, mine=mine):
            for _ in range(SEGMENTS):
                if compute:
                    for _ in range(4):
                        oarlock.matmul(a, b)
                if with_reduce:
                    dist.all_reduce(x, group=mine)
        both = _median_time(lambda: segments(True), reps)
        compute = _median_time(lambda: segments(False), reps)
        reduce = _median_time(lambda: segments(True, False), reps)
        found[str(g)] = max(0.0, _everyone(both - compute - reduce) / SEGMENTS)
    return found


def main(out: str, reps: int, spec_file: str | None = None) -> None:
    from oarlock_autoparallel.planner_compute import measure_block
    from oarlock_autoparallel.planner_probe import CONTENTION_SPEC, CONTENTION_ROWS

    dist.init_parallel_env()
    report = {"ranks": dist.get_world_size(), **_collectives(reps), "p2p": _p2p(reps)}
    dist.barrier()
    report["concurrent_block_s"] = _everyone(measure_block(CONTENTION_SPEC, CONTENTION_ROWS, 1, reps).seconds)
    report["concurrent"] = _concurrent_shapes(spec_file, reps) if spec_file else {}
    report["sync"] = _sync(reps)
    if dist.get_rank() == 0:
        with open(out, "w") as fh:
            json.dump(report, fh)
    dist.barrier()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None)
