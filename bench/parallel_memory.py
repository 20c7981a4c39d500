"""Memory per rank under each parallel strategy: parameter, gradient and optimizer-state bytes of the GPT of
examples/hybrid_gpt.py, for one process and for dp4, mp4, sharding stage 1, group_sharded stage 2 and 3 and
dp2 x mp2 on 4 ranks.

The model, its AdamW (with global-norm clipping), the wrapping (fleet.distributed_model /
distributed_optimizer, or group_sharded_parallel) and the per-rank batches are the example's own functions
(build_model, build_optimizer, distribute, step_loss), at a size where the weights dominate: by default vocab
4096, width 256, 4 blocks (5.3 M parameters, 20 MB of float32 weights; MB = 2**20 bytes throughout), global
batch 8 of 16 tokens.

Measured on every rank with the memory counters (oarlock.device.memory_allocated("cpu"): the bytes of live
numpy arrays, counted by oarlock-cpu's allocator hook), after a gc.collect() each time:

- params: the bytes added by building the model, its optimizer and wrapping both;
- grads: the bytes added by the first forward + backward (the gradients held after backward; the
  activations are gone by then);
- opt state: the bytes added by the first optimizer step (AdamW's moments);
- total: the bytes held after the second step (forward, backward, step, before clear_grad), all counted from
  the same starting point (after fleet.init, before the model), so total - (params + grads + opt state) is
  what the second step left besides (it should be ~0);
- peak: max_memory_allocated during the second step (reset before its forward; no gc.collect() inside, as
  in a training loop) above the same start: the weights, gradients and state plus the step's activations,
  gathered weights and communication buffers. Activations follow the per-rank batch: 8 rows for one process
  and mp4, 4 for dp2 x mp2, 2 for dp4 and the sharded runs (so stage 3's peak is best compared with dp4's).

Cross-check, counted from tensors (sum of numel * itemsize): the parameters or stage-3 pieces the optimizer
updates (its param_groups), the gradients of those and of the model's parameters, and the Tensors in the
inner AdamW's state_dict() (the moments of the parameters this rank owns). Tables give the median over ranks,
the peak the maximum over ranks, and each quantity's ratio to the one-process run.

group_sharded 'p_g_os' (stage 3) partitions only parameters of more than segment_size elements; Paddle's
default, 2**20, is not exceeded by any weight of this model (the embedding has exactly 2**20), so the
stage-3 configuration passes --segment-size (default 4096: every weight matrix but the 16 x 256 position
table is split, biases and LayerNorms stay whole), and a second stage-3 row keeps Paddle's default to show
the difference.

Run without MPI, the script is a driver: it launches itself under `mpiexec -n N` once per configuration.

    python bench/parallel_memory.py [--configs 1proc dp4 ...] [--vocab 4096 --width 256 --layers 4] [--json OUT]
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import statistics
import sys

# bench/ is sys.path[0] when this script runs
from _mpi_driver import find_launcher, main as entry, mpi_library, run_ranks, save_json, write_result

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "examples", "hybrid_gpt.py")
PADDLE_SEGMENT_SIZE = 2**20
QUANTITIES = ("params", "grads", "state")

# name -> (ranks, the example's flags, stage-3 segment_size: None = --segment-size, else this value)
CONFIGS = {
    "1proc": (1, [], None),
    "dp4": (4, ["--dp", "4"], None),
    "mp4": (4, ["--mp", "4"], None),
    "sharding4": (4, ["--sharding", "4"], None),
    "os_g": (4, ["--group-sharded", "os_g"], None),
    "p_g_os": (4, ["--group-sharded", "p_g_os"], None),
    "p_g_os-default-segment": (4, ["--group-sharded", "p_g_os"], PADDLE_SEGMENT_SIZE),
    "dp2xmp2": (4, ["--dp", "2", "--mp", "2"], None),
}
LABELS = {
    "1proc": "1 process",
    "dp4": "dp4",
    "mp4": "mp4",
    "sharding4": "sharding 4 (stage 1)",
    "os_g": "group_sharded os_g (stage 2)",
    "p_g_os": "group_sharded p_g_os (stage 3)",
    "p_g_os-default-segment": "p_g_os, segment_size 2**20",
    "dp2xmp2": "dp2 x mp2",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0].replace("\n", " "),
        epilog="Without OARLOCK_BENCH_RANK_MODE=1 in the environment the script launches itself with `mpiexec` "
               "once per configuration and prints the tables; with it (set by that driver) it is one rank of "
               "the configuration --config names.")
    parser.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS), metavar="NAME",
                        help=f"configurations to run, in this order (default: all of {' '.join(CONFIGS)}); the ratios "
                             "are against 1proc, so without it they are left out")
    parser.add_argument("--vocab", type=int, default=4096, help="vocabulary size (default 4096)")
    parser.add_argument("--width", type=int, default=256, help="hidden size (default 256)")
    parser.add_argument("--layers", type=int, default=4, help="transformer blocks (default 4)")
    parser.add_argument("--heads", type=int, default=4, help="attention heads (default 4)")
    parser.add_argument("--batch", type=int, default=8, help="global batch, split over the data-parallel-like "
                                                             "ranks (default 8)")
    parser.add_argument("--seq-len", type=int, default=16, help="sequence length (default 16)")
    parser.add_argument("--segment-size", type=int, default=4096,
                        help="group_sharded stage 3's segment_size: parameters of more elements are partitioned "
                             "(default 4096; the p_g_os-default-segment configuration uses Paddle's 2**20)")
    parser.add_argument("--json", metavar="OUT", help="also write every rank's figures to this JSON file")
    parser.add_argument("--mpiexec", default="mpiexec", help="the launcher (default: mpiexec on PATH)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds one configuration may take (300)")
    parser.add_argument("--config", choices=list(CONFIGS), help=argparse.SUPPRESS)   # a rank's configuration
    return parser


def settle(args):
    if min(args.vocab, args.width, args.layers, args.heads, args.batch, args.seq_len) < 1 or args.segment_size < 0:
        raise SystemExit("parallel_memory.py: sizes must be >= 1 and --segment-size >= 0")
    return args


# -- one rank ------------------------------------------------------------------------------------------------------
def load_example():
    """examples/hybrid_gpt.py as a module (it is not a package)."""
    spec = importlib.util.spec_from_file_location("hybrid_gpt", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def example_args(gpt, args, flags: list):
    """The example's parsed arguments for this model size and configuration (its checks included)."""
    sizes = ["--vocab", args.vocab, "--width", args.width, "--layers", args.layers, "--heads", args.heads,
             "--batch", args.batch, "--seq-len", args.seq_len]
    return gpt.parse_args([str(item) for item in sizes] + flags)[1]


def nbytes(tensors) -> int:
    return sum(int(t.size) * t.dtype.itemsize for t in tensors)


def unique(tensors) -> list:
    seen = {}
    for t in tensors:
        seen.setdefault(id(t), t)
    return list(seen.values())


def state_tensors(value) -> list:
    """The Tensors in an optimizer state_dict (nested dicts such as master_weights included)."""
    import oarlock
    if isinstance(value, oarlock.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for item in value.values() for t in state_tensors(item)]
    return []


def counted(model, adamw) -> dict:
    """The cross-check: bytes of the tensors this rank holds, by kind."""
    from oarlock_parallel import marks
    held = unique([p for group in adamw.param_groups for p in group["params"]])   # stage 3: pieces + whole ones
    grads = [p.grad for p in unique(held + list(model.parameters())) if p.grad is not None]
    return {"params": nbytes(held), "grads": nbytes(unique(grads)), "state": nbytes(state_tensors(adamw.state_dict())),
            "split_params": nbytes(p for p in held if marks.is_distributed(p))}


def run_rank(args) -> None:
    import oarlock
    import oarlock.distributed as dist
    from mpi4py import MPI
    from oarlock.distributed.fleet.meta_parallel import ParallelCrossEntropy

    _, flags, segment_size = CONFIGS[args.config]
    gpt = load_example()
    ex = example_args(gpt, args, flags)
    hcg = gpt.init_fleet(ex)
    comm = MPI.COMM_WORLD.Dup()
    share, shares = gpt.data_share(ex, hcg)
    per_rank = ex.batch // shares
    rows = slice(share * per_rank, (share + 1) * per_rank)
    criterion = ParallelCrossEntropy()

    def held() -> int:
        gc.collect()
        return oarlock.device.memory_allocated("cpu")

    def forward_backward(step):     # the loss and activations die on return
        gpt.step_loss(ex, model, criterion, step, rows).backward()

    start = held()
    model = gpt.build_model(ex, hcg.get_model_parallel_rank(), hcg.get_model_parallel_world_size())
    adamw = gpt.build_optimizer(ex, model)
    model, optimizer = gpt.distribute(ex, model, adamw,
                                      segment_size=args.segment_size if segment_size is None else segment_size)
    wrapped = held()
    forward_backward(0)
    backward = held()
    optimizer.step()
    stepped = held()
    optimizer.clear_grad()
    dist.barrier()
    gc.collect()
    oarlock.device.reset_max_memory_allocated("cpu")
    forward_backward(1)
    optimizer.step()
    peak = oarlock.device.max_memory_allocated("cpu")
    measured = {"params": wrapped - start, "grads": backward - wrapped, "state": stepped - backward,
                "total": held() - start, "peak": peak - start}
    mine = {"measured": measured, "counted": counted(model, adamw)}
    optimizer.clear_grad()
    ranks = comm.gather(mine, root=0)
    if comm.rank == 0:
        write_result({"config": args.config, "ranks": ranks})
    comm.Free()


# -- the driver ----------------------------------------------------------------------------------------------------
def summary(run: dict) -> dict:
    """Medians over ranks (the peak: the maximum)."""
    measured = [rank["measured"] for rank in run["ranks"]]
    out = {key: statistics.median(m[key] for m in measured) for key in (*QUANTITIES, "total")}
    out["peak"] = max(m["peak"] for m in measured)
    counts = [rank["counted"] for rank in run["ranks"]]
    out["counted"] = {key: statistics.median(c[key] for c in counts) for key in counts[0]}
    out["spread"] = {key: (min(m[key] for m in measured), max(m[key] for m in measured)) for key in QUANTITIES}
    return out


def mb(value: float) -> str:
    return f"{value / 2**20:.2f}"


def ratio(value: float, reference: float | None) -> str:
    return f"{value / reference:.3f}" if reference else "-"


def render(results: dict) -> str:
    sums = {name: summary(run) for name, run in results.items()}
    one = sums.get("1proc")
    lines = ["### Memory per rank (MB = 2**20 bytes), measured by memory_allocated(\"cpu\"); medians over ranks, "
             "peak the maximum over ranks",
             "",
             "| strategy | ranks | params | grads | opt state | total | peak | total vs 1 process | params / grads / "
             "state vs 1 process | peak vs 1 process |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, s in sums.items():
        vs = " / ".join(ratio(s[key], one and one[key]) for key in QUANTITIES)
        total_vs, peak_vs = (ratio(s[key], one and one[key]) for key in ("total", "peak"))
        lines.append(f"| {LABELS[name]} | {len(results[name]['ranks'])} | {mb(s['params'])} | {mb(s['grads'])} "
                     f"| {mb(s['state'])} | {mb(s['total'])} | {mb(s['peak'])} | {total_vs} | {vs} | {peak_vs} |")
    lines += ["", "### Cross-check: the same counted from tensors (numel * itemsize; medians over ranks), and the "
                  "range of the measured values over ranks",
              "",
              "| strategy | params counted | grads counted | state counted | measured - counted, KB (p / g / s) "
              "| measured range over ranks (p / g / s) |",
              "|---|---:|---:|---:|---:|---:|"]
    for name, s in sums.items():
        c = s["counted"]
        diff = " / ".join(f"{(s[key] - c[key]) / 2**10:+.1f}" for key in QUANTITIES)
        spread = " / ".join(f"{mb(lo)}-{mb(hi)}" for lo, hi in (s["spread"][key] for key in QUANTITIES))
        lines.append(f"| {LABELS[name]} | {mb(c['params'])} | {mb(c['grads'])} | {mb(c['state'])} | {diff} "
                     f"| {spread} |")
    if one:
        lines += ["", *verdicts(sums, one)]
    return "\n".join(lines)


def verdicts(sums: dict, one: dict) -> list:
    """Each strategy's expected cut against the one-process run: "~1/4" is 0.2..0.32 for the median rank
    (the partitions are by whole parameters, so the ranks' shares differ; the largest is shown too)."""
    def quarter(s, key):
        r, worst = s[key] / one[key], s["spread"][key][1] / one[key]
        return f"{key} {r:.3f} ({'ok' if 0.2 <= r <= 0.32 else 'NOT ~1/4'}; largest rank {worst:.3f})"

    def whole(s, key):
        r = s[key] / one[key]
        return f"{key} {r:.3f} ({'ok' if 0.95 <= r <= 1.05 else 'NOT ~1'})"

    out = ["Checks against the one-process run (measured medians over ranks):"]
    expect = {"dp4": (whole, whole, whole), "sharding4": (whole, whole, quarter),
              "os_g": (whole, quarter, quarter), "p_g_os": (quarter, quarter, quarter)}
    for name, checks in expect.items():
        if name in sums:
            out.append(f"- {LABELS[name]}: " + ", ".join(check(sums[name], key)
                                                         for check, key in zip(checks, QUANTITIES)))
    if "p_g_os" in sums:
        peak = sums["p_g_os"]["peak"]
        same_batch = f", {peak / sums['dp4']['peak']:.3f} of dp4's (the same per-rank batch)" if "dp4" in sums else ""
        out.append(f"- {LABELS['p_g_os']}: peak {peak / one['peak']:.3f} of one process's{same_batch}")
    for name in ("mp4", "dp2xmp2"):
        if name in sums:
            c = sums[name]["counted"]
            whole_bytes = c["params"] - c["split_params"]             # replicated over mp: kept whole
            degree = 4 if name == "mp4" else 2
            share = c["split_params"] / (one["counted"]["params"] - whole_bytes)
            out.append(f"- {LABELS[name]}: split weights {mb(c['split_params'])} MB per rank = {share:.3f} of one "
                       f"process's (expected 1/{degree}); replicated {mb(whole_bytes)} MB; params "
                       f"{sums[name]['params'] / one['params']:.3f}, state {sums[name]['state'] / one['state']:.3f}")
    return out


def rank_arguments(args, name: str) -> list:
    return ["--config", name, "--vocab", str(args.vocab), "--width", str(args.width), "--layers", str(args.layers),
            "--heads", str(args.heads), "--batch", str(args.batch), "--seq-len", str(args.seq_len),
            "--segment-size", str(args.segment_size)]


def drive(args) -> int:
    launcher = find_launcher(args.mpiexec, "parallel_memory.py")
    if launcher is None:
        return 2
    print(f"GPT vocab {args.vocab}, width {args.width}, {args.layers} blocks, {args.heads} heads, global batch "
          f"{args.batch} x {args.seq_len} tokens, AdamW; {mpi_library()}", flush=True)
    results, status = {}, 0
    for name in args.configs:
        nranks = CONFIGS[name][0]
        print(f"{LABELS[name]} on {nranks} rank{'s' if nranks > 1 else ''} ...", file=sys.stderr, flush=True)
        run = run_ranks(launcher, nranks, __file__, rank_arguments(args, name), args.timeout)
        if run is None:
            status = 1
            continue
        results[name] = run
    if results:
        print(render(results), flush=True)
    save_json(args.json, {"args": {k: v for k, v in vars(args).items() if k not in ("json", "config")},
                          "runs": results})
    return status


def main(argv=None) -> int:
    return entry(settle(build_parser().parse_args(argv)), run_rank, drive)


if __name__ == "__main__":
    sys.exit(main())
