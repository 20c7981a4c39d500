"""Profile one training step of a bench/train_step.py model with oarlock.profiler.

--model gpt (default): the GPT of `oarlock train`, GPT(GPTConfig(max_seq_len=128)), batch 16 x 128, AdamW;
tfm: the plain transformer of ordinary ops; mlp: the MLP with SGD (the very steps bench/train_step.py
times, from the same weights). After --warmup unprofiled steps,
one step runs under Profiler(record_shapes=True); the step's Chrome trace is written to --out and read
back, the summary table is printed, and the coverage: the summed durations of the step's top-level op
events (forward ops, autograd nodes, optimizer ops: events inside no other op) over the step's wall time
(its ProfileStep#0 event). The rest is Python between ops that no op event holds. Also printed: the
step's time without the profiler (median of --steps), so the profiler's own cost shows.

    python bench/profile_step.py [--model gpt|tfm|mlp] [--out profile_log] [--memory] [--steps 5]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
import time

import oarlock.profiler as profiler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_step  # noqa: E402  (bench/train_step.py: the models and their steps)


def top_level(events):
    """The "X" events of one thread that lie inside no other op event ("Operator" category)."""
    ops = sorted((e for e in events if e.get("cat") == "Operator"), key=lambda e: (e["ts"], -e["dur"]))
    top, end = [], -1.0
    for e in ops:
        if e["ts"] >= end:   # starts after the last top-level op ended: not nested in it
            top.append(e)
            end = e["ts"] + e["dur"]
    return top


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="gpt", choices=sorted(train_step.MODELS),
                        help="the bench/train_step.py model to profile (default gpt)")
    parser.add_argument("--out", default="profile_log", help="directory for the Chrome trace (default profile_log)")
    parser.add_argument("--memory", action="store_true", help="profile_memory=True (bytes per op)")
    parser.add_argument("--warmup", type=int, default=3, help="unprofiled steps first (default 3)")
    parser.add_argument("--steps", type=int, default=5, help="unprofiled steps timed for the reference (default 5)")
    args = parser.parse_args(argv)

    step, _ = train_step.oarlock_step(args.model)

    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    plain = statistics.median(times)

    before = set(glob.glob(os.path.join(args.out, "*.json")))
    with profiler.Profiler(scheduler=(0, 1), on_trace_ready=profiler.export_chrome_tracing(args.out),
                           record_shapes=True, profile_memory=args.memory) as prof:
        step()
        prof.step()
    prof.summary(op_detail=True, time_unit="ms",
                 views=[profiler.SummaryView.OverView, profiler.SummaryView.OperatorView] +
                 ([profiler.SummaryView.MemoryView] if args.memory else []))

    (path,) = set(glob.glob(os.path.join(args.out, "*.json"))) - before
    with open(path) as f:
        trace = json.load(f)["traceEvents"]
    (step_event,) = [e for e in trace if e.get("name") == "ProfileStep#0"]
    lo, hi = step_event["ts"], step_event["ts"] + step_event["dur"]
    inside = [e for e in trace if e.get("ph") == "X" and e["tid"] == step_event["tid"] and lo <= e["ts"] <= hi]
    top = top_level(inside)
    covered = sum(e["dur"] for e in top)
    kinds = {"forward ops": 0.0, "autograd nodes": 0.0, "optimizer ops": 0.0}
    for e in top:
        kind = ("autograd nodes" if e["args"].get("backward") else
                "optimizer ops" if e["name"].endswith("_") else "forward ops")
        kinds[kind] += e["dur"]
    wall = step_event["dur"]
    print(f"trace: {path} ({len(trace)} events)")
    print(f"step wall time under the profiler: {wall / 1e3:.1f} ms; without it: {plain * 1e3:.1f} ms "
          f"(median of {args.steps})")
    print(f"top-level op events: {len(top)}, summing to {covered / 1e3:.1f} ms: "
          + ", ".join(f"{k} {v / 1e3:.1f} ms" for k, v in kinds.items()))
    print(f"coverage: {covered / wall:.4f} (uncovered {(wall - covered) / 1e3:.2f} ms, "
          f"{(wall - covered) / max(len(top), 1) * 1e3:.0f} ns per top-level op)")


if __name__ == "__main__":
    main()
