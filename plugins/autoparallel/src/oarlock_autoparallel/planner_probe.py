"""The planner's calibration: a short probe of this machine, kept as a Calibration (JSON-serialisable).

* compute alone (one process, planner_compute): one block's (two stacked, for what a block adds in a model) and
  the ends' forward + backward time and memory at every (rows per micro-batch, mp) the candidate layouts need,
  largest first, and the AdamW step per mp (also timed with all ranks stepping at once, `concurrent_optimizer`);
* on N ranks (planner_comm_job under `oarlock launch`): all_reduce / all_gather per group size and send/recv, each
  fitted to latency + bytes / bandwidth (least squares, both terms >= 0); the same block and ends timed with all
  N ranks computing the same shape at once (`concurrent`: the ranks share this machine's cores, so this, not the
  time alone, is a step's compute; the slowest rank's time, which the step waits for); sharding stage 1's
  per-tensor collectives per sharding degree (`sharding`); the wait a synchronising all-reduce between compute
  segments adds per group size (`sync`) and the one a pipeline stage's send/recv exchange between compute
  segments adds (`handoff`); and the contention factor (a small block all at once against alone), kept as a summary
  and for calibrations without `concurrent`.

A progress bar on stderr counts the probe's measurements.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from oarlock_autoparallel.planner_compute import Cost, measure_block, measure_ends, measure_optimizer
from oarlock_autoparallel.planner_model import ModelSpec

CONTENTION_SPEC = ModelSpec(seq_len=64, batch=4)   # the block all ranks compute at once
CONTENTION_ROWS = 4
JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "planner_comm_job.py")


@dataclass
class Calibration:
    """What the cost model reads. Keys of blocks / ends: "rows,mp"; of optimizer: "mp" -> [block s, ends s];
    comm: op -> group size (str) -> [latency s, s per byte]; p2p: [latency s, s per byte]; contention: how many
    times slower a rank computes a small block when all ranks compute at once (1 on one rank); concurrent:
    "rows,mp" -> [block s, ends s] with all ranks computing that shape at once; sync: group size (str) -> the
    seconds an all-reduce between compute segments adds to the collective alone; sharding: "g,mp" -> seconds of
    sharding stage 1's per-tensor reduces, norm all-reduce and broadcasts over g ranks; handoff: the seconds a
    send/recv exchange between compute segments adds to the exchange alone (a pipeline stage's wait);
    concurrent_optimizer: "mp" -> [block s, ends s] of the AdamW step with all ranks stepping at once."""

    blocks: dict = field(default_factory=dict)
    ends: dict = field(default_factory=dict)
    optimizer: dict = field(default_factory=dict)
    comm: dict = field(default_factory=dict)
    p2p: list = field(default_factory=lambda: [0.0, 0.0])
    contention: float = 1.0
    concurrent: dict = field(default_factory=dict)
    sync: dict = field(default_factory=dict)
    sharding: dict = field(default_factory=dict)
    handoff: float = 0.0
    concurrent_optimizer: dict = field(default_factory=dict)
    ranks: int = 1
    seq_len: int = 0
    seconds: float = 0.0

    def block(self, rows: int, mp: int) -> Cost:
        return Cost(*self.blocks[f"{rows},{mp}"])

    def end(self, rows: int, mp: int) -> Cost:
        return Cost(*self.ends[f"{rows},{mp}"])

    def busy_seconds(self, rows: int, mp: int) -> tuple[float, float]:
        """(block, ends) forward + backward seconds with every rank computing at once: measured when the probe
        ran on N ranks, else the time alone x the contention factor."""
        key = f"{rows},{mp}"
        if key in self.concurrent:
            return tuple(self.concurrent[key])
        return self.contention * self.block(rows, mp).seconds, self.contention * self.end(rows, mp).seconds

    def synchronisation(self, group: int) -> float:
        """The wait a synchronising all-reduce over `group` ranks adds between compute segments (0 if unmeasured)."""
        return self.sync.get(str(group), 0.0) if group > 1 else 0.0

    def save(self, path: str) -> None:
        with open(path, "w") as fh:
            json.dump(asdict(self), fh, indent=1)

    @classmethod
    def load(cls, path: str) -> Calibration:
        with open(path) as fh:
            return cls(**json.load(fh))


def fit_alpha_beta(points) -> list[float]:
    """[latency, seconds per byte] of t = latency + bytes x s_per_byte fitted to [[bytes, seconds], ...]."""
    x = np.array([p[0] for p in points], dtype=np.float64)
    t = np.array([p[1] for p in points], dtype=np.float64)
    beta, alpha = np.polyfit(x, t, 1) if len(points) > 1 else (0.0, float(t.mean()))
    if alpha < 0:    # keep both terms physical: refit through the origin
        alpha, beta = 0.0, float((x @ t) / (x @ x))
    if beta < 0:
        alpha, beta = float(t.mean()), 0.0
    return [float(alpha), float(beta)]


class _Bar:
    """Progress of the probe on stderr: one redrawn line on a terminal, a line per measurement otherwise."""

    def __init__(self, total: int, stream=None):
        self.total, self.done, self.stream = total, 0, stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.t0 = time.perf_counter()

    def step(self, what: str) -> None:
        self.done += 1
        filled = 24 * self.done // self.total
        text = (f"probe {self.done}/{self.total} [{'#' * filled}{'.' * (24 - filled)}] {what} "
                f"({time.perf_counter() - self.t0:.1f} s)")
        self.stream.write(("\r" + text + "\033[K") if self.tty else text + "\n")
        if self.tty and self.done == self.total:
            self.stream.write("\n")
        self.stream.flush()


def _comm_probe(ranks: int, reps: int, timeout: float, spec: ModelSpec, shapes, sharding) -> dict:
    with tempfile.TemporaryDirectory(prefix="oarlock-plan-") as tmp:
        out, request = os.path.join(tmp, "comm.json"), os.path.join(tmp, "shapes.json")
        with open(request, "w") as fh:
            json.dump({"model": spec.to_dict(), "shapes": [list(s) for s in sorted(shapes)],
                       "sharding": [list(s) for s in sorted(sharding)]}, fh)
        command = [sys.executable, "-m", "oarlock.cli", "launch", "-n", str(ranks), JOB, out, str(reps), request]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0 or not os.path.exists(out):
            raise RuntimeError(f"plan(): the communication probe on {ranks} ranks failed ({done.returncode}):\n"
                               f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
        with open(out) as fh:
            return json.load(fh)


def probe(spec: ModelSpec, ranks: int, shapes: set, reps: int = 3, stream=None, timeout: float = 300,
          sharding: set = frozenset()) -> Calibration:
    """Calibrate for `spec` on `ranks` ranks; `shapes`: the (rows per micro-batch, mp) pairs the layouts need;
    `sharding`: the (sharding degree, mp) pairs of the layouts with sharding."""
    t0 = time.perf_counter()
    mps = sorted({mp for _, mp in shapes})
    bar = _Bar(2 * len(shapes) + len(mps) + 1 + (ranks > 1), stream)
    cal = Calibration(ranks=ranks, seq_len=spec.seq_len)
    for rows, mp in sorted(shapes, key=lambda shape: (-shape[0] / shape[1], shape)):   # largest first
        cal.blocks[f"{rows},{mp}"] = list(asdict(measure_block(spec, rows, mp, reps)).values())
        bar.step(f"block, {rows} rows, mp {mp}")
        cal.ends[f"{rows},{mp}"] = list(asdict(measure_ends(spec, rows, mp, reps)).values())
        bar.step(f"embedding + head, {rows} rows, mp {mp}")
    for mp in mps:
        cal.optimizer[str(mp)] = list(measure_optimizer(spec, mp, reps))
        bar.step(f"AdamW step, mp {mp}")
    alone = measure_block(CONTENTION_SPEC, CONTENTION_ROWS, 1, reps).seconds
    bar.step("block alone (for contention)")
    if ranks > 1:
        report = _comm_probe(ranks, reps, timeout, spec, shapes, sharding)
        cal.comm = {op: {g: fit_alpha_beta(points) for g, points in report[op].items()}
                    for op in ("all_reduce", "all_gather")}
        cal.p2p = fit_alpha_beta(report["p2p"])
        cal.contention = max(1.0, report["concurrent_block_s"] / alone)
        cal.concurrent, cal.sync = report["concurrent"], report["sync"]
        cal.sharding, cal.handoff = report.get("sharding", {}), report["handoff"]
        cal.concurrent_optimizer = report.get("concurrent_optimizer", {})
        bar.step(f"communication on {ranks} ranks, and compute all at once")
    cal.seconds = time.perf_counter() - t0
    return cal
