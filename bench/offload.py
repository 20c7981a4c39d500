"""The memory planner on the train GPT: peak device memory and step time with no budget, with every block
recomputed, and with fleet.utils.offload.MemoryPlanner fitted to a fraction (default half) of the
unconstrained peak.

Phase 1 runs each configuration alone (one model alive) and reads its peak device memory
(oarlock.device.max_memory_allocated over the timed steps) and its losses (all three must be identical).
Phase 2 rebuilds the three models with the policies phase 1 chose and times their steps round-robin in one
process, so that the machine's load affects them alike; the table gives median step times and their ratios.

    python bench/offload.py [--width 128] [--layers 4] [--batch 8] [--seq-len 128] [--steps 6] [--fraction 0.5]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time

import numpy as np

import oarlock
from oarlock.distributed.fleet.utils.offload import MemoryPlanner
from oarlock_train.model import GPT, GPTConfig


class Run:
    """One configuration: a GPT, its AdamW, a batch source, and (except "none") a MemoryPlanner."""

    def __init__(self, args, name, budget=None, policies=None, states_on_host=False):
        self.name, self.args = name, args
        self.cfg = GPTConfig(width=args.width, layers=args.layers, heads=4, max_seq_len=args.seq_len)
        oarlock.seed(0)
        self.model = GPT(self.cfg)
        self.opt = oarlock.optimizer.AdamW(learning_rate=1e-3, parameters=self.model.parameters())
        self.rng = np.random.default_rng(1)
        self.planner = None
        self.budget = budget
        self.pending = (policies, states_on_host)
        self.losses, self.times = [], []

    def _batch(self):
        rows = self.rng.integers(0, 256, (self.args.batch, self.args.seq_len + 1))
        return oarlock.to_tensor(rows[:, :-1]), oarlock.to_tensor(rows[:, 1:])

    def _forward_backward(self, batch=None):
        x, y = batch or self._batch()
        loss = oarlock.nn.functional.cross_entropy(self.model(x).reshape([-1, 256]), y.reshape([-1]))
        loss.backward()
        return loss

    def step(self):
        if self.name != "none" and self.planner is None and self.losses:   # plan once the optimizer has states
            blocks = list(self.model.blocks)
            self.planner = MemoryPlanner(blocks, self.budget or 2**62, optimizer=self.opt,
                                         parameters=self.model.parameters())
            policies, on_host = self.pending
            if self.budget is not None and policies is None:
                state = self.rng.bit_generator.state
                self.planner.fit(self._forward_backward)
                self.rng.bit_generator.state = state       # the profiling batches are not the run's
            else:
                self.planner.apply(policies or ["recompute"] * len(blocks), on_host)
        start = time.perf_counter()
        loss = self._forward_backward(self._batch())
        self.opt.step()
        self.opt.clear_grad()
        self.times.append(time.perf_counter() - start)
        self.losses.append(float(loss))


def phase_one(args, budget_of):
    """Each configuration alone: its losses, peak (over the steps after the first) and chosen policies."""
    results = {}
    for name in ("none", "recompute", "planner"):
        gc.collect()
        run = Run(args, name, budget=budget_of(results) if name == "planner" else None)
        run.step()                            # the first step creates the optimizer states,
        run.step()                            # the second makes the plan
        gc.collect()
        oarlock.device.reset_max_memory_allocated()
        for _ in range(args.steps):
            run.step()
        results[name] = {"peak": oarlock.device.max_memory_allocated(), "losses": run.losses,
                         "policies": run.planner.policies if run.planner else None,
                         "states_on_host": bool(run.planner and run.planner.states_on_host),
                         "budget": run.budget}
        del run
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--steps", type=int, default=6, help="timed steps per configuration (default 6)")
    parser.add_argument("--fraction", type=float, default=0.5, help="the planner's budget / the unconstrained peak")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args(argv)

    one = phase_one(args, lambda done: int(done["none"]["peak"] * args.fraction) if "none" in done else None)
    same = one["none"]["losses"] == one["recompute"]["losses"] == one["planner"]["losses"]
    runs = [Run(args, "none"), Run(args, "recompute"),
            Run(args, "planner", policies=one["planner"]["policies"], states_on_host=one["planner"]["states_on_host"])]
    for _ in range(2):                        # as in phase one: states, then the plan
        for run in runs:
            run.step()
    for _ in range(args.steps):
        for run in runs:
            run.step()
    median = {run.name: statistics.median(run.times[2:]) for run in runs}
    base = median["none"]
    print(f"GPT width {args.width}, {args.layers} layers, batch {args.batch} x {args.seq_len}; budget "
          f"{one['planner']['budget']:,} bytes = {args.fraction:g} x the unconstrained peak; losses identical: {same}")
    print(f"{'configuration':<24}{'peak bytes':>14}{'peak/none':>11}{'step s':>9}{'time/none':>11}"
          f"{'time/recompute':>16}")
    for run in runs:
        r = one[run.name]
        print(f"{run.name:<24}{r['peak']:>14,}{r['peak'] / one['none']['peak']:>11.2f}{median[run.name]:>9.3f}"
              f"{median[run.name] / base:>11.2f}{median[run.name] / median['recompute']:>16.2f}")
    print(f"planner's choice: blocks {one['planner']['policies']}, optimizer states on host: "
          f"{one['planner']['states_on_host']}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"phase_one": one, "median_step_s": median, "losses_identical": same}, fh, indent=1)


if __name__ == "__main__":
    main()
