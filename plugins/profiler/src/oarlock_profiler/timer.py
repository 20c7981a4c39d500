"""Step timing (Profiler(timer_only=True) and step_info): batch cost and throughput per step, and the
"Perf Summary" Paddle prints at stop(), skipping the first 10 steps as Paddle's timer does."""

from __future__ import annotations

import timeit

SKIP_STEPS = 10


class StepTimer:
    def __init__(self):
        self.start_time = timeit.default_timer()
        self.samples_mode = True
        self.total_iters = self.total_samples = 0
        self.records = {"max": 0.0, "min": float("inf"), "total": 0.0}
        self.speed = {"max": 0.0, "min": float("inf")}
        self._reset_average()

    def _reset_average(self):
        self.avg_iters, self.avg_time, self.avg_samples = 0, 0.0, 0

    def step(self, num_samples=None):
        now = timeit.default_timer()
        cost, self.start_time = now - self.start_time, now
        if num_samples is None:
            self.samples_mode = False
        self.avg_iters += 1
        self.avg_time += cost
        self.avg_samples += num_samples or 0
        self.total_iters += 1
        if self.total_iters > SKIP_STEPS:
            self._update(cost, self.records)
            self.records["total"] += cost
            if self.samples_mode:
                self.total_samples += num_samples
                speed = num_samples / cost
            else:
                speed = 1.0 / cost
            self._update(speed, self.speed)

    @staticmethod
    def _update(value, records):
        records["max"] = max(records["max"], value)
        records["min"] = min(records["min"], value)

    def step_info(self, unit):
        """Averages since the last call: ' batch_cost: X s ips: Y unit/s'."""
        message = ""
        if self.avg_iters:
            batch = self.avg_time / self.avg_iters
            speed_unit = f"{unit}/s" if self.samples_mode else "steps/s"
            speed = (self.avg_samples if self.samples_mode else self.avg_iters) / self.avg_time if self.avg_time else 0
            message += f" batch_cost: {batch:.5f} s"
            if speed:
                message += f" ips: {speed:.3f} {speed_unit}"
            self.unit = speed_unit
        self._reset_average()
        return message

    def summary(self, unit="samples/s"):
        """The Perf Summary text, or "" when no more than SKIP_STEPS steps ran."""
        iters = self.total_iters - SKIP_STEPS
        if iters <= 0:
            return ""
        batch_avg = self.records["total"] / iters
        speed_avg = (self.total_samples if self.samples_mode else iters) / self.records["total"]
        unit = getattr(self, "unit", unit if self.samples_mode else "steps/s")
        lines = ["Perf Summary".center(100, "="), f"Time Unit: s, IPS Unit: {unit}",
                 " ".join(["|", "".center(15), "|", "avg".center(15), "|", "max".center(15), "|", "min".center(15),
                           "|"])]
        for name, avg, records in (("batch_cost", batch_avg, self.records), ("ips", speed_avg, self.speed)):
            lines.append(" ".join(["|", name.center(15), "|", f"{avg:.5f}".center(15), "|",
                                   f"{records['max']:.5f}".center(15), "|", f"{records['min']:.5f}".center(15), "|"]))
        return "\n".join(lines)
