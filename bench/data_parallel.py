"""Data-parallel step time on N ranks: oarlock.DataParallel (bucketed all-reduces started during
backward) against a plain all-reduce after backward, one process without communication, and
torch.nn.parallel.DistributedDataParallel (gloo, CPU) on the same model, in the same run.

Measured: one training step (forward, MSE loss, backward, SGD step, clear_grad) of an MLP of
--layers square Linear layers of --width (float32) with ReLUs, on a per-rank batch of --batch
rows (weak scaling: every rank has its own batch, as in the one-process run). Variants:

- single: the plain oarlock model on every rank at once, no communication (the compute floor,
  under the same contention as the others);
- dp-overlap: oarlock.DataParallel(model) with Paddle's default buckets (25 MB, the first 1 MB);
- dp-after: the plain model, then fused_allreduce_gradients after backward (no overlap);
- torch-ddp: torch DDP over gloo (its default 25 MB buckets), torch.optim.SGD.

Timing: warm-up steps, then --blocks rounds, each timing --steps steps of every variant in a
rotating order; a block's time is the maximum over ranks (a step is as slow as its slowest rank),
divided by --steps; the figure is the median over blocks. "hidden" is the fraction of the
all-reduce time that DataParallel hides behind backward: (dp-after - dp-overlap) / (dp-after -
single). BLAS and torch use one thread per rank (OPENBLAS/OMP_NUM_THREADS=1) so N ranks do not
oversubscribe N cores. The goal: dp-overlap at least as fast as torch-ddp.

Run without MPI, the script is a driver: it launches itself under `mpiexec -n N` for each N of --ranks.

    python bench/data_parallel.py [--ranks 2] [--width 1024] [--layers 4] [--batch 64] [--quick]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import numpy as np

# bench/ is sys.path[0] when this script runs
from _mpi_driver import find_launcher, main as entry, mpi_library, run_world_sizes, save_json, write_result

VARIANTS = ("single", "dp-overlap", "dp-after", "torch-ddp")
ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2], metavar="N", help="world sizes (default 2)")
    parser.add_argument("--width", type=int, default=1024, help="features of every layer (default 1024)")
    parser.add_argument("--layers", type=int, default=4, help="Linear layers (default 4)")
    parser.add_argument("--batch", type=int, default=64, help="rows per rank and step (default 64)")
    parser.add_argument("--steps", type=int, default=5, help="steps per timed block (default 5)")
    parser.add_argument("--blocks", type=int, default=7, help="timed blocks; the median is reported (default 7)")
    parser.add_argument("--quick", action="store_true", help="smoke run: width 64, 2 layers, 2 blocks of 2 steps")
    parser.add_argument("--json", metavar="PATH", help="also write the figures to this JSON file")
    parser.add_argument("--mpiexec", default="mpiexec", help="the launcher (default: mpiexec on PATH)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds one world size may take (900)")
    return parser


def settle(args):
    if args.quick:
        args.width, args.layers, args.blocks, args.steps = 64, 2, 2, 2
    if min(args.width, args.layers, args.batch, args.steps, args.blocks, *args.ranks) < 1:
        raise SystemExit("every size and count must be >= 1")
    return args


# -- one rank ------------------------------------------------------------------------------------------------------
def oarlock_variants(args, dist):
    import oarlock
    import oarlock.nn as nn
    import oarlock.nn.functional as F
    from oarlock.distributed.fleet.utils.hybrid_parallel_util import fused_allreduce_gradients

    def mlp():
        oarlock.seed(0)
        layers = []
        for _ in range(args.layers):
            layers += [nn.Linear(args.width, args.width), nn.ReLU()]
        return nn.Sequential(*layers[:-1])

    rng = np.random.default_rng(dist.get_rank())
    x = oarlock.to_tensor(rng.standard_normal((args.batch, args.width)).astype("float32"))
    y = oarlock.to_tensor(rng.standard_normal((args.batch, args.width)).astype("float32"))

    def stepper(model, after=None):
        opt = oarlock.optimizer.SGD(learning_rate=1e-4, parameters=model.parameters())

        def step():
            F.mse_loss(model(x), y).backward()
            if after is not None:
                after(model)
            opt.step()
            opt.clear_grad()
        return step

    return {"single": stepper(mlp()),
            "dp-overlap": stepper(oarlock.DataParallel(mlp())),
            "dp-after": stepper(mlp(), lambda m: fused_allreduce_gradients(list(m.parameters()), None))}


def torch_variant(args, comm):
    import torch
    import torch.distributed as tdist

    torch.set_num_threads(1)
    port = comm.bcast(_free_port() if comm.rank == 0 else None, root=0)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    tdist.init_process_group("gloo", rank=comm.rank, world_size=comm.size)
    torch.manual_seed(0)
    layers = []
    for _ in range(args.layers):
        layers += [torch.nn.Linear(args.width, args.width), torch.nn.ReLU()]
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(*layers[:-1]))
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(comm.rank)
    x, y = (torch.randn(args.batch, args.width, generator=gen) for _ in range(2))

    def step():
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def _free_port() -> int:
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_rank(args) -> None:
    import oarlock.distributed as dist

    dist.init_parallel_env()
    from mpi4py import MPI
    comm = MPI.COMM_WORLD.Dup()
    steps = oarlock_variants(args, dist)
    steps["torch-ddp"] = torch_variant(args, comm)
    for step in steps.values():                  # warm-up
        for _ in range(2):
            step()
    times = {name: [] for name in VARIANTS}
    for block in range(args.blocks):
        for k in range(len(VARIANTS)):
            name = VARIANTS[(block + k) % len(VARIANTS)]
            comm.Barrier()
            start = time.perf_counter()
            for _ in range(args.steps):
                steps[name]()
            times[name].append(comm.allreduce(time.perf_counter() - start, op=MPI.MAX) / args.steps)
    if comm.rank == 0:
        medians = {name: statistics.median(values) for name, values in times.items()}
        comm_time = medians["dp-after"] - medians["single"]
        hidden = (medians["dp-after"] - medians["dp-overlap"]) / comm_time if comm_time > 0 else float("nan")
        params = args.layers * (args.width * args.width + args.width)
        print(f"{comm.size} ranks, MLP {args.layers} x {args.width} ({params * 4 / 2**20:.1f} MB of float32 "
              f"gradients), batch {args.batch} per rank, median of {args.blocks} blocks of {args.steps} steps")
        print(f"{'variant':<12} {'ms/step':>9} {'vs torch-ddp':>13}")
        for name in VARIANTS:
            print(f"{name:<12} {medians[name] * 1e3:9.2f} {medians['torch-ddp'] / medians[name]:12.2f}x")
        print(f"all-reduce time hidden behind backward by dp-overlap: {hidden:.0%}", flush=True)
        write_result({"ranks": comm.size, "ms": {k: v * 1e3 for k, v in medians.items()}, "hidden": hidden,
                      "width": args.width, "layers": args.layers, "batch": args.batch})


# -- the driver ----------------------------------------------------------------------------------------------------
def drive(args) -> int:
    launcher = find_launcher(args.mpiexec, "data_parallel.py")
    if launcher is None:
        return 2
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, {mpi_library()}"
    print(machine, flush=True)
    arguments = ["--width", str(args.width), "--layers", str(args.layers), "--batch", str(args.batch),
                 "--steps", str(args.steps), "--blocks", str(args.blocks)]
    runs, status = run_world_sizes(launcher, args.ranks, __file__, arguments, args.timeout, env=ONE_THREAD)
    save_json(args.json, {"machine": machine, "runs": runs})
    return status


def main(argv=None) -> int:
    return entry(settle(build_parser().parse_args(argv)), run_rank, drive)


if __name__ == "__main__":
    sys.exit(main())
