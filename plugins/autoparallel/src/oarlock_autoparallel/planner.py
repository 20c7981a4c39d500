"""The parallel planner (`oarlock.distributed.plan`, `oarlock plan`): enumerate the layouts of the GPT that fit N
ranks (planner_layouts), calibrate this machine with a short probe (planner_probe), predict each layout's step
time and peak memory per rank (planner_cost), drop those over the memory, rank the rest by predicted step time.

    result = oarlock.distributed.plan("small", ranks=4, memory_per_rank="1GiB")
    result.best.layout.train_flags()     # ['--nproc', '4', '--dp', '2', '--mp', '2']
    print(result.table())
"""

from __future__ import annotations

from dataclasses import dataclass

from oarlock_autoparallel.planner_cost import Prediction, predict, rank_parameters, shape_of
from oarlock_autoparallel.planner_layouts import enumerate_layouts
from oarlock_autoparallel.planner_model import CORPUS_TOKENS, FLOAT_BYTES, ModelSpec, parse_model
from oarlock_autoparallel.planner_probe import Calibration, probe

MIB = 2 ** 20


@dataclass
class PlanResult:
    """The planner's answer: `candidates` (Predictions that fit, fastest first), `too_big` (those over the
    memory), the ModelSpec, the rank count, the memory per rank and the Calibration used."""

    spec: ModelSpec
    ranks: int
    memory_per_rank: int
    candidates: list
    too_big: list
    calibration: Calibration

    @property
    def best(self) -> Prediction:
        return self.candidates[0]

    def table(self) -> str:
        lines = [f"{'rank':>4}  {'layout':<14} {'step (ms)':>10} {'memory (MiB)':>13}  fits  main costs (ms)"]
        for i, p in enumerate(self.candidates + self.too_big):
            fits = "yes" if i < len(self.candidates) else "no"
            costs = ", ".join(f"{k} {v * 1e3:.1f}" for k, v in sorted(p.time_parts.items(), key=lambda kv: -kv[1])
                              if v > 0)
            lines.append(f"{(i + 1) if fits == 'yes' else '-':>4}  {p.layout.name():<14} {p.step_seconds * 1e3:>10.1f} "
                         f"{p.memory_bytes / MIB:>13.1f}  {fits:<4}  {costs}")
        return "\n".join(lines)


def parse_memory(value) -> int:
    """Bytes from an int or a string such as '200MB' / '1.5GiB'."""
    from oarlock.distributed.fleet.utils.offload import parse_bytes
    return parse_bytes(value, "plan(): argument memory_per_rank")


def static_bytes(spec: ModelSpec, layout) -> int:
    """The memory a layout needs before any activation: parameters, gradients, AdamW moments, the corpus."""
    params = rank_parameters(spec, layout) * FLOAT_BYTES
    return 2 * params + 2 * params // layout.sharding + CORPUS_TOKENS * 8


def plan(model="small", ranks: int = 1, memory_per_rank="16GiB", calibration: Calibration | None = None,
         reps: int = 2, stream=None) -> PlanResult:
    """Plan how to train `model` (a preset name tiny / small / medium, key=value pairs, a dict or a ModelSpec) on
    `ranks` ranks with `memory_per_rank` bytes each (an int or '200MB'); `calibration`: a Calibration from an earlier
    probe of this machine for the same model and ranks (default: probe now, `reps` timings per measurement, its
    progress on `stream`, default stderr). ValueError when no layout exists or none fits the memory (the message
    gives the smallest requirement)."""
    spec = parse_model(model)
    memory = parse_memory(memory_per_rank)
    layouts = enumerate_layouts(spec, ranks)
    if not layouts:
        raise ValueError(f"plan(): no layout of {ranks} ranks can train the model ({spec.describe()}): the batch must "
                         f"be shared by the data ranks, mp must divide the heads ({spec.heads}), pp the layers "
                         f"({spec.layers})")
    least = min(static_bytes(spec, layout) for layout in layouts)
    if least > memory:    # no probe needed to know nothing fits
        raise ValueError(f"plan(): argument memory_per_rank: {memory:,} bytes per rank fit no layout; the smallest "
                         f"requirement is over {least:,} bytes ({least / MIB:.1f} MiB) before activations")
    if calibration is None:
        calibration = probe(spec, ranks, {shape_of(spec, layout) for layout in layouts}, reps, stream,
                            sharding={(layout.sharding, layout.mp) for layout in layouts if layout.sharding > 1})
    predictions = [predict(spec, layout, calibration) for layout in layouts]
    fits = sorted((p for p in predictions if p.memory_bytes <= memory), key=lambda p: p.step_seconds)
    too_big = sorted((p for p in predictions if p.memory_bytes > memory), key=lambda p: p.memory_bytes)
    if not fits:
        smallest = too_big[0]
        raise ValueError(f"plan(): argument memory_per_rank: {memory:,} bytes per rank fit no layout; the smallest "
                         f"requirement is {smallest.memory_bytes:,} bytes ({smallest.memory_bytes / MIB:.1f} MiB, "
                         f"layout {smallest.layout.name()})")
    return PlanResult(spec, ranks, memory, fits, too_big, calibration)
