"""The planner's communication probe, run on N ranks by `oarlock launch -n N` (planner_probe starts it):

    python -m oarlock.cli launch -n N planner_comm_job.py OUT.json REPS [SPEC.json]

times all_reduce and all_gather over groups of every size g dividing N (consecutive ranks), send/recv between
rank pairs, and compute done by every rank at once: one small transformer block (against the same block timed
alone, the contention factor), and, given SPEC.json ({"model": ModelSpec fields, "shapes": [[rows, mp], ...],
"sharding": [[g, mp], ...]}), the block and the ends at every shape the layouts need (their step's compute as the
ranks really do it, sharing the cores: each run starts after a barrier and counts for the slowest rank, which the
step waits for), the AdamW step at every mp the same way, and sharding stage 1's collectives (a reduce and a
broadcast per parameter tensor) per sharding group size. Then the cost of communication between compute segments:
SEGMENTS rounds of (a segment of compute, an all-reduce over a group of g -- tensor parallelism's -- or a
send/recv exchange with a neighbour -- a pipeline stage's) timed against the segments alone and the communication
alone; the difference per round is the wait for the peers, which back-to-back communication does not show when
ranks time-share cores. Rank 0 writes the seconds of each measurement to OUT.json.
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



def _exchange(x, rank: int, peer: int) -> None:
    """One round trip of x with the peer: the even rank sends first, the odd one receives first."""
    if rank % 2 == 0:
        dist.send(x, dst=peer)
        dist.recv(x, src=peer)
    else:
        dist.recv(x, src=peer)
        dist.send(x, dst=peer)

def _p2p(reps: int) -> list:
    world, rank = dist.get_world_size(), dist.get_rank()
    if world < 2:
        return []
    peer = rank ^ 1 if (rank ^ 1) < world else None
    found = []
    for size in SIZES:
        x = oarlock.ones([size // 4], dtype="float32")

        def ping_pong(x=x):
            if peer is not None:
                _exchange(x, rank, peer)
        found.append([size, _median_time(ping_pong, reps) / 2])   # one way
    return found


SEGMENTS = 8   # compute segments (each followed by an all-reduce) per timed round of the synchronisation probe


def _everyone(value: float) -> float:
    """The median over the ranks of a per-rank measurement."""
    times: list = []
    dist.all_gather_object(times, value)
    return statistics.median(times)


def _slowest(value: float) -> float:
    """The largest over the ranks of a per-rank measurement: what a step waits for at its next collective. When
    N ranks time-share fewer cores, the scheduler lets some finish early and others late (measured, 4 ranks on 2
    cores, one block: 8 to 28 ms per rank after the same barrier); the median hid the late ones."""
    times: list = []
    dist.all_gather_object(times, value)
    return max(times)


def _concurrent_shapes(spec_file: str, reps: int) -> dict:
    """{"rows,mp": [block seconds, ends seconds]} with every rank computing the same shape at once."""
    from oarlock_autoparallel.planner_compute import measure_block, measure_ends
    from oarlock_autoparallel.planner_model import ModelSpec

    with open(spec_file) as fh:
        request = json.load(fh)
    spec, found = ModelSpec(**request["model"]), {}
    for rows, mp in request["shapes"]:
        dist.barrier()
        block = _slowest(measure_block(spec, rows, mp, reps, before=dist.barrier).seconds)
        ends = _slowest(measure_ends(spec, rows, mp, reps, before=dist.barrier).seconds)
        found[f"{rows},{mp}"] = [block, ends]
    return found


def _concurrent_optimizer(request: dict, reps: int) -> dict:
    """{"mp": [block seconds, ends seconds]} of the AdamW step with every rank stepping at once (slowest rank)."""
    from oarlock_autoparallel.planner_compute import measure_optimizer
    from oarlock_autoparallel.planner_model import ModelSpec

    spec = ModelSpec(**request["model"])
    return {str(mp): [_slowest(s) for s in measure_optimizer(spec, mp, reps, before=dist.barrier)]
            for mp in sorted({mp for _, mp in request["shapes"]})}


def owners_of(sizes: list, group: int) -> list:
    """Each tensor's owner rank in a sharding group of `group` ranks: Paddle's greedy rule (largest first, to the
    rank holding the fewest elements so far), as DygraphShardingOptimizer assigns them."""
    load, owners = [0] * group, [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        owners[i] = load.index(min(load))
        load[owners[i]] += sizes[i]
    return owners


def _sharding(request: dict, reps: int) -> dict:
    """{"g,mp": seconds} of sharding stage 1's own collectives after backward, as DygraphShardingOptimizer runs
    them over a sharding group of g ranks: one reduce per gradient tensor onto its owner (all started, then
    waited for), the global norm's all-reduce of one number, and one broadcast per parameter tensor from its
    owner. Data parallelism moves the same bytes in one fused all-reduce; these are ~2 x (tensors) collectives,
    each paying a latency (on time-shared cores: a wait for the peers to be scheduled)."""
    from oarlock_autoparallel.planner_model import ModelSpec

    world, rank, spec, found = dist.get_world_size(), dist.get_rank(), ModelSpec(**request["model"]), {}
    norm = oarlock.ones([1], dtype="float32")
    for g, mp in request.get("sharding", []):
        groups = [dist.new_group(list(range(s, s + g))) for s in range(0, world, g)]
        mine = groups[rank // g]
        sizes = spec.parameter_sizes(mp)
        owners = owners_of(sizes, g)
        tensors = [oarlock.ones([n], dtype="float32") for n in sizes]

        def stage1(tensors=tensors, owners=owners, mine=mine):
            for task in [dist.reduce(t, dst=mine.ranks[o], op=dist.ReduceOp.SUM, group=mine, sync_op=False)
                         for t, o in zip(tensors, owners)]:
                task.wait()
            dist.all_reduce(norm, group=mine)
            for task in [dist.broadcast(t, src=mine.ranks[o], group=mine, sync_op=False)
                         for t, o in zip(tensors, owners)]:
                task.wait()
        found[f"{g},{mp}"] = _slowest(_median_time(stage1, reps, mine))
    return found


def _between_compute(reps: int, communicate) -> float:
    """Extra seconds per round when `communicate()` follows a segment of compute, over SEGMENTS rounds, against
    the segments alone and the communication alone (the median over the ranks): the wait for the peers to reach
    it and be scheduled, which back-to-back communication does not show when ranks time-share cores."""
    a, b = oarlock.randn([256, 128]), oarlock.randn([128, 512])

    def segments(talk: bool, compute: bool = True):
        for _ in range(SEGMENTS):
            if compute:
                for _ in range(4):
                    oarlock.matmul(a, b)
            if talk:
                communicate()
    both = _median_time(lambda: segments(True), reps)
    compute = _median_time(lambda: segments(False), reps)
    alone = _median_time(lambda: segments(True, False), reps)
    return max(0.0, _everyone(both - compute - alone) / SEGMENTS)


def _sync(reps: int) -> dict:
    """{g: extra seconds per all-reduce when it separates compute segments, over groups of g ranks}."""
    world, rank = dist.get_world_size(), dist.get_rank()
    x = oarlock.ones([262144 // 4], dtype="float32")   # a tensor-parallel activation's size (256 KiB)
    found = {}
    for g in (g for g in range(2, world + 1) if world % g == 0):
        groups = [dist.new_group(list(range(s, s + g))) for s in range(0, world, g)]
        found[str(g)] = _between_compute(reps, lambda mine=groups[rank // g]: dist.all_reduce(x, group=mine))
    return found


def _handoff(reps: int) -> float:
    """Extra seconds per exchange (a receive from the neighbour and a send to it, as a pipeline stage does around
    each micro-batch's forward and backward) when it follows a segment of compute: a blocking receive waits for
    the peer to be scheduled and to reach its send."""
    world, rank = dist.get_world_size(), dist.get_rank()
    peer = rank ^ 1
    if world < 2 or world % 2:
        return 0.0
    x = oarlock.ones([262144 // 4], dtype="float32")

    return _between_compute(reps, lambda: _exchange(x, rank, peer))


def main(out: str, reps: int, spec_file: str | None = None) -> None:
    from oarlock_autoparallel.planner_compute import measure_block
    from oarlock_autoparallel.planner_probe import CONTENTION_SPEC, CONTENTION_ROWS

    dist.init_parallel_env()
    report = {"ranks": dist.get_world_size(), **_collectives(reps), "p2p": _p2p(reps)}
    dist.barrier()
    report["concurrent_block_s"] = _slowest(measure_block(CONTENTION_SPEC, CONTENTION_ROWS, 1, reps,
                                                          before=dist.barrier).seconds)
    report["concurrent"] = _concurrent_shapes(spec_file, reps) if spec_file else {}
    if spec_file:
        with open(spec_file) as fh:
            request = json.load(fh)
        report["sharding"] = _sharding(request, reps)
        report["concurrent_optimizer"] = _concurrent_optimizer(request, reps)
    report["sync"] = _sync(reps)
    report["handoff"] = _handoff(reps)
    if dist.get_rank() == 0:
        with open(out, "w") as fh:
            json.dump(report, fh)
    dist.barrier()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None)
