"""The parallel planner's predictions against `oarlock train`: for the GPT at three workloads (the presets tiny:
batch 8 x seq-len 64, small: 16 x 128, medium: 32 x 256; oarlock train's GPT is width 128, 4 layers, 4 heads
at every size) on 4 ranks, `oarlock.distributed.plan` probes this machine and predicts every layout's step
time and peak memory per rank; then each layout runs for --steps steps through `oarlock train --log-dir` and
its TensorBoard scalars give the measured figures:

- step time: tokens per step / train/tokens_per_s (the wall time of forward, backward and optimizer step,
  timed by rank 0), median over the steps after the first;
- peak memory: memory/max_allocated_mib of the last step (rank 0's counter, the peak since the run began; under pp
  rank 0 is the first stage: it is compared with the planner's prediction for that stage, which with 4 stages of
  4 layers holds the embedding alone, not with the fullest stage the planner plans with).

The table gives both with their ratio, and for each size the planner's top choice against the fastest measured
layout: the top choice passes when its measured step time is within 15% of the fastest's. At the end the same
rows are printed as the README's Markdown table (Planner section), with the probe's time and contention factor
and the 15% check per size.

    python bench/planner.py [--sizes tiny small medium] [--ranks 4] [--steps 6] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

try:
    import _checkout
except ImportError:   # run from elsewhere: the bench folder's helper
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _checkout

_checkout.bootstrap()

MIB = 2 ** 20


def measure(spec, layout, steps: int, tmp: str) -> dict:
    """Step time (s) and peak memory (bytes) of `layout` trained by `oarlock train` for `steps` steps."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log = os.path.join(tmp, layout.name())
    command = [sys.executable, "-m", "oarlock.cli", "train", *layout.train_flags(), "--batch-size", str(spec.batch),
               "--seq-len", str(spec.seq_len), "--steps", str(steps), "--eval-every", str(steps), "--sample-len", "0",
               "--log-dir", log, "--out", os.path.join(tmp, layout.name() + "-out")]
    t0 = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        return {"error": f"oarlock train failed ({done.returncode}): {done.stderr[-800:]}"}
    events = EventAccumulator(log, size_guidance={"scalars": 0})
    events.Reload()
    rates = [e.value for e in events.Scalars("train/tokens_per_s")][1:]
    peak = events.Scalars("memory/max_allocated_mib")[-1].value * MIB
    tokens = spec.batch * spec.seq_len
    return {"step_seconds": statistics.median(tokens / r for r in rates), "memory_bytes": peak,
            "wall_seconds": time.perf_counter() - t0}


def bench_size(name: str, ranks: int, steps: int, reps: int) -> dict:
    from oarlock_autoparallel.planner import plan

    result = plan(name, ranks, "64GiB", reps=reps)
    print(f"\n== {name}: {result.spec.describe()}; probe {result.calibration.seconds:.1f} s "
          f"(contention x{result.calibration.contention:.2f})", flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-planner-") as tmp:
        for rank, p in enumerate(result.candidates, 1):
            got = measure(result.spec, p.layout, steps, tmp)
            # memory is measured on rank 0: under pp the first stage, which the planner predicts apart from the
            # fullest stage it plans with
            row = {"layout": p.layout.name(), "planner_rank": rank, "predicted_step_seconds": p.step_seconds,
                   "predicted_memory_bytes": p.memory_parts.get("first stage (rank 0)", p.memory_bytes),
                   "predicted_fullest_memory_bytes": p.memory_bytes, **got}
            rows.append(row)
            print(_line(row), flush=True)
    ok = [r for r in rows if "error" not in r]
    top = rows[0]
    fastest = min(ok, key=lambda r: r["step_seconds"]) if ok else None
    verdict = None
    if fastest is not None and "error" not in top:
        verdict = top["step_seconds"] / fastest["step_seconds"] - 1
        print(f"top choice {top['layout']}: {top['step_seconds'] * 1e3:.0f} ms measured; fastest measured "
              f"{fastest['layout']}: {fastest['step_seconds'] * 1e3:.0f} ms; top choice {verdict:+.1%} "
              f"({'within' if verdict <= 0.15 else 'NOT within'} 15%)", flush=True)
    return {"size": name, "model": result.spec.to_dict(), "calibration_seconds": result.calibration.seconds,
            "contention": result.calibration.contention, "rows": rows, "top_vs_fastest": verdict}


HEADER = (f"{'rank':>4} {'layout':<10} {'pred ms':>8} {'meas ms':>8} {'ratio':>6}  {'pred MiB':>8} {'meas MiB':>8} "
          f"{'ratio':>6}")


def _line(r: dict) -> str:
    if "error" in r:
        return f"{r['planner_rank']:>4} {r['layout']:<10} {r['predicted_step_seconds'] * 1e3:>8.0f} {r['error']}"
    return (f"{r['planner_rank']:>4} {r['layout']:<10} {r['predicted_step_seconds'] * 1e3:>8.0f} "
            f"{r['step_seconds'] * 1e3:>8.0f} {r['predicted_step_seconds'] / r['step_seconds']:>6.2f}  "
            f"{r['predicted_memory_bytes'] / MIB:>8.1f} {r['memory_bytes'] / MIB:>8.1f} "
            f"{r['predicted_memory_bytes'] / r['memory_bytes']:>6.2f}")


def markdown(results: list) -> str:
    """The README's table of predicted against measured, and its 15% check line, for `results`."""
    lines = ["| size (batch x seq) | planner rank | layout | predicted ms | measured ms | ratio | predicted MiB | "
             "measured MiB | ratio |", "|---|---|---|---|---|---|---|---|---|"]
    checks = []
    for res in results:
        size = f"{res['size']} ({res['model']['batch']} x {res['model']['seq_len']})"
        for r in res["rows"]:
            if "error" in r:
                lines.append(f"| {size} | {r['planner_rank']} | {r['layout']} | "
                             f"{r['predicted_step_seconds'] * 1e3:.0f} | failed | | | | |")
                continue
            lines.append(f"| {size} | {r['planner_rank']} | {r['layout']} | {r['predicted_step_seconds'] * 1e3:.0f} | "
                         f"{r['step_seconds'] * 1e3:.0f} | {r['predicted_step_seconds'] / r['step_seconds']:.2f} | "
                         f"{r['predicted_memory_bytes'] / MIB:.1f} | {r['memory_bytes'] / MIB:.1f} | "
                         f"{r['predicted_memory_bytes'] / r['memory_bytes']:.2f} |")
        ok = [r for r in res["rows"] if "error" not in r]
        v = res["top_vs_fastest"]
        if v is None or not ok:
            checks.append(f"{res['size']}: n/a")
            continue
        top, fastest = res["rows"][0], min(ok, key=lambda r: r["step_seconds"])
        checks.append(f"{res['size']}: {top['layout']} {top['step_seconds'] * 1e3:,.0f} ms against {fastest['layout']} "
                      f"{fastest['step_seconds'] * 1e3:,.0f} ms, {v:+.1%}, "
                      f"**{'within' if v <= 0.15 else 'not within'} 15%**")
    probes = ", ".join(f"{res['size']} {res['calibration_seconds']:.1f} s (contention x{res['contention']:.1f})"
                       for res in results)
    return "\n".join(lines) + "\n\nprobe: " + probes + "\n\nThe 15% check: " + "; ".join(checks) + "."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["tiny", "small", "medium"])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--reps", type=int, default=2, help="timings per probe measurement")
    parser.add_argument("--json", default=None, help="also write the results as JSON here")
    args = parser.parse_args()
    print(HEADER)
    results = [bench_size(name, args.ranks, args.steps, args.reps) for name in args.sizes]
    print("\nsummary (measured step time of the planner's top choice vs the fastest measured layout):")
    for res in results:
        v = res["top_vs_fastest"]
        print(f"  {res['size']:<7} {'n/a' if v is None else f'{v:+.1%}'}")
    print("\nfor the README (Planner section):\n")
    print(markdown(results))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
