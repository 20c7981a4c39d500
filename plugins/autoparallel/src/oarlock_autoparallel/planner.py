"""The parallel planner (`oarlock.distributed.plan`, `oarlock plan`): enumerate the layouts of the GPT that fit N
ranks (planner_layouts), calibrate this machine with a short probe (planner_probe), predict each layout's step
time and peak memory per rank (planner_cost), drop those over the memory, rank the rest by predicted step time;
with trials=K, run the top K for a few real `oarlock train` steps each (planner_trial) and take the fastest
measured.

    result = oarlock.distributed.plan("small", ranks=4, memory_per_rank="1GiB")
    result.best.layout.train_flags()     # ['--nproc', '4', '--dp', '2', '--mp', '2']
    print(result.table())
"""

from __future__ import annotations

from dataclasses import dataclass, field

from oarlock_autoparallel.planner_cost import Prediction, predict, rank_parameters, shape_of
from oarlock_autoparallel.planner_layouts import enumerate_layouts
from oarlock_autoparallel.planner_model import CORPUS_TOKENS, FLOAT_BYTES, ModelSpec, parse_model
from oarlock_autoparallel.planner_probe import Calibration, probe
from oarlock_autoparallel.planner_trial import run_trials

MIB = 2 ** 20


@dataclass
class PlanResult:
    """The planner's answer: `candidates` (Predictions that fit, fastest predicted first), `too_big` (those over
    the memory), the ModelSpec, the rank count, the memory per rank, the Calibration used and `trials` (layout
    name -> {"step_seconds", "memory_bytes", "wall_seconds"} or {"error"} for the layouts tried)."""

    spec: ModelSpec
    ranks: int
    memory_per_rank: int
    candidates: list
    too_big: list
    calibration: Calibration
    trials: dict = field(default_factory=dict)

    @property
    def predicted_best(self) -> Prediction:
        """The model's top choice."""
        return self.candidates[0]

    @property
    def best(self) -> Prediction:
        """The fastest measured of the layouts tried whose measured memory fits (the model's top choice when no
        trial ran or none succeeded): what --launch runs."""
        ok = [p for p in self.candidates if "step_seconds" in self.trials.get(p.layout.name(), {})
              and self.trials[p.layout.name()]["memory_bytes"] <= self.memory_per_rank]
        return min(ok, key=lambda p: self.trials[p.layout.name()]["step_seconds"]) if ok else self.candidates[0]

    def _trial_cell(self, p: Prediction) -> str:
        got = self.trials.get(p.layout.name())
        if got is None:
            return ""
        return "failed" if "error" in got else f"{got['step_seconds'] * 1e3:.1f}"

    def table(self) -> str:
        trial = f" {'trial (ms)':>10}" if self.trials else ""
        lines = [f"{'rank':>4}  {'layout':<14} {'step (ms)':>10}{trial} {'memory (MiB)':>13}  fits  main costs (ms)"]
        for i, p in enumerate(self.candidates + self.too_big):
            fits = "yes" if i < len(self.candidates) else "no"
            costs = ", ".join(f"{k} {v * 1e3:.1f}" for k, v in sorted(p.time_parts.items(), key=lambda kv: -kv[1])
                              if v > 0)
            cell = f" {self._trial_cell(p):>10}" if self.trials else ""
            lines.append(f"{(i + 1) if fits == 'yes' else '-':>4}  {p.layout.name():<14} {p.step_seconds * 1e3:>10.1f}"
                         f"{cell} {p.memory_bytes / MIB:>13.1f}  {fits:<4}  {costs}")
        return "\n".join(lines)


def parse_memory(value) -> int:
    """Bytes from an int or a string such as '200MB' / '1.5GiB'."""
    from oarlock.distributed.fleet.utils.offload import parse_bytes
    return parse_bytes(value, "plan(): argument memory_per_rank")


def static_bytes(spec: ModelSpec, layout) -> int:
    """The memory a layout needs before any activation: parameters, gradients, AdamW moments, the corpus."""
    params = rank_parameters(spec, layout) * FLOAT_BYTES
    return 2 * params + 2 * params // layout.sharding + CORPUS_TOKENS * 8


def _check_trials(spec: ModelSpec, trials, trial_steps, trial_margin) -> None:
    for name, value, least in (("trials", trials, 0), ("trial_steps", trial_steps, 2)):
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ValueError(f"plan(): argument {name}: expected an integer >= {least}, got {value!r}")
    if isinstance(trial_margin, bool) or not isinstance(trial_margin, (int, float)) or not trial_margin >= 0:
        raise ValueError(f"plan(): argument trial_margin: expected a number >= 0, got {trial_margin!r}")
    if trials and not spec.launchable:
        raise ValueError("plan(): argument trials: a trial runs oarlock train, which builds its GPT at width 128, "
                         f"4 layers, 4 heads, vocab 256 only; the model is {spec.describe()}")


def plan(model="small", ranks: int = 1, memory_per_rank="16GiB", calibration: Calibration | None = None,
         reps: int = 2, stream=None, trials: int = 0, trial_steps: int = 4, trial_margin: float = 1.0) -> PlanResult:
    """Plan how to train `model` (a preset name tiny / small / medium, key=value pairs, a dict or a ModelSpec) on
    `ranks` ranks with `memory_per_rank` bytes each (an int or '200MB'); `calibration`: a Calibration from an earlier
    probe of this machine for the same model and ranks (default: probe now, `reps` timings per measurement, its
    progress on `stream`, default stderr). `trials` > 0: then run the first `trials` candidates predicted within
    `trial_margin` (a fraction: 1.0 = twice the best prediction) of the best for `trial_steps` steps of `oarlock
    train` each (seconds of start-up each, plus the steps and one evaluation) and make the fastest measured the
    result's `best`. ValueError when no layout exists or none fits the memory (the message gives the smallest
    requirement)."""
    spec = parse_model(model)
    memory = parse_memory(memory_per_rank)
    _check_trials(spec, trials, trial_steps, trial_margin)
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
    result = PlanResult(spec, ranks, memory, fits, too_big, calibration)
    if trials:
        result.trials = run_trials(spec, fits, trials, trial_steps, trial_margin, stream)
    return result
