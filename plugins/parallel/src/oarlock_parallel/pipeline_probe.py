"""Measuring a PipelineParallel's schedule on one rank: what bench/pipeline.py and the schedule tests read.

`ScheduleProbe(model)` instruments one PipelineParallel (this instance only): each schedule run (the actions of
train_batch, without the optimizer step) records its start and end on the machine's monotonic clock (shared
by the ranks of one machine), the seconds blocked in the pipeline's receives and in waiting for its sends,
the seconds of each kind of action, and the device memory peak above the run's start
(oarlock.device.max_memory_allocated, reset at the start: the activations held for backward plus the actions'
transient buffers; on the cpu, numpy's allocations, with the host pool counted apart); `received` is the pair
(receives posted ahead, receives posted only when needed), pipeline_p2p's counters. `bubble(runs)` turns the
records of every rank for one step into per-rank bubble fractions: idle / span, the span from the earliest
start to the latest end, idle = span - (run time - blocked).
"""

from __future__ import annotations

import time

import oarlock

__all__ = ["ScheduleProbe", "bubble"]


class ScheduleProbe:
    """Instruments `model` (a PipelineParallel); after each run: start, end, blocked, peak_bytes, and
    `seconds` per action kind (blocking receives included)."""

    def __init__(self, model):
        self.start = self.end = self.blocked = 0.0
        self.peak_bytes = 0
        self.received = (0, 0)
        self.seconds: dict = {}
        p2p = model._p2p
        for name in ("recv_forward", "recv_backward", "wait_sends"):
            setattr(p2p, name, self._timed(getattr(p2p, name), "blocked"))
        for kind, name in model.ACTIONS.items():
            setattr(model, name, self._timed(getattr(model, name), kind))
        run = model._run

        def measured_run(actions, step):
            self.blocked = 0.0
            self.seconds = {}
            oarlock.device.reset_max_memory_allocated()
            memory_start = oarlock.device.memory_allocated()
            self.start = time.monotonic()
            run(actions, step)
            self.end = time.monotonic()
            self.peak_bytes = oarlock.device.max_memory_allocated() - memory_start
            self.received = (p2p.received_ahead, p2p.received_on_demand)

        model._run = measured_run

    def record(self) -> tuple:
        """(start, end, blocked, peak_bytes) of the last run."""
        return self.start, self.end, self.blocked, self.peak_bytes

    def _timed(self, method, what: str):
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - start
                if what == "blocked":
                    self.blocked += elapsed
                else:
                    self.seconds[what] = self.seconds.get(what, 0.0) + elapsed
        return timed


def bubble(records) -> list:
    """Per-rank bubble fractions of one step from every rank's record() (see the module docstring)."""
    span = max(r[1] for r in records) - min(r[0] for r in records)
    return [1 - ((end - start) - blocked) / span for start, end, blocked, _ in records]
