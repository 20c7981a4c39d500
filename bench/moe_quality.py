"""The MoE GPT against the dense GPT of the same active parameter count: validation loss after the same steps.

Both are `oarlock train` runs (each in its own process, one after the other) with the same options, seed
and batches, on the embedded default corpus (the standard library's docstrings):

- dense: the default GPT (width 128, 4 blocks, MLP hidden 512);
- moe:   `--moe-experts 8 --moe-top-k 2 --moe-expert-hidden 256`: every block's MLP is 8 experts of
         hidden 256 behind a GShard top-2 gate; a token runs 2 experts, 2 x 256 = 512 hidden units, the
         dense MLP's (each block's gate Linear(128, 8) and the second expert's output bias are the extra
         active weights: 4 x (1,032 + 128) = 4,640, 0.5 %).

The table gives each run's parameters (all and active per token), its validation loss at every evaluation
and the final one, and its training time (the machine's load shows in it; the losses do not depend on it).

    python bench/moe_quality.py [--steps 500] [--seed 0] [--eval-every 100] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

RUNS = {"dense": [], "moe": ["--moe-experts", "8", "--moe-top-k", "2", "--moe-expert-hidden", "256"]}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=500, help="training steps of each run (default 500, the "
                                                               "`oarlock train` default)")
    parser.add_argument("--seed", type=int, default=0, help="seed of both runs (default 0)")
    parser.add_argument("--eval-every", type=int, default=100, help="steps between evaluations (default 100)")
    parser.add_argument("--extra", nargs=argparse.REMAINDER, default=[],
                        help="more `oarlock train` options for both runs (after everything else)")
    parser.add_argument("--json", metavar="OUT", default=None, help="write the figures as JSON")
    return parser.parse_args(argv)


def train(name: str, args, out: str) -> dict:
    """One `oarlock train` run in its own process: its parameter counts, validation losses and time."""
    command = [sys.executable, "-m", "oarlock_train", "--steps", str(args.steps), "--seed", str(args.seed),
               "--eval-every", str(args.eval_every), "--sample-len", "0", "--out", out, *RUNS[name], *args.extra]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"bench/moe_quality.py: the {name} run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    text = done.stdout
    counts = re.search(r"model: ([\d,]+) parameters(?: \(([\d,]+) active)?", text)
    seconds = float(re.search(r"trained to step \d+/\d+ in ([\d.]+) s", text).group(1))
    with open(os.path.join(out, "trainer.json")) as fh:
        history = json.load(fh)["history"]
    total = int(counts.group(1).replace(",", ""))
    active = int(counts.group(2).replace(",", "")) if counts.group(2) else total
    return {"parameters": total, "active": active, "valid": history["valid"], "seconds": seconds,
            "last_train": history["train"][-1]}


def main(argv=None) -> int:
    args = parse_args(argv)
    results = {}
    with tempfile.TemporaryDirectory(prefix="moe-quality-") as tmp:
        for name in RUNS:
            print(f"training {name}: {args.steps} steps ...", file=sys.stderr, flush=True)
            results[name] = train(name, args, os.path.join(tmp, name))
    steps = [step for step, _ in results["dense"]["valid"]]
    print(f"{args.steps} steps of 16 x 128 bytes, seed {args.seed}, the same batches for both")
    print("\n| model | parameters | active per token | " + " | ".join(f"val @ {s}" for s in steps) +
          " | train time (s) |")
    print("|---|---|---|" + "---|" * len(steps) + "---|")
    for name, run in results.items():
        print(f"| {name} | {run['parameters']:,} | {run['active']:,} | " +
              " | ".join(f"{loss:.4f}" for _, loss in run["valid"]) + f" | {run['seconds']:.0f} |")
    dense, moe = results["dense"]["valid"][-1][1], results["moe"]["valid"][-1][1]
    verdict = "lower" if moe < dense else "not lower"
    print(f"\nfinal validation loss: MoE {moe:.4f} vs dense {dense:.4f} nats/byte ({moe - dense:+.4f}; the MoE "
          f"GPT's is {verdict})")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"config": vars(args), "runs": results}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
