"""The planner's trial stage (`plan(..., trials=K)`, `oarlock plan --trials K`), as Paddle's auto-tuner
(paddle.distributed.auto_tuner) does it: the model's top K candidates, among those predicted within `margin` of
the best, each run for a few real `oarlock train` steps; they are then ranked by the measured step time.

A trial is `oarlock train` with the layout's flags and the model's workload, `--steps S --log-dir DIR` in a
temporary directory; its TensorBoard scalars give the step time (tokens per step / train/tokens_per_s: the wall
time of forward, backward and optimizer step timed by rank 0, median over the steps after the first) and the peak
memory (memory/max_allocated_mib of the last step, rank 0's counter). bench/planner.py measures every layout the
same way. A trial costs oarlock train's start-up (its ranks import oarlock and build the GPT: seconds), its steps
and one evaluation at the end.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

MIB = 2 ** 20


def train_command(spec, layout) -> list[str]:
    """The `oarlock train` command line that runs `layout` on `spec`'s workload."""
    command = [sys.executable, "-m", "oarlock.cli", "train", *layout.train_flags(),
               "--batch-size", str(spec.batch), "--seq-len", str(spec.seq_len)]
    if spec.experts:
        command += ["--moe-experts", str(spec.experts), "--moe-top-k", str(spec.top_k)]
    return command


def _scalars(log_dir: str, tag: str) -> list[float]:
    try:   # TensorBoard's own reader (oarlock's tensorboard plugin writes event files only)
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        raise RuntimeError("plan(): argument trials: reading a trial's step times needs the tensorboard package "
                           "(pip install tensorboard)") from None
    events = EventAccumulator(log_dir, size_guidance={"scalars": 0})
    events.Reload()
    return [e.value for e in events.Scalars(tag)]


def measure(spec, layout, steps: int, directory: str, timeout: float = 900) -> dict:
    """Train `layout` for `steps` steps (>= 2) in `directory`: {"step_seconds", "memory_bytes", "wall_seconds"},
    or {"error": ...} when oarlock train fails."""
    log = os.path.join(directory, layout.name())
    command = train_command(spec, layout) + ["--steps", str(steps), "--eval-every", str(steps), "--sample-len", "0",
                                             "--log-dir", log, "--out", os.path.join(directory, layout.name() + "-out")]
    t0 = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"oarlock train ran over {timeout:.0f} s", "wall_seconds": time.perf_counter() - t0}
    if done.returncode != 0:
        return {"error": f"oarlock train failed ({done.returncode}): {done.stderr[-800:]}",
                "wall_seconds": time.perf_counter() - t0}
    rates = _scalars(log, "train/tokens_per_s")[1:]   # the first step builds the optimizer's states
    tokens = spec.batch * spec.seq_len
    return {"step_seconds": statistics.median(tokens / r for r in rates),
            "memory_bytes": _scalars(log, "memory/max_allocated_mib")[-1] * MIB,
            "wall_seconds": time.perf_counter() - t0}


def chosen(candidates: list, trials: int, margin: float) -> list:
    """The candidates (Predictions, fastest first) a trial runs: the first `trials` of those predicted within
    `margin` (a fraction) of the fastest prediction."""
    if not candidates:
        return []
    limit = candidates[0].step_seconds * (1 + margin)
    return [p for p in candidates if p.step_seconds <= limit][:trials]


def run_trials(spec, candidates: list, trials: int, steps: int, margin: float, stream=None) -> dict:
    """{layout name: measure()'s dict} for the chosen candidates, each line of progress on `stream` (stderr)."""
    stream = stream or sys.stderr
    found = {}
    picked = chosen(candidates, trials, margin)
    with tempfile.TemporaryDirectory(prefix="oarlock-plan-trial-") as tmp:
        for i, p in enumerate(picked, 1):
            got = measure(spec, p.layout, steps, tmp)
            found[p.layout.name()] = got
            what = (f"{got['step_seconds'] * 1e3:.1f} ms per step" if "error" not in got else "failed")
            stream.write(f"trial {i}/{len(picked)}: {p.layout.name()} {what} ({got['wall_seconds']:.1f} s)\n")
            stream.flush()
    return found
