"""A pure-Python simulator of pipeline schedules: validity, deadlock freedom, bubble, makespan and memory.

`simulate(schedules, costs=..., comm=...)` takes every rank's action list (pipeline_schedules.Action) and plays
them the way the executor runs them: each rank executes its list in order; sends never block; an action waits
(a blocking receive) until what it consumes has arrived:
- F(mb, c) on virtual stage v = c * num_stages + stage needs F(mb) of virtual stage v - 1 (unless v == 0);
- B(mb, c) needs B(mb) of virtual stage v + 1, or, on the last virtual stage, its own F (the loss);
- every action needs the earlier actions of its micro-batch and chunk on its own rank: B after F, W after B,
  "O" (activations offloaded to host) after F, "L" (loaded back) after O, and B after L when the activations
  were offloaded; these must come EARLIER IN THE SAME LIST, or the schedule is refused.
A message sent by a rank to another arrives `comm` time units after the sending action ends. `costs` are those
of a whole stage's layers; an action on one of num_chunks chunks costs 1/num_chunks of them.

Because sends never block, the schedules deadlock exactly when the waits form a cycle; the simulator then
raises ScheduleError naming every rank's blocked action and the cycle of waits. A schedule that runs some
forward or backward twice, or never, is refused too.

Measured, per rank (SimulationResult): busy time, idle time (waiting in receives, before the first action and
after the last one until the step ends), the bubble fraction idle / (num_stages * makespan), and two memory
peaks in units of one micro-batch's activations through a whole stage (a chunk of num_chunks counts
1/num_chunks): `peak_activations` (micro-batches whose forward has started and whose last backward pass, B or
W, has not ended) and `peak_resident` (of those, the ones whose activations are on the device: offloaded ones
are not, from the end of their O to the start of their L). `channel_fifo` says whether, between every pair of
ranks, activations are received in the order they are sent, and so are gradients (an executor that matches
receives by source and direction only, without micro-batch tags, needs it; across the two directions the order
can differ: interleaved pp2 with an odd number of micro-batches sends a gradient before an activation that the
receiver takes first).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from oarlock_parallel.pipeline_schedules import Action, build_schedule

__all__ = ["ScheduleError", "SimulationResult", "simulate", "simulate_mode", "DEFAULT_COSTS"]

# F, a full backward B of twice its cost (input and weight gradients), W (when the backward is split, B and W
# cost one each: pass costs={"B": 1, "W": 1}); offload copies are free by default (a GPU overlaps them on a
# copy stream)
DEFAULT_COSTS = {"F": 1.0, "B": 2.0, "W": 1.0, "O": 0.0, "L": 0.0}


class ScheduleError(ValueError):
    """A schedule that misses or repeats work, breaks a dependency, or deadlocks."""


@dataclass
class SimulationResult:
    num_stages: int
    num_chunks: int
    num_micro_batches: int
    makespan: float
    busy: list
    idle: list
    peak_activations: list
    peak_resident: list
    channel_fifo: bool
    start: dict = field(repr=False)   # (stage, index in its list) -> start time
    end: dict = field(repr=False)

    @property
    def bubble_fraction(self) -> float:
        """Idle time over all ranks / (num_stages * makespan)."""
        return sum(self.idle) / (self.num_stages * self.makespan) if self.makespan else 0.0

    def stage_bubble(self, stage) -> float:
        return self.idle[stage] / self.makespan if self.makespan else 0.0


def _check_lists(schedules, num_chunks):
    """Every (micro-batch, chunk) has one F and one B per rank; W/O/L at most once; in-rank order respected."""
    micro_batches = None
    for stage, actions in enumerate(schedules):
        seen = {}
        for index, action in enumerate(actions):
            if not isinstance(action, Action) or action.kind not in DEFAULT_COSTS:
                raise ScheduleError(f"simulate(): stage {stage}'s schedule has {action!r} at position {index}; "
                                    f"expected an Action of kind {sorted(DEFAULT_COSTS)}")
            if not 0 <= action.chunk < num_chunks or action.micro_batch < 0:
                raise ScheduleError(f"simulate(): stage {stage}'s action {action!r} names chunk {action.chunk} "
                                    f"of {num_chunks} / micro-batch {action.micro_batch}")
            key = (action.micro_batch, action.chunk)
            done = seen.setdefault(key, set())
            if action.kind in done:
                raise ScheduleError(f"simulate(): stage {stage}'s schedule runs {action!r} twice")
            needs = {"F": (), "O": ("F",), "L": ("O",), "W": ("B",),
                     "B": ("F", "L") if "O" in done else ("F",)}[action.kind]
            for need in needs:
                if need not in done:
                    raise ScheduleError(f"simulate(): stage {stage}'s schedule runs {action!r} before "
                                        f"{Action(need, *key)!r} (position {index})")
            if action.kind == "O" and "B" in done:
                raise ScheduleError(f"simulate(): stage {stage}'s schedule offloads {action!r} after its backward")
            done.add(action.kind)
        forwards = {key for key, kinds in seen.items() if "F" in kinds}
        missing_b = sorted(key for key in forwards if "B" not in seen[key])
        if missing_b:
            raise ScheduleError(f"simulate(): stage {stage}'s schedule never runs the backward of (micro-batch, "
                                f"chunk) {missing_b}")
        if micro_batches is None:
            micro_batches = {mb for mb, _ in forwards}
        expected = {(mb, c) for mb in micro_batches for c in range(num_chunks)}
        if forwards != expected or micro_batches != set(range(len(micro_batches))):
            wrong = sorted(expected ^ forwards) or sorted(forwards)
            raise ScheduleError(f"simulate(): stage {stage}'s schedule does not run micro-batches 0..n-1 (stage 0 "
                                f"runs {len(micro_batches)}) each through its {num_chunks} chunk(s) once: the "
                                f"forwards of (micro-batch, chunk) {wrong} are missing or extra")
    return len(micro_batches or ())


def _producer(action, stage, p, num_virtual):
    """(stage, Action) whose message `action` receives, or None when it consumes nothing from another stage."""
    v = action.chunk * p + stage
    if action.kind == "F" and v > 0:
        return (v - 1) % p, Action("F", action.micro_batch, (v - 1) // p)
    if action.kind == "B" and v < num_virtual - 1:
        return (v + 1) % p, Action("B", action.micro_batch, (v + 1) // p)
    return None


def _deadlock(schedules, pointer, waits):
    blocked = {s: (schedules[s][pointer[s]], waits[s]) for s in range(len(schedules)) if s in waits}
    lines = [f"stage {s} waits at {a!r} for {dep!r} of stage {q}" for s, (a, (q, dep)) in blocked.items()]
    cycle, s = [], next(iter(blocked))
    while s not in cycle:
        cycle.append(s)
        s = blocked[s][1][0]
    cycle = cycle[cycle.index(s):] + [s]
    raise ScheduleError("simulate(): the schedule deadlocks: " + "; ".join(lines) + "; cycle of waits: " +
                        " -> ".join(f"stage {s}" for s in cycle))


def simulate(schedules: Sequence[Sequence[Action]], costs: dict | None = None, comm: float = 0.0,
             num_chunks: int | None = None) -> SimulationResult:
    """Play every rank's schedule (schedules[stage]); see the module docstring."""
    if not schedules or not all(isinstance(s, (list, tuple)) for s in schedules):
        raise ScheduleError(f"simulate(): argument 'schedules' must be a non-empty list of per-stage action "
                            f"lists; got {schedules!r}")
    cost = dict(DEFAULT_COSTS, **(costs or {}))
    p = len(schedules)
    if num_chunks is None:
        num_chunks = 1 + max((a.chunk for s in schedules for a in s if isinstance(a, Action)), default=0)
    num_micro_batches = _check_lists(schedules, num_chunks)
    num_virtual = p * num_chunks
    finished = {}                   # (stage, Action) -> end time
    start, end = {}, {}
    pointer, clock = [0] * p, [0.0] * p
    sent = {}                       # (src, dst) -> messages in send order
    progress = True
    while progress:
        progress, waits = False, {}
        for stage in range(p):
            while pointer[stage] < len(schedules[stage]):
                action = schedules[stage][pointer[stage]]
                ready = clock[stage]
                source = _producer(action, stage, p, num_virtual)
                if source is not None:
                    if source not in finished:
                        waits[stage] = source
                        break
                    ready = max(ready, finished[source] + (comm if source[0] != stage else 0.0))
                index = pointer[stage]
                start[stage, index] = ready
                clock[stage] = end[stage, index] = ready + cost[action.kind] / num_chunks
                finished[stage, action] = clock[stage]
                target = _producer(Action("F" if action.kind == "B" else "B", *action[1:]), stage, p, num_virtual)
                if action.kind in "FB" and target is not None and target[0] != stage:
                    # the consumer of this F is the next virtual stage: the producer of its B, and vice versa
                    sent.setdefault((stage, target[0], action.kind), []).append((action.micro_batch, action.chunk))
                pointer[stage] += 1
                progress = True
    if any(pointer[s] < len(schedules[s]) for s in range(p)):
        _deadlock(schedules, pointer, waits)
    makespan = max(clock)
    busy = [sum(cost[a.kind] for a in actions) / num_chunks for actions in schedules]
    peaks = [_memory_peaks(actions, num_chunks) for actions in schedules]
    return SimulationResult(p, num_chunks, num_micro_batches, makespan, busy, [makespan - b for b in busy],
                            [pk[0] for pk in peaks], [pk[1] for pk in peaks],
                            _fifo(schedules, sent, p, num_virtual), start, end)


def _memory_peaks(actions, num_chunks):
    """(peak in flight, peak on the device) over one rank's list, in whole-stage micro-batch units."""
    last_backward = {}
    for action in actions:
        if action.kind in "BW":
            last_backward[action[1:]] = action.kind
    in_flight = resident = peak_in_flight = peak_resident = 0
    for action in actions:
        key = action[1:]
        if action.kind in ("F", "L"):
            resident += 1
            in_flight += action.kind == "F"
        peak_in_flight, peak_resident = max(peak_in_flight, in_flight), max(peak_resident, resident)
        if action.kind == "O":
            resident -= 1
        elif action.kind == last_backward[key]:
            in_flight -= 1
            resident -= 1
    return peak_in_flight / num_chunks, peak_resident / num_chunks


def _fifo(schedules, sent, p, num_virtual):
    """Whether each rank receives each kind of message (activations, gradients) from each other rank in the
    order that rank sends them."""
    received = {}
    for stage, actions in enumerate(schedules):
        for action in actions:
            source = _producer(action, stage, p, num_virtual)
            if source is not None and source[0] != stage:
                received.setdefault((source[0], stage, action.kind), []).append(tuple(source[1][1:]))
    return received == sent


def simulate_mode(mode: str, num_stages: int, num_micro_batches: int, num_chunks: int = 1,
                  **kwargs) -> SimulationResult:
    """simulate() of build_schedule(mode, ...) for every stage."""
    schedules = [build_schedule(mode, num_stages, num_micro_batches, s, num_chunks) for s in range(num_stages)]
    return simulate(schedules, num_chunks=num_chunks, **kwargs)
