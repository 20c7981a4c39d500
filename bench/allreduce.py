"""all_reduce bandwidth: oarlock.distributed.all_reduce against raw mpi4py Allreduce, float32 SUM, on one host.

Measured: in-place SUM all_reduce of one float32 buffer per rank, for message sizes from 1 KB to
64 MB (1 KB = 1024 bytes), on 2 and 4 ranks over loopback (MPI's shared-memory transport; more
ranks than cores are oversubscribed). Four variants run in the same processes, interleaved:

- oarlock: `dist.all_reduce(tensor)` on a CPU tensor (blocking; the plugin checks that the ranks
  agree on the call with one small all_gather, then passes the tensor's numpy array to a
  nonblocking MPI_Iallreduce with MPI_IN_PLACE and polls it under its watchdog);
- oarlock every call: the same with the agreement check on every call
  (`dist.set_collective_check(True, every_call=True)`; by default it looks at a group's first 64
  collectives and then one in 64, so the timed calls of the default variant are mostly unchecked);
- oarlock unchecked: the same with the agreement check off (`dist.set_collective_check(False)`
  for its blocks), so the check's cost is the difference;
- raw out-of-place: `comm.Allreduce(send, recv)` on numpy arrays;
- raw in-place: `comm.Allreduce(MPI.IN_PLACE, buf)` on a numpy array.

Timing, per size: a correctness check, then warm-up calls of every variant that also calibrate
the repetitions per block (the same for all variants, so that a block takes about --target-ms,
at least 3); then --blocks rounds, each timing one block of every variant in a rotating order so
that machine noise hits all variants alike. Every block starts after a Barrier; its time is the
maximum over ranks (a collective is as slow as its slowest rank), divided by the repetitions.
The figure is the median over blocks. Algorithm bandwidth is bytes / time (GB/s = 1e9 bytes/s);
bus bandwidth is algbw * 2(n-1)/n (the nccl-tests convention: what each rank's link carries in a
ring all-reduce). "ratio" is oarlock's bandwidth over the better raw variant's (> 1: oarlock is
faster). The goal: ratio >= 0.9 at 1 MB and above. A second table gives the agreement check's
cost, (checked - unchecked) / unchecked time per call, sampled (the default) and on every call: the
issue's budget for the default is 3% at 1 MB.

Run without MPI, the script is a driver: it launches itself under `mpiexec -n N` for each N of
--ranks (setting OARLOCK_BENCH_RANK_MODE=1 so the copies know they are ranks), relays the table
that rank 0 prints, and prints the machine line.

    python bench/allreduce.py [--ranks 2 4] [--sizes 1K 1M 64M] [--quick] [--json out.json]
    python bench/allreduce.py --ranks 2 --sizes 1K 1M 64M      # the check's cost table
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import sys
import time

import numpy as np

# bench/ is sys.path[0] when this script runs
from _mpi_driver import find_launcher, main as entry, mpi_library, run_world_sizes, save_json, write_result

DEFAULT_SIZES = ["1K", "4K", "16K", "64K", "256K", "1M", "4M", "16M", "64M"]
QUICK_SIZES = ["4K", "1M", "16M"]
GOAL_RATIO = 0.9
GOAL_MIN_BYTES = 1 << 20
VARIANTS = ("oarlock", "oarlock_every_call", "oarlock_unchecked", "raw_oop", "raw_ip")
CHECK_BUDGET = 0.03         # the agreement check stays on by default while it costs at most this at 1 MB
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "M": 1 << 20, "MB": 1 << 20, "G": 1 << 30, "GB": 1 << 30}


def parse_size(text: str) -> int:
    """'64K', '1MB', '4096' -> bytes (binary units); a whole number of float32 elements."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?B?)\s*", text.upper())
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (examples: 4096, 64K, 1M, 16MB)")
    nbytes = int(match.group(1)) * _UNITS[match.group(2)]
    if nbytes < 4 or nbytes % 4:
        raise argparse.ArgumentTypeError(f"size {text!r} is not a positive multiple of 4 bytes (float32)")
    return nbytes


def size_label(nbytes: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog="Without OARLOCK_BENCH_RANK_MODE=1 in the environment the script launches itself with "
               "`mpiexec -n N` for each N of --ranks and prints rank 0's tables; with it (set by that "
               "driver) it is one rank of the benchmark and ignores --ranks, --json, --mpiexec and --timeout.")
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4], metavar="N",
                        help="world sizes to run, one mpiexec launch each (default: 2 4)")
    parser.add_argument("--sizes", type=parse_size, nargs="+", metavar="SIZE",
                        help="message sizes in bytes, K/M/G suffixes are binary (default: "
                             f"{' '.join(DEFAULT_SIZES)}; with --quick: {' '.join(QUICK_SIZES)})")
    parser.add_argument("--blocks", type=int, metavar="B",
                        help="timed blocks per variant and size; the median is reported (default 7; 3 with --quick)")
    parser.add_argument("--target-ms", type=float, metavar="MS",
                        help="aimed-for duration of one block, which sets its repetitions (at least 3) "
                             "(default 60; 15 with --quick)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: sizes 4K 1M 16M, 3 blocks of ~15 ms (unless given explicitly)")
    parser.add_argument("--json", metavar="PATH", help="also write all figures to this JSON file")
    parser.add_argument("--mpiexec", default="mpiexec", help="the launcher to use (default: mpiexec on PATH)")
    parser.add_argument("--timeout", type=float, default=600,
                        help="seconds one world size may take before its mpiexec is killed (default 600)")
    return parser


def settle(args) -> argparse.Namespace:
    """Fill the defaults that depend on --quick."""
    if args.sizes is None:
        args.sizes = [parse_size(s) for s in (QUICK_SIZES if args.quick else DEFAULT_SIZES)]
    if args.blocks is None:
        args.blocks = 3 if args.quick else 7
    if args.target_ms is None:
        args.target_ms = 15.0 if args.quick else 60.0
    if args.blocks < 1 or args.target_ms <= 0 or min(args.ranks) < 1:
        raise SystemExit("--blocks and --ranks must be >= 1, --target-ms > 0")
    return args


# -- one rank ------------------------------------------------------------------------------------------------------
def run_rank(args) -> None:
    import oarlock
    import oarlock.distributed as dist

    dist.init_parallel_env()
    from mpi4py import MPI  # already initialized by the plugin; the same library and process

    # our own communicator, so raw traffic never shares one with the plugin's (as in a real program)
    comm = MPI.COMM_WORLD.Dup()
    rank, nranks = dist.get_rank(), dist.get_world_size()
    assert (rank, nranks) == (comm.rank, comm.size), "oarlock and mpi4py disagree on the world"

    rows = []
    for nbytes in args.sizes:
        check(oarlock, dist, MPI, comm, nbytes // 4, rank, nranks)
        reps, worst = measure(oarlock, dist, MPI, comm, nbytes // 4, args)
        if rank == 0:
            rows.append(make_row(nbytes, nranks, reps, worst / reps))

    if rank == 0:
        print(render_table(nranks, args, rows), flush=True)
        write_result({"ranks": nranks, "blocks": args.blocks, "target_ms": args.target_ms, "rows": rows})
    comm.Free()


def measure(oarlock, dist, MPI, comm, count, args):
    """(repetitions per block, block seconds as (variant, block), max over ranks; None off rank 0)."""
    # zeros: a sum of zeros stays zero, so repeated in-place reductions never overflow to inf
    tensor = oarlock.to_tensor(np.zeros(count, dtype=np.float32))
    send, recv = np.zeros(count, dtype=np.float32), np.zeros(count, dtype=np.float32)
    inplace = np.zeros(count, dtype=np.float32)
    calls = {
        "oarlock": lambda: dist.all_reduce(tensor),
        "oarlock_every_call": lambda: dist.all_reduce(tensor),
        "oarlock_unchecked": lambda: dist.all_reduce(tensor),
        "raw_oop": lambda: comm.Allreduce(send, recv, op=MPI.SUM),
        "raw_ip": lambda: comm.Allreduce(MPI.IN_PLACE, inplace, op=MPI.SUM),
    }
    # every rank switches the check alike, outside the timed calls
    checked = {name: (name != "oarlock_unchecked", name == "oarlock_every_call") for name in VARIANTS}
    # the same repetitions for every variant, sized by the slowest, so blocks are alike in length
    per_call = 0.0
    for name, fn in calls.items():
        dist.set_collective_check(*checked[name])
        per_call = max(per_call, calibrate(comm, MPI, fn))
    reps = max(3, int(round(args.target_ms / 1e3 / per_call)))

    local = np.zeros((len(VARIANTS), args.blocks))
    for block in range(args.blocks):
        # rotate the order so that no variant always runs first (right after a Barrier) or last
        for shift in range(len(VARIANTS)):
            index = (block + shift) % len(VARIANTS)
            dist.set_collective_check(*checked[VARIANTS[index]])
            local[index, block] = timed_block(comm, calls[VARIANTS[index]], reps)
    dist.set_collective_check(True, every_call=False)
    # per block, the slowest rank's time; reduced after the timing so it costs the blocks nothing
    worst = np.zeros_like(local) if comm.rank == 0 else None
    comm.Reduce(local, worst, op=MPI.MAX, root=0)
    return reps, worst


def check(oarlock, dist, MPI, comm, count, rank, nranks) -> None:
    """Every variant computes the right sum before any of them is timed (rank r contributes r + 1)."""
    expected = nranks * (nranks + 1) / 2
    tensor = oarlock.to_tensor(np.full(count, rank + 1, dtype=np.float32))
    dist.all_reduce(tensor)
    send, recv = np.full(count, rank + 1, dtype=np.float32), np.empty(count, dtype=np.float32)
    comm.Allreduce(send, recv, op=MPI.SUM)
    inplace = send.copy()
    comm.Allreduce(MPI.IN_PLACE, inplace, op=MPI.SUM)
    for name, result in (("oarlock", tensor.numpy()), ("raw out-of-place", recv), ("raw in-place", inplace)):
        if not np.all(result == expected):
            raise AssertionError(f"rank {rank}: {name} all_reduce of {count} floats is wrong "
                                 f"(expected {expected}, got e.g. {result[:4]})")


def calibrate(comm, MPI, fn) -> float:
    """Warm up `fn` (first-touch page faults, lazy MPI setup) and return seconds per call, the max
    over ranks. Batches grow 4x until one takes >= 10 ms, then that batch runs once more and the
    faster of the two counts (the first still pays for warm-up). Every rank takes the same
    decisions because they are made on allreduced times."""
    fn()
    fn()
    batch = 1
    while True:
        seconds = comm.allreduce(timed_block(comm, fn, batch), op=MPI.MAX)
        if seconds >= 0.01 or batch >= 1 << 16:
            again = comm.allreduce(timed_block(comm, fn, batch), op=MPI.MAX)
            return min(seconds, again) / batch
        batch *= 4


def timed_block(comm, fn, reps: int) -> float:
    comm.Barrier()      # start together: otherwise a late rank's lag is billed to the first call
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    return time.perf_counter() - start


def make_row(nbytes: int, nranks: int, reps: int, per_call: np.ndarray) -> dict:
    """per_call: (variant, block) seconds per call, max over ranks. Figures are medians over blocks."""
    medians = {name: statistics.median(per_call[i].tolist()) for i, name in enumerate(VARIANTS)}
    algbw = {name: nbytes / seconds / 1e9 for name, seconds in medians.items()}
    best_raw = max(algbw["raw_oop"], algbw["raw_ip"])
    ratio = algbw["oarlock"] / best_raw
    return {
        "bytes": nbytes, "reps": reps,
        "us": {name: seconds * 1e6 for name, seconds in medians.items()},
        "us_min": {name: float(per_call[i].min()) * 1e6 for i, name in enumerate(VARIANTS)},
        "us_max": {name: float(per_call[i].max()) * 1e6 for i, name in enumerate(VARIANTS)},
        "algbw_gbs": algbw,
        "busbw_gbs": {name: bw * 2 * (nranks - 1) / nranks for name, bw in algbw.items()},
        "ratio_vs_best_raw": ratio,
        "overhead_us": (medians["oarlock"] - min(medians["raw_oop"], medians["raw_ip"])) * 1e6,
        "check_cost": medians["oarlock"] / medians["oarlock_unchecked"] - 1,
        "every_call_check_cost": medians["oarlock_every_call"] / medians["oarlock_unchecked"] - 1,
        "meets_goal": (ratio >= GOAL_RATIO) if nbytes >= GOAL_MIN_BYTES else None,
    }


def render_table(nranks: int, args, rows: list) -> str:
    lines = [f"### {nranks} ranks: all_reduce float32 SUM, median of {args.blocks} blocks (~{args.target_ms:g} ms "
             "each), max over ranks",
             "",
             "| size | oarlock us | oarlock GB/s (alg) | raw out-of-place GB/s | raw in-place GB/s "
             "| ratio vs best raw | oarlock busbw GB/s | goal (>=0.9 at >=1MB) | oarlock - best raw us | reps |",
             "|---:|---:|---:|---:|---:|---:|---:|:---:|---:|---:|"]
    for row in rows:
        goal = {True: "yes", False: "**NO**", None: "-"}[row["meets_goal"]]
        bw = row["algbw_gbs"]
        lines.append(f"| {size_label(row['bytes'])} | {row['us']['oarlock']:.1f} | {bw['oarlock']:.3f} "
                     f"| {bw['raw_oop']:.3f} | {bw['raw_ip']:.3f} | {row['ratio_vs_best_raw']:.2f} "
                     f"| {row['busbw_gbs']['oarlock']:.3f} | {goal} | {row['overhead_us']:+.1f} | {row['reps']} |")
    judged = [row for row in rows if row["meets_goal"] is not None]
    if judged:
        met = sum(row["meets_goal"] for row in judged)
        lines += ["", f"{met} of {len(judged)} sizes >= 1 MB meet the goal on {nranks} ranks."]
    return "\n".join(lines + ["", render_check_table(nranks, args, rows)])


def render_check_table(nranks: int, args, rows: list) -> str:
    """The agreement check's cost per size: the same medians, checked against unchecked."""
    lines = [f"### {nranks} ranks: the agreement check on and off (all_reduce float32 SUM, median of {args.blocks} "
             "blocks, max over ranks)",
             "",
             "| size | sampled (default) us | every call us | check off us | sampled cost | every-call cost "
             "| default within budget (<=3% at 1 MB) |",
             "|---:|---:|---:|---:|---:|---:|:---:|"]
    for row in rows:
        budget = ("yes" if row["check_cost"] <= CHECK_BUDGET else "**NO**") if row["bytes"] == GOAL_MIN_BYTES else "-"
        us = row["us"]
        lines.append(f"| {size_label(row['bytes'])} | {us['oarlock']:.1f} | {us['oarlock_every_call']:.1f} "
                     f"| {us['oarlock_unchecked']:.1f} | {100 * row['check_cost']:+.1f}% "
                     f"| {100 * row['every_call_check_cost']:+.1f}% | {budget} |")
    return "\n".join(lines)


# -- the driver ----------------------------------------------------------------------------------------------------
def machine_line() -> str:
    import mpi4py
    cpus = os.cpu_count()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cpus
    return (f"machine: {cpus} CPUs ({usable} usable), {platform.processor() or platform.machine()}; "
            f"MPI: {mpi_library()}; mpi4py {mpi4py.__version__}; numpy {np.__version__}; "
            f"Python {platform.python_version()}")


def rank_arguments(args) -> list:
    return ["--sizes", *map(str, args.sizes), "--blocks", str(args.blocks), "--target-ms", str(args.target_ms)]


def drive(args) -> int:
    launcher = find_launcher(args.mpiexec, "allreduce.py")
    if launcher is None:
        return 2
    machine = machine_line()
    print(machine)
    if os.environ.get("OARLOCK_DISTRIBUTED_DEBUG", "0") not in ("", "0"):
        print("note: OARLOCK_DISTRIBUTED_DEBUG is set, so oarlock checks every call's agreement across ranks "
              "(an extra collective per call); unset it to measure the normal path")
    print(f"Goal: oarlock's all_reduce bandwidth >= {GOAL_RATIO} x the better raw mpi4py variant's, "
          f"at messages of {size_label(GOAL_MIN_BYTES)} and above.", flush=True)
    # stdout is rank 0's table (the other ranks print nothing); stderr passes through
    runs, status = run_world_sizes(launcher, args.ranks, __file__, rank_arguments(args), args.timeout)
    save_json(args.json, {"machine": machine, "goal": {"ratio": GOAL_RATIO, "min_bytes": GOAL_MIN_BYTES},
                          "runs": runs})
    return status


def main(argv=None) -> int:
    return entry(settle(build_parser().parse_args(argv)), run_rank, drive)


if __name__ == "__main__":
    sys.exit(main())
