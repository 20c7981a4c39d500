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
at once (they share the cores; each run counted for the slowest rank), sharding stage 1's per-tensor reduces and
broadcasts, and the wait an all-reduce or a send/recv exchange between compute segments adds. The model: the
all-at-once compute + tensor-parallel all-reduces of the activations (each with that wait) + the gradient
all-reduce over the data ranks (with sharding: its measured per-tensor collectives, then the owned gradients'
all-reduce over dp) + the 1F1B pipeline's micro-batch slots and its stages - 1 fill / drain slots (at the speed of
the ranks busy then) and sends and receives (each with that wait) + the optimizer step; memory: parameters, AdamW
moments / sharding, the corpus, and the larger of the gradients (with DataParallel's bucket copies) and the
measured activations (times the micro-batches in flight on a pipeline's first stage) plus the largest backward
transient. Not
modelled: --sp, --vpp, other pipeline schedules, --recompute, --memory-budget; a mixture-of-experts block is
costed as a dense one of top_k x the MLP width.

--model takes a preset (tiny: batch 8 x seq-len 64; small: 16 x 128; medium: 32 x 256; all the GPT of oarlock
train: width 128, 4 layers, 4 heads, vocab 256) and/or comma-separated key=value overrides of width, layers,
heads, vocab, seq_len, batch, mlp_ratio, experts, top_k (e.g. "small,batch=32" or "experts=4,top_k=2").
Models of another width, depth, head count or vocabulary can be planned but not launched (oarlock train builds
its GPT only).

--trials K then runs the first K layouts predicted within --trial-margin of the best for --trial-steps steps of
`oarlock train` each and ranks those by their measured step time (the table's "trial (ms)" column); the fastest
measured is the best. Each trial costs oarlock train's start-up on --ranks ranks (a few seconds on an idle
machine), its steps and one evaluation: on a 2-core machine 10-15 s per trial for the tiny workload (more for
larger ones). Default 0 (no trial: the model's top choice is the best).

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
    add("--trials", type=int, default=0, metavar="K",
        help="run the top K candidates for a few oarlock train steps each and take the fastest measured (see "
             "above; 10-15 s each for tiny; default 0: no trial)")
    add("--trial-steps", type=int, default=4, metavar="S",
        help="steps of each trial, the first not counted (an integer >= 2, default 4)")
    add("--trial-margin", type=float, default=1.0, metavar="F",
        help="try only layouts predicted within F x the best prediction above it (default 1.0: up to twice it)")
    add("--json", action="store_true", help="print the ranked layouts as JSON instead of a table")
    add("--launch", action="store_true", help="run `oarlock train` with the best layout (see above)")
    add("--train-args", default="", metavar="ARGS",
        help="more options for `oarlock train` with --launch, as one string, e.g. \"--steps 100 --out run1\"")


def train_command(result) -> list[str]:
    """The `oarlock train` command line that runs the result's best layout."""
    from oarlock_autoparallel.planner_trial import train_command as command_for
    return command_for(result.spec, result.best.layout)


def _as_json(result) -> str:
    rows = [{"layout": p.layout.name(), "fits": i < len(result.candidates), "step_seconds": p.step_seconds,
             "memory_bytes": p.memory_bytes, "train_flags": p.layout.train_flags(), "time_parts": p.time_parts,
             "memory_parts": p.memory_parts, "trial": result.trials.get(p.layout.name())}
            for i, p in enumerate(result.candidates + result.too_big)]
    return json.dumps({"model": result.spec.to_dict(), "ranks": result.ranks,
                       "memory_per_rank": result.memory_per_rank, "best": result.best.layout.name(),
                       "layouts": rows}, indent=1)


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
        result = plan(spec, args.ranks, args.memory_per_rank, calibration, args.reps, trials=args.trials,
                      trial_steps=args.trial_steps, trial_margin=args.trial_margin)
    except (ValueError, OSError) as exc:
        text = str(exc).replace("plan(): argument ", "argument --").replace("memory_per_rank", "memory-per-rank")
        text = text.replace("trial_steps", "trial-steps").replace("trial_margin", "trial-margin")
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
        if result.trials:
            print(f"the model's top choice: {result.predicted_best.layout.name()}; fastest measured in the trials: "
                  f"{result.best.layout.name()}")
        print("best: oarlock train " + " ".join(result.best.layout.train_flags()))
    if args.launch:
        command = train_command(result) + shlex.split(args.train_args)
        print("launching: " + " ".join(shlex.quote(c) for c in command), flush=True)
        return subprocess.call(command)
    return 0


def register(cli) -> None:
    cli.add("plan", HELP, configure, run)
