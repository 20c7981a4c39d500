"""Expert parallelism on a real MPI job: tokens per second of a MoE layer's step (dispatch + experts + combine,
forward and backward) with 4 ranks x 2 experts (ep 4) against one process holding all 8 experts, and the
all-to-all share of the ep4 step.

The layer is the MoE GPT's (`oarlock train --moe-experts 8 --moe-top-k 2`): Paddle's MoELayer
(oarlock.incubate.distributed.models.moe) with a GShard top-2 gate (random routing, capacity 1.2 x the
group's tokens) over experts Linear(128, 512) -> SiLU -> Linear(512, 128). Both configurations process the
same global batch of 4 x --tokens tokens per step (one process all of them; each ep rank its quarter), each
in its own job (one process under mpiexec -n 1, then mpiexec -n 4 with hybrid_configs ep_degree 4). A step
is the layer's forward and the backward of a fixed random projection of its output, gradients cleared after.

Per step and rank: the step's wall time (the ranks start together after a barrier; the ep4 step time is the
slowest rank's), and the seconds spent inside oarlock.distributed.alltoall_single (every exchange of the
step: the per-expert counts and the tokens, there and back in forward and again in backward). The all-to-all
share is each rank's exchange seconds / its step seconds, median over the measured steps; the table gives
each rank's and their mean. Tokens per second = 4 x --tokens / median step time. Ratios are of figures
measured in the same invocation. On a machine with fewer cores than 4 the ranks share cores, which the
ep4 figure includes.

    python bench/moe.py [--tokens 2048] [--steps 5] [--warmup 2] [--json OUT]

Run without MPI, the script is a driver: it launches itself under `mpiexec -n 1` and `mpiexec -n 4`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from _mpi_driver import find_launcher, main as entry, mpi_library, run_ranks, save_json, write_result

EXPERTS, TOP_K, EP = 8, 2, 4
WIDTH, HIDDEN = 128, 512


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=2048, help="tokens per ep rank and step (default 2048, "
                                                                  "16 x 128 as in oarlock train); the single "
                                                                  "process takes 4 x as many")
    parser.add_argument("--steps", type=int, default=5, help="measured steps (default 5)")
    parser.add_argument("--warmup", type=int, default=2, help="unmeasured steps first (default 2)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the weights and tokens (default 0)")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds before a job is killed")
    parser.add_argument("--json", metavar="OUT", default=None, help="write the raw figures as JSON")
    return parser.parse_args(argv)


class ExchangeClock:
    """Seconds spent inside oarlock.distributed.alltoall_single (the MoE layer calls it through the module
    attribute, so wrapping the attribute sees every exchange)."""

    def __init__(self):
        import oarlock.distributed as dist
        self.seconds, self.calls = 0.0, 0
        inner = dist.alltoall_single

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start
                self.calls += 1
        dist.alltoall_single = timed


def _moe_layer(world: int):
    """The MoE GPT's layer with this rank's EXPERTS / world experts (all of them in one process)."""
    import oarlock
    import oarlock.nn as nn
    from oarlock.incubate.distributed.models.moe import GShardGate, MoELayer

    group = None
    if world > 1:
        from oarlock.distributed import fleet
        strategy = fleet.DistributedStrategy()
        strategy.hybrid_configs = {"dp_degree": 1, "ep_degree": world}
        order = list(strategy.hybrid_parallel_order)
        strategy.hybrid_parallel_order = order[:1] + ["ep"] + order[1:]
        fleet.init(is_collective=True, strategy=strategy)
        group = fleet.get_hybrid_communicate_group().get_axis_group("expert")
    local = EXPERTS // world
    experts = nn.LayerList([nn.Sequential(nn.Linear(WIDTH, HIDDEN), nn.Silu(), nn.Linear(HIDDEN, WIDTH))
                            for _ in range(local)])
    # capacity of the group's tokens, as oarlock train's MoE GPT (moe_model._gate)
    gate = GShardGate(WIDTH, local, world, topk=TOP_K, capacity=(1.2 * world, 2.4 * world), group=group)
    return MoELayer(WIDTH, experts, gate=gate, moe_group=group), oarlock


def run_rank(args) -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if comm.size not in (1, EP):
        raise SystemExit(f"bench/moe.py: the job must have 1 or {EP} ranks; it has {comm.size}")
    import numpy as np
    layer, oarlock = _moe_layer(comm.size)
    clock = ExchangeClock()
    rows = args.tokens * EP // comm.size      # this rank's tokens: the same global batch in both jobs
    data = np.random.default_rng(args.seed + comm.rank)
    x = oarlock.to_tensor(data.standard_normal((rows // 128, 128, WIDTH)).astype("float32"))
    x.stop_gradient = False
    probe = oarlock.to_tensor(data.standard_normal((rows // 128, 128, WIDTH)).astype("float32"))
    steps = []
    for step in range(args.warmup + args.steps):
        comm.Barrier()
        clock.seconds, clock.calls = 0.0, 0
        start = time.perf_counter()
        (layer(x) * probe).sum().backward()
        elapsed = time.perf_counter() - start
        layer.clear_gradients()
        x.clear_gradient()
        layer.gate.get_loss()
        figures = comm.gather((elapsed, clock.seconds, clock.calls), root=0)
        if step >= args.warmup and comm.rank == 0:
            steps.append(figures)
    if comm.rank == 0:
        write_result({"ranks": comm.size, "tokens": rows * comm.size, "steps": steps})


def summarize(result: dict) -> dict:
    steps = result["steps"]
    ranks = result["ranks"]
    step_s = statistics.median(max(f[0] for f in step) for step in steps)
    share = [statistics.median(step[r][1] / step[r][0] for step in steps) for r in range(ranks)]
    return {"ranks": ranks, "tokens": result["tokens"], "step_s": step_s, "tokens_per_s": result["tokens"] / step_s,
            "exchange_share": share, "exchange_calls": steps[-1][0][2]}


def drive(args) -> int:
    launcher = find_launcher("mpiexec", "bench/moe.py")
    if launcher is None:
        return 1
    print(f"MPI: {mpi_library()}; {os.cpu_count()} cpu(s); MoELayer width {WIDTH}, experts {EXPERTS} of hidden "
          f"{HIDDEN}, GShard top-{TOP_K}; {EP * args.tokens} tokens per step in all; {args.steps} measured "
          f"steps after {args.warmup}", flush=True)
    argv = [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items() if k not in ("json", "timeout")]
    table = {}
    for ranks in (1, EP):
        result = run_ranks(launcher, ranks, __file__, argv, args.timeout)
        if result is None:
            return 1
        table[ranks] = summarize(result)
    one, ep = table[1], table[EP]
    print("\n| configuration | step (s) | tokens / s | all-to-all share of the step (per rank) | mean share |")
    print("|---|---|---|---|---|")
    for name, row in ((f"1 process x {EXPERTS} experts", one), (f"{EP} ranks x {EXPERTS // EP} experts (ep{EP})", ep)):
        shares = " / ".join(f"{s:.1%}" for s in row["exchange_share"]) if row["ranks"] > 1 else "-"
        mean = f"{statistics.mean(row['exchange_share']):.1%}" if row["ranks"] > 1 else "-"
        print(f"| {name} | {row['step_s']:.3f} | {row['tokens_per_s']:,.0f} | {shares} | {mean} |")
    print(f"\nep{EP} / one process tokens per second: {ep['tokens_per_s'] / one['tokens_per_s']:.2f}x "
          f"({ep['exchange_calls']} all-to-alls per step and rank)")
    save_json(args.json, {"table": {str(k): v for k, v in table.items()}, "config": vars(args)})
    return 0


if __name__ == "__main__":
    sys.exit(entry(parse_args(), run_rank, drive))
