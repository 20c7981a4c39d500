"""`oarlock plan`: the parallel planner as a command (planner.plan), optionally launching the best layout with
`oarlock train`."""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys

HELP = "plan how to split the GPT of `oarlock train` over N ranks: predicted step time and memory per layout"

DESCRIPTION = """\
Enumerate the layouts (dp x mp x pp x sharding x ep) of the GPT that `oarlock train` can run on --ranks ranks
(mp divides the heads, vocabulary and MLP width; pp divides the layers and combines with dp only; the data ranks
share the batch; ep only with --model experts=E), predict each one's step time and peak memory per rank, drop
those over --memory-per-rank, and print them fastest first.

The predictions come from a short probe of this machine (a progress bar on stderr): one transformer block's (two
stacked: what a block adds in a model) and the embedding + head's forward and backward time and memory measured
in this process at each layout's shapes, the AdamW step, and a job on --ranks ranks (`oarlock launch`) timing
all_reduce, all_gather and send/recv (fitted to latency + bytes / bandwidth), the same shapes computed by all ranks
at once (they share the cores), and the wait an all-reduce between compute segments adds. The model: the
all-at-once compute + tensor-parallel all-reduces of the activations (each with that wait) + the gradient
all-reduce over the data ranks + the 1F1B pipeline's micro-batch slots and its stages - 1 fill / drain slots (at
the speed of the ranks busy then) and sends + the optimizer step; memory: parameters, AdamW moments / sharding,
the corpus, and the larger of the gradients (with DataParallel's bucket copies) and the measured activations
(times the micro-batches in flight on a pipeline's first stage) plus the largest backward transient. Not
modelled: --sp, --vpp, other pipeline schedules, --recompute, --memory-budget; a mixture-of-experts block is
costed as a dense one of top_k x the MLP width.

--model takes a preset (tiny: batch 8 x seq-len 64; small: 16 x 128; medium: 32 x 256; all the GPT of oarlock
train: width 128, 4 layers, 4 heads, vocab 256) and/or comma-separated key=value overrides of width, layers,
heads, vocab, seq_len, batch, mlp_ratio, experts, top_k (e.g. "small,batch=32" or "experts=4,top_k=2").
Models of another width, depth, head count or vocabulary can be planned but not launched (oarlock train builds
its GPT only).

--launch then runs `oarlock train` with the best layout's --nproc/--dp/--mp/--pp/--sharding/--ep flags, the
model's --batch-size and --seq-len (and --moe-experts/--moe-top-k), plus --train-args."""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    add = parser.add_argument
    add("--model", default="small", metavar="CONFIG",
        help="preset tiny|small|medium and/or key=value pairs, comma-separated (default small)")
    add("--ranks", type=int, required=True, metavar="N", help="ranks to plan for (an integer >= 1)")
    add("--memory-per-rank", required=True, metavar="BYTES",
        help="memory each rank may use, e.g. 200MB or 1.5GiB; layouts predicted above it are left out")
    add("--reps", type=int, default=2, metavar="R",
        help="timed repetitions of each probe measurement, after one warm-up (default 2)")
    add("--calibration", metavar="FILE",
        help="read the probe's results from FILE (written by --save-calibration for the same --model and "
             "--ranks) instead of probing")
    add("--save-calibration", metavar="FILE", help="write the probe's results to FILE (JSON)")
    add("--json", action="store_true", help="print the ranked layouts as JSON instead of a table")
    add("--launch", action="store_true", help="run `oarlock train` with the best layout (see above)")
    add("--train-args", default="", metavar="ARGS",
        help="more options for `oarlock train` with --launch, as one string, e.g. \"--steps 100 --out run1\"")


def train_command(result) -> list[str]:
    """The `oarlock train` command line that runs the result's best layout."""
    spec = result.spec
    command = [sys.executable, "-m", "oarlock.cli", "train", *result.best.layout.train_flags(),
               "--batch-size", str(spec.batch), "--seq-len", str(spec.seq_len)]
    if spec.experts:
        command += ["--moe-experts", str(spec.experts), "--moe-top-k", str(spec.top_k)]
    return command


def _as_json(result) -> str:
    rows = [{"layout": p.layout.name(), "fits": i < len(result.candidates), "step_seconds": p.step_seconds,
             "memory_bytes": p.memory_bytes, "train_flags": p.layout.train_flags(), "time_parts": p.time_parts,
             "memory_parts": p.memory_parts} for i, p in enumerate(result.candidates + result.too_big)]
    return json.dumps({"model": result.spec.to_dict(), "ranks": result.ranks,
                       "memory_per_rank": result.memory_per_rank, "layouts": rows}, indent=1)


def run(args) -> int:
    from oarlock_autoparallel.planner import plan
    from oarlock_autoparallel.planner_model import parse_model
    from oarlock_autoparallel.planner_probe import Calibration

    try:
        if args.reps < 1:
            raise ValueError(f"argument --reps: expected an integer >= 1, got {args.reps}")
        calibration = Calibration.load(args.calibration) if args.calibration else None
        spec = parse_model(args.model)
        if args.launch and not spec.launchable:
            raise ValueError("argument --launch: oarlock train builds its GPT at width 128, 4 layers, 4 heads, "
                             f"vocab 256 only; --model asks for {spec.describe()}")
        result = plan(spec, args.ranks, args.memory_per_rank, calibration, args.reps)
    except (ValueError, OSError) as exc:
        text = str(exc).replace("plan(): argument ", "argument --").replace("memory_per_rank", "memory-per-rank")
        print(f"oarlock plan: error: {text}", file=sys.stderr)
        return 2
    if args.save_calibration:
        result.calibration.save(args.save_calibration)
    if args.json:
        print(_as_json(result))
    else:
        print(f"{result.spec.describe()}; {result.ranks} ranks, {result.memory_per_rank:,} bytes each; probe "
              f"{result.calibration.seconds:.1f} s")
        print(result.table())
        print("best: oarlock train " + " ".join(result.best.layout.train_flags()))
    if args.launch:
        command = train_command(result) + shlex.split(args.train_args)
        print("launching: " + " ".join(shlex.quote(c) for c in command), flush=True)
        return subprocess.call(command)
    return 0


def register(cli) -> None:
    cli.add("plan", HELP, configure, run)
