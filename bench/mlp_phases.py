"""Where the MLP training step's time goes, op by op, in oarlock and in PyTorch: wall time of each phase inside the
step (fc1, relu, fc2, cross-entropy, backward, optimizer step, clear/zero grad, loss.item()).

bench/train_step.py's MLP step (784-256-10, batch 64, SGD lr 0.1) timed phase by phase with time.perf_counter_ns
around each call, for --steps steps after --warmup; each phase's median. Each framework runs in its own process
(its own thread pools), --runs times, the two alternating, and the table quotes the median over runs of each phase's
median. Small ops are timed inside the step on purpose: after the 784 x 256 products most of the interpreter's working
set has left the caches, so an op costs there several times what a loop of it alone costs.

    python bench/mlp_phases.py [--runs 3] [--steps 2000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import numpy as np

PHASES = ("fc1", "relu", "fc2", "cross_entropy", "backward", "optimizer_step", "clear_grad", "item")


def measure(framework: str, steps: int, warmup: int) -> dict:
    """{phase: median us} of one process."""
    rng = np.random.default_rng(0)
    x_np, y_np = rng.standard_normal((64, 784)).astype("float32"), rng.integers(0, 10, 64)
    if framework == "torch":
        import torch
        import torch.nn.functional as F
        from torch import nn
        torch.set_num_threads(len(__import__("os").sched_getaffinity(0)))
        model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x, y = torch.from_numpy(x_np), torch.from_numpy(y_np)
        clear = opt.zero_grad
    else:
        import oarlock
        import oarlock.nn.functional as F
        from oarlock import nn
        model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
        opt = oarlock.optimizer.SGD(learning_rate=0.1, parameters=model.parameters())
        x, y = oarlock.to_tensor(x_np), oarlock.to_tensor(y_np)
        clear = opt.clear_grad
    fc1, relu, fc2 = model[0], model[1], model[2]
    clock = time.perf_counter_ns
    times = {p: [] for p in PHASES}
    for _ in range(warmup + steps):
        t0 = clock()
        h = fc1(x)
        t1 = clock()
        h = relu(h)
        t2 = clock()
        logits = fc2(h)
        t3 = clock()
        loss = F.cross_entropy(logits, y)
        t4 = clock()
        loss.backward()
        t5 = clock()
        opt.step()
        t6 = clock()
        clear()
        t7 = clock()
        loss.item()
        t8 = clock()
        for phase, a, b in zip(PHASES, (t0, t1, t2, t3, t4, t5, t6, t7), (t1, t2, t3, t4, t5, t6, t7, t8)):
            times[phase].append(b - a)
    return {p: statistics.median(v[warmup:]) / 1000 for p, v in times.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="processes per framework, alternating (default 3)")
    parser.add_argument("--steps", type=int, default=2000, help="timed steps per process (default 2000)")
    parser.add_argument("--warmup", type=int, default=200, help="untimed steps first (default 200)")
    parser.add_argument("--json", help="write the medians here")
    parser.add_argument("--worker", choices=("oarlock", "torch"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(measure(args.worker, args.steps, args.warmup)))
        return
    runs = {"oarlock": [], "torch": []}
    for _ in range(args.runs):
        for framework in ("torch", "oarlock"):
            out = subprocess.run([sys.executable, __file__, "--worker", framework, "--steps", str(args.steps),
                                  "--warmup", str(args.warmup)], capture_output=True, text=True, check=True)
            runs[framework].append(json.loads(out.stdout.strip().splitlines()[-1]))
    medians = {fw: {p: statistics.median(r[p] for r in rs) for p in PHASES} for fw, rs in runs.items()}
    print(f"MLP step by phase, median of {args.runs} processes each (us; each the median of {args.steps} steps)")
    print(f"{'phase':16s} {'oarlock':>9s} {'torch':>9s} {'diff':>8s} {'ratio':>7s}")
    for phase in PHASES + ("total",):
        o = sum(medians["oarlock"].values()) if phase == "total" else medians["oarlock"][phase]
        t = sum(medians["torch"].values()) if phase == "total" else medians["torch"][phase]
        print(f"{phase:16s} {o:9.1f} {t:9.1f} {o - t:+8.1f} {o / t:6.2f}x")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"medians": medians, "runs": runs}, fh, indent=1)


if __name__ == "__main__":
    main()
