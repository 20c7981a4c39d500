"""Pipeline schedules on a real 4-rank job: peak activation memory per stage, measured bubble and step time of
the GPT of examples/hybrid_gpt.py (its PipelineLayer form) under FThenB, 1F1B, interleaved 1F1B (VPP, 2 chunks
per stage) and 1F1BOffload (1F1B with the waiting micro-batches' activations swapped to the host pool), and
1F1B-wait: 1F1B receiving each transfer only when its action needs it (prefetch_receives off), to show what
posting the next receive before computing gains.

The blocks are split evenly over the stages (seg_method "layer:BlockPipe": with 8 blocks, 2 per stage; the
embedding joins stage 0, the head stage 3; VPP: one block per chunk). One job of 4 ranks (pp_degree 4) builds
the pipelines side by side (same seed: the same weights; each
its own AdamW), and runs their steps round-robin, in a rotating order, so that every schedule sees the same
machine load; the figures are comparable within the run only. Per step and schedule, every rank measures:

- peak activation bytes (oarlock_parallel.pipeline_probe): max_memory_allocated() over the schedule's run (its
  actions, the optimizer step excluded) above memory_allocated() at its start, after a gc.collect() before
  the step: the activations held for backward plus the actions' transient buffers. On the cpu the counter is
  numpy's allocations (oarlock-cpu's allocator hook); the host pool is counted apart, so swapped activations
  leave it;
- bubble: idle / span per rank, the span from the earliest start of the run to the latest end over the ranks
  (the ranks share the machine's monotonic clock), idle = span - (own run time - time blocked in the
  pipeline's receives and in waiting for its sends);
- copies / busy: the seconds in the swap's "O" and "L" actions over the busy seconds, all ranks and steps: what
  starting the copies costs the computing thread (the copies themselves run on the device's copy queue, the
  cpu's copy worker thread; a load-independent view of 1F1BOffload's cost, where step times are noisy);
- receives ahead: per stage, the share of its receives that were posted during an earlier action (before the
  action that reads them started), in the last step;
- step time: the whole train_batch (split, schedule, shared-weight sums, loss broadcast, optimizer), the
  slowest rank's; the table gives the median over the measured steps.

The simulator's figures for the same schedules (unit costs: F = 1, B = 2, copies free) are printed beside
them. Losses of the schedules must agree (they train the same model on the same data): the run fails
otherwise.

    python bench/pipeline.py [--steps 5] [--width 128 --layers 8 --seq-len 64] [--schedules ...] [--json OUT]

Run without MPI, the script is a driver: it launches itself under `mpiexec -n 4`.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time

from _mpi_driver import find_launcher, main as entry, mpi_library, run_ranks, save_json, write_result

HERE = os.path.dirname(os.path.abspath(__file__))
CHUNKS = {"FThenB": 1, "1F1B": 1, "VPP": 2, "1F1BOffload": 1, "1F1B-wait": 1}   # schedule -> chunks per stage
WAIT = "-wait"    # the schedule without posting receives ahead (PipelineParallel.prefetch_receives = False)
STAGES = 4


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", nargs="+", choices=list(CHUNKS), default=list(CHUNKS),
                        help="schedules to compare (default: all five; the first is the loss reference)")
    parser.add_argument("--steps", type=int, default=5, help="measured steps per schedule (default 5)")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured steps first (default 1)")
    parser.add_argument("--micro-batches", type=int, default=8, help="micro-batches per step (default 8)")
    parser.add_argument("--micro-batch-size", type=int, default=2, help="rows per micro-batch (default 2)")
    parser.add_argument("--width", type=int, default=128, help="hidden size (default 128)")
    parser.add_argument("--layers", type=int, default=8, help="transformer blocks (default 8)")
    parser.add_argument("--heads", type=int, default=4, help="attention heads (default 4)")
    parser.add_argument("--seq-len", type=int, default=64, help="sequence length (default 64)")
    parser.add_argument("--vocab", type=int, default=512, help="vocabulary (default 512)")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds before the job is killed")
    parser.add_argument("--json", metavar="OUT", default=None, help="write the raw figures as JSON")
    return parser.parse_args(argv)


def _gpt_args(args, vpp: int):
    """examples/hybrid_gpt.py's arguments for this run's GPT."""
    import hybrid_gpt
    batch = args.micro_batches * args.micro_batch_size
    return hybrid_gpt.parse_args([
        "--pp", str(STAGES), "--vpp", str(vpp), "--micro-batches", str(args.micro_batches), "--batch", str(batch),
        "--width", str(args.width), "--layers", str(args.layers), "--heads", str(args.heads),
        "--seq-len", str(args.seq_len), "--vocab", str(args.vocab)])[1]


def run_rank(args) -> None:
    sys.path.insert(0, os.path.join(HERE, "..", "examples"))
    from mpi4py import MPI

    import hybrid_gpt
    import oarlock
    from oarlock.distributed import fleet
    from oarlock.distributed.fleet.meta_parallel import (PipelineLayer, PipelineParallel,
                                                         PipelineParallelWithInterleave)
    from oarlock_parallel.pipeline_probe import ScheduleProbe
    comm = MPI.COMM_WORLD
    if comm.size != STAGES:
        raise SystemExit(f"bench/pipeline.py: the job must have {STAGES} ranks; it has {comm.size}")
    hcg = hybrid_gpt.init_fleet(_gpt_args(args, 1))
    runs = {}
    for mode in args.schedules:
        vpp = CHUNKS[mode]
        gpt = _gpt_args(args, vpp)
        oarlock.seed(gpt.seed)    # the example's per-layer seeds: the same weights in every pipeline
        layers = PipelineLayer(hybrid_gpt.pipeline_descs(gpt, 1), topology=hcg.topology(), loss_fn=hybrid_gpt.GPTLoss(),
                               seg_method="layer:BlockPipe", num_virtual_pipeline_stages=vpp if vpp > 1 else None)
        strategy = fleet.DistributedStrategy()
        strategy.pipeline_configs = {"accumulate_steps": args.micro_batches, "schedule_mode": mode.removesuffix(WAIT),
                                     "micro_batch_size": args.micro_batch_size}
        model = (PipelineParallelWithInterleave if vpp > 1 else PipelineParallel)(layers, hcg, strategy)
        model.prefetch_receives = not mode.endswith(WAIT)
        optimizer = fleet.distributed_optimizer(hybrid_gpt.build_optimizer(gpt, layers))
        runs[mode] = {"model": model, "optimizer": optimizer, "probe": ScheduleProbe(model), "steps": [], "losses": []}
    rows = slice(0, args.micro_batches * args.micro_batch_size)
    gpt = _gpt_args(args, 1)
    for step in range(args.warmup + args.steps):
        data = [oarlock.to_tensor(a) for a in hybrid_gpt.batch_rows(gpt, step, rows)]
        order = list(args.schedules)
        order = order[step % len(order):] + order[:step % len(order)]
        for mode in order:
            run = runs[mode]
            gc.collect()
            comm.Barrier()
            start = time.perf_counter()
            loss = run["model"].train_batch(data, run["optimizer"])
            elapsed = time.perf_counter() - start
            probe = run["probe"]
            copies = probe.seconds.get("O", 0.0) + probe.seconds.get("L", 0.0)
            figures = comm.allgather((*probe.record(), elapsed, copies, *probe.received))
            run["losses"].append(float(loss))
            if step >= args.warmup:
                run["steps"].append(figures)
    if comm.rank == 0:
        write_result({"config": vars(args), "runs": {mode: {"steps": run["steps"], "losses": run["losses"]}
                                                     for mode, run in runs.items()}})


def summarize(result: dict) -> dict:
    """Per schedule: peak activation bytes per stage (max over steps), bubble per stage (mean over steps),
    median step time."""
    from oarlock_parallel.pipeline_probe import bubble
    table = {}
    for mode, run in result["runs"].items():
        steps = run["steps"]
        bubbles = [bubble([f[:4] for f in step]) for step in steps]
        table[mode] = {"peak_bytes": [max(step[r][3] for step in steps) for r in range(STAGES)],
                       "bubble": [statistics.mean(b[r] for b in bubbles) for r in range(STAGES)],
                       "step_s": statistics.median(max(f[4] for f in step) for step in steps),
                       # the swap's copies as a share of the rank's busy time (run time - blocked), summed
                       "copy_share": sum(f[5] for step in steps for f in step) /
                       sum(f[1] - f[0] - f[2] for step in steps for f in step),
                       # receives posted ahead / all receives, per stage, in the last step
                       "received_ahead": [f[6] / max(1, f[6] + f[7]) for f in steps[-1]],
                       "losses": run["losses"]}
    return table


def simulated(micro_batches: int) -> dict:
    from oarlock_parallel.pipeline_simulator import simulate_mode
    return {mode: simulate_mode(mode.removesuffix(WAIT), STAGES, micro_batches, vpp) for mode, vpp in CHUNKS.items()}


def drive(args) -> int:
    launcher = find_launcher("mpiexec", "bench/pipeline.py")
    if launcher is None:
        return 1
    print(f"MPI: {mpi_library()}; {os.cpu_count()} cpu(s); GPT width {args.width}, {args.layers} blocks, "
          f"seq {args.seq_len}, vocab {args.vocab}; pp {STAGES}, {args.micro_batches} micro-batches of "
          f"{args.micro_batch_size}; {args.steps} measured steps after {args.warmup}", flush=True)
    argv = ["--schedules", *args.schedules] + [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()
                                               if k not in ("json", "timeout", "schedules")]
    result = run_ranks(launcher, STAGES, __file__, argv, args.timeout)
    if result is None:
        return 1
    table, sim = summarize(result), simulated(args.micro_batches)
    reference = table[args.schedules[0]]["losses"]
    spread = max(abs(a - b) / abs(b) for run in table.values() for a, b in zip(run["losses"], reference))
    mib = 2 ** 20
    print("\n| schedule | peak activations per stage (MiB) | bubble per stage | bubble | step (s) | "
          "copies / busy | receives ahead per stage | simulated bubble | simulated peak (micro-batches) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for mode in args.schedules:
        row, model = table[mode], sim[mode]
        print(f"| {mode} | {' / '.join(f'{p / mib:.1f}' for p in row['peak_bytes'])} | "
              f"{' / '.join(f'{b:.2f}' for b in row['bubble'])} | {statistics.mean(row['bubble']):.2f} | "
              f"{row['step_s']:.2f} | {row['copy_share']:.1%} | "
              f"{' / '.join(f'{a:.2f}' for a in row['received_ahead'])} | {model.bubble_fraction:.2f} | "
              f"{' / '.join(f'{p:g}' for p in model.peak_resident)} |")
    print(f"\nlosses of the {len(args.schedules)} schedules agree within {spread:.1e} (relative) over "
          f"{len(reference)} steps")
    save_json(args.json, {"table": table, "raw": result})
    return 0 if spread < 1e-5 else 1


if __name__ == "__main__":
    sys.exit(entry(parse_args(), run_rank, drive))
