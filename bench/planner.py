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

The planner runs with --trials K (default 3): its top K candidates are tried for a few oarlock train steps
(planner_trial, the same measurement) and its choice is the fastest of those. The table gives the predicted, the
trial-measured (for those tried) and the measured figures with their ratio, and for each size two 15% checks, each
judged by this benchmark's own runs: the model's top choice, and the top choice after the trials, against the
fastest measured layout (a choice passes when its measured step time is within 15% of the fastest's). At the end
the same rows are printed as the README's Markdown table (Planner section), with the probe's and the trials' time.

    python bench/planner.py [--sizes tiny small medium] [--ranks 4] [--steps 6] [--trials 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
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


def _check(rows: list, layout: str, what: str) -> float | None:
    """How much slower (a fraction) the measured step of `layout` is than the fastest measured row's; printed."""
    ok = [r for r in rows if "error" not in r]
    top = next(r for r in rows if r["layout"] == layout)
    if not ok or "error" in top:
        return None
    fastest = min(ok, key=lambda r: r["step_seconds"])
    verdict = top["step_seconds"] / fastest["step_seconds"] - 1
    print(f"{what} {layout}: {top['step_seconds'] * 1e3:.0f} ms measured; fastest measured {fastest['layout']}: "
          f"{fastest['step_seconds'] * 1e3:.0f} ms; {verdict:+.1%} ({'within' if verdict <= 0.15 else 'NOT within'} "
          f"15%)", flush=True)
    return verdict


def bench_size(name: str, ranks: int, steps: int, reps: int, trials: int) -> dict:
    from oarlock_autoparallel.planner import plan
    from oarlock_autoparallel.planner_trial import measure

    t0 = time.perf_counter()
    result = plan(name, ranks, "64GiB", reps=reps, trials=trials)
    trial_seconds = time.perf_counter() - t0 - result.calibration.seconds
    print(f"\n== {name}: {result.spec.describe()}; probe {result.calibration.seconds:.1f} s "
          f"(contention x{result.calibration.contention:.2f}); {trials} trials {trial_seconds:.1f} s", flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-planner-") as tmp:
        for rank, p in enumerate(result.candidates, 1):
            got = measure(result.spec, p.layout, steps, tmp)
            # memory is measured on rank 0: under pp the first stage, which the planner predicts apart from the
            # fullest stage it plans with
            trial = result.trials.get(p.layout.name(), {})
            row = {"layout": p.layout.name(), "planner_rank": rank, "predicted_step_seconds": p.step_seconds,
                   "predicted_memory_bytes": p.memory_parts.get("first stage (rank 0)", p.memory_bytes),
                   "predicted_fullest_memory_bytes": p.memory_bytes, "trial_step_seconds": trial.get("step_seconds"),
                   **got}
            rows.append(row)
            print(_line(row), flush=True)
    # both choices are judged by this benchmark's own runs, not by the trial's (which chose the second)
    verdict = _check(rows, result.predicted_best.layout.name(), "the model's top choice")
    refined = _check(rows, result.best.layout.name(), f"the top choice after {trials} trials") if trials else None
    return {"size": name, "model": result.spec.to_dict(), "calibration_seconds": result.calibration.seconds,
            "contention": result.calibration.contention, "rows": rows, "top_vs_fastest": verdict,
            "trials": trials, "trial_seconds": trial_seconds, "trial_best": result.best.layout.name(),
            "trial_best_vs_fastest": refined}


HEADER = (f"{'rank':>4} {'layout':<10} {'pred ms':>8} {'trial ms':>8} {'meas ms':>8} {'ratio':>6}  {'pred MiB':>8} "
          f"{'meas MiB':>8} {'ratio':>6}")


def _ms(seconds) -> str:
    return "" if seconds is None else f"{seconds * 1e3:.0f}"


def _line(r: dict) -> str:
    if "error" in r:
        return f"{r['planner_rank']:>4} {r['layout']:<10} {r['predicted_step_seconds'] * 1e3:>8.0f} {r['error']}"
    return (f"{r['planner_rank']:>4} {r['layout']:<10} {r['predicted_step_seconds'] * 1e3:>8.0f} "
            f"{_ms(r['trial_step_seconds']):>8} {r['step_seconds'] * 1e3:>8.0f} "
            f"{r['predicted_step_seconds'] / r['step_seconds']:>6.2f}  "
            f"{r['predicted_memory_bytes'] / MIB:>8.1f} {r['memory_bytes'] / MIB:>8.1f} "
            f"{r['predicted_memory_bytes'] / r['memory_bytes']:>6.2f}")


def _verdict(res: dict, layout: str, v) -> str:
    ok = [r for r in res["rows"] if "error" not in r]
    if v is None or not ok:
        return "n/a"
    top = next(r for r in res["rows"] if r["layout"] == layout)
    fastest = min(ok, key=lambda r: r["step_seconds"])
    return (f"{layout} {top['step_seconds'] * 1e3:,.0f} ms against {fastest['layout']} "
            f"{fastest['step_seconds'] * 1e3:,.0f} ms, {v:+.1%}, **{'within' if v <= 0.15 else 'not within'} 15%**")


def markdown(results: list) -> str:
    """The README's table of predicted (and trial-measured) against measured, and its 15% check lines (the
    model's top choice, the trial-refined one), for `results`."""
    lines = ["| size (batch x seq) | planner rank | layout | predicted ms | trial ms | measured ms | ratio | "
             "predicted MiB | measured MiB | ratio |", "|---|---|---|---|---|---|---|---|---|---|"]
    checks, refined = [], []
    for res in results:
        size = f"{res['size']} ({res['model']['batch']} x {res['model']['seq_len']})"
        for r in res["rows"]:
            head = (f"| {size} | {r['planner_rank']} | {r['layout']} | {r['predicted_step_seconds'] * 1e3:.0f} | "
                    f"{_ms(r.get('trial_step_seconds'))} | ")
            if "error" in r:
                lines.append(head + "failed | | | | |")
                continue
            lines.append(head + f"{r['step_seconds'] * 1e3:.0f} | "
                         f"{r['predicted_step_seconds'] / r['step_seconds']:.2f} | "
                         f"{r['predicted_memory_bytes'] / MIB:.1f} | {r['memory_bytes'] / MIB:.1f} | "
                         f"{r['predicted_memory_bytes'] / r['memory_bytes']:.2f} |")
        checks.append(f"{res['size']}: " + _verdict(res, res["rows"][0]["layout"], res["top_vs_fastest"]))
        if res.get("trials"):
            refined.append(f"{res['size']}: " + _verdict(res, res["trial_best"], res["trial_best_vs_fastest"]))
    probes = ", ".join(f"{res['size']} {res['calibration_seconds']:.1f} s (contention x{res['contention']:.1f})"
                       + (f", {res['trials']} trials {res['trial_seconds']:.1f} s" if res.get("trials") else "")
                       for res in results)
    text = "\n".join(lines) + "\n\nprobe: " + probes + "\n\nThe 15% check, the model's top choice: " + "; ".join(checks)
    if refined:
        text += ".\n\nThe 15% check, the top choice after the trials: " + "; ".join(refined)
    return text + "."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["tiny", "small", "medium"])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--reps", type=int, default=2, help="timings per probe measurement")
    parser.add_argument("--trials", type=int, default=3,
                        help="the planner's trial stage: its top K candidates tried before its choice (default 3)")
    parser.add_argument("--json", default=None, help="also write the results as JSON here")
    args = parser.parse_args()
    print(HEADER)
    results = [bench_size(name, args.ranks, args.steps, args.reps, args.trials) for name in args.sizes]
    print("\nsummary (measured step time of the planner's top choice vs the fastest measured layout; the model's "
          "choice, then the choice after the trials):")
    for res in results:
        v, t, best = res["top_vs_fastest"], res["trial_best_vs_fastest"], res["trial_best"]
        print(f"  {res['size']:<7} {'n/a' if v is None else f'{v:+.1%}'}  "
              f"{'n/a' if t is None else f'{t:+.1%} ({best})'}")
    print("\nfor the README (Planner section):\n")
    print(markdown(results))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
