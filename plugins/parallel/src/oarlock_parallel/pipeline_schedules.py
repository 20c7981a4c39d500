"""Pipeline-parallel schedules as data: the ordered list of actions one pipeline rank executes in a training step.

A schedule is a list of `Action(kind, micro_batch, chunk)` per rank. The executor (pipeline_parallel.py) runs
them in order: "F" is the forward of one micro-batch through one local model chunk, "B" its backward, "W" a
deferred weight-gradient pass (only in schedules that split the backward). Sends are non-blocking and every
receive happens where the action needs its value, so a schedule is deadlock-free exactly when the dependency
graph of all ranks' lists is acyclic; pipeline_simulator.py checks that and measures bubble and memory.

Local chunk `c` of rank `stage` is the global virtual stage `c * num_stages + stage` (Paddle's interleave
layout), so with one chunk the virtual stage is the rank's stage.

Modes (`SCHEDULE_MODES`):
- "FThenB": every forward, then every backward in micro-batch order (GPipe). Holds all m micro-batches'
  activations. With num_chunks > 1 it is Paddle's PipelineParallelWithInterleaveFthenB order (all micro-batches
  through chunk 0, then chunk 1, ...; backwards from the last chunk).
- "1F1B": Paddle's PipelineParallel.forward_backward_pipeline: num_stages - stage - 1 warm-up forwards (at most
  m), then one forward and one backward alternately, then the remaining backwards. Stage s holds at most
  num_stages - s micro-batches in flight. Needs num_chunks == 1.
- "VPP": interleaved 1F1B, Paddle's PipelineParallelWithInterleave order (without its overlap and
  best_unbalanced options): forward micro-step k runs chunk `_vpp_chunk(k)` on the next micro-batch of that
  chunk, warm-up (num_stages - stage - 1) * 2 + (num_chunks - 1) * (m % num_stages + num_stages) micro-steps,
  then forward/backward alternately. Paddle's constraint m >= 2 * num_stages is enforced; Paddle also asks
  num_stages > 2, which we relax to num_stages >= 2 (the simulator shows pp2 schedules deadlock-free).
- "1F1BOffload" (the VRAM-friendly schedule): 1F1B's order, with the saved activations of each micro-batch that
  waits for its backward moved to host memory right after its forward ("O") and loaded back one compute
  action before its backward ("L": a GPU's copy stream overlaps the load with that action; on the CPU the
  copies run inline and cost a memcpy). Same forwards/backwards in the same order, so the same bubble as 1F1B
  and the same losses, but a rank holds at most 2 micro-batches' activations on the device where 1F1B holds
  min(num_stages - stage, m) (stage 0: num_stages); ranks where 1F1B holds 2 or fewer (the last two stages)
  copy nothing. Zero-bubble schedules (ZB-H1) cut the bubble but keep 1F1B's memory; swapping cuts memory at
  1F1B's bubble, paying host memory and copy bandwidth instead. The swap itself (saved-tensor hooks per
  micro-batch, the O and L methods of the executor) is pipeline_swap.py.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Action", "build_schedule", "SCHEDULE_MODES", "virtual_stage", "with_activation_offload"]


class Action(NamedTuple):
    """One step of a rank's schedule: kind "F" / "B" / "W" (or the swap's "O" / "L") of micro-batch
    `micro_batch` on local chunk `chunk`."""

    kind: str
    micro_batch: int
    chunk: int = 0

    def __repr__(self):
        return f"{self.kind}{self.micro_batch}" + (f"@{self.chunk}" if self.chunk else "")


def virtual_stage(stage: int, chunk: int, num_stages: int) -> int:
    """The global virtual stage of local chunk `chunk` on pipeline rank `stage` (Paddle's interleave layout)."""
    return chunk * num_stages + stage


def _fthenb(p, m, s, chunks):
    forwards = [Action("F", k % m, k // m) for k in range(m * chunks)]
    backwards = [Action("B", k % m, chunks - 1 - k // m) for k in range(m * chunks)]
    return forwards + backwards


def _one_f_one_b(p, m, s, chunks):
    warmup = min(p - s - 1, m)
    actions = [Action("F", i) for i in range(warmup)]
    for i in range(m - warmup):
        actions += [Action("F", warmup + i), Action("B", i)]
    return actions + [Action("B", i) for i in range(m - warmup, m)]


def _vpp_chunk(step, p, m, chunks, forward):
    """Paddle's PipelineParallelWithInterleave._get_virtual_pp_rank (best_unbalanced_scheduler off)."""
    first_chunk_acc = m % p + p
    if step < first_chunk_acc * chunks:
        chunk = step // first_chunk_acc
    else:
        chunk = (step - first_chunk_acc * chunks) % (p * chunks) // p
    return chunk if forward else chunks - 1 - chunk


def _vpp(p, m, s, chunks):
    num_steps = m * chunks
    warmup = min((p - s - 1) * 2 + (chunks - 1) * (m % p + p), num_steps)
    counters = {"F": [0] * chunks, "B": [0] * chunks}

    def step(kind, k):
        chunk = _vpp_chunk(k, p, m, chunks, kind == "F")
        micro_batch = counters[kind][chunk]
        counters[kind][chunk] += 1
        return Action(kind, micro_batch, chunk)

    actions = [step("F", k) for k in range(warmup)]
    for k in range(num_steps - warmup):
        actions += [step("F", warmup + k), step("B", k)]
    return actions + [step("B", k) for k in range(num_steps - warmup, num_steps)]


def with_activation_offload(actions: list[Action], min_gap: int = 2) -> list[Action]:
    """`actions` with the saved activations of every micro-batch that waits for its backward moved to host
    memory: "O" right after its forward, "L" (load back) before the compute action that precedes its backward,
    so a copy stream can overlap the load with that action. A micro-batch is offloaded when at least `min_gap`
    forwards/backwards of other micro-batches run between its F and its B; with one, the load would be issued
    right after the offload. A rank that never holds more than 2 micro-batches is left as it is (the swap could
    not lower its peak: one micro-batch runs while the next one's activations come back). With 1F1B every rank
    then holds at most 2 micro-batches on the device (pipeline_simulator's peak_resident) instead of
    num_stages - stage."""
    in_flight = peak = 0
    for action in actions:
        in_flight += (action.kind == "F") - (action.kind == "B")
        peak = max(peak, in_flight)
    if peak <= 2:
        return list(actions)
    position = {(a.kind, a.micro_batch, a.chunk): i for i, a in enumerate(actions)}
    offload_after, load_before = set(), {}
    for i, action in enumerate(actions):
        if action.kind == "F":
            backward = position[("B", action.micro_batch, action.chunk)]
            if backward - i - 1 >= min_gap:
                offload_after.add(i)
                load_before.setdefault(backward - 1, []).append(Action("L", action.micro_batch, action.chunk))
    result = []
    for i, action in enumerate(actions):
        result += load_before.get(i, [])
        result.append(action)
        if i in offload_after:
            result.append(Action("O", action.micro_batch, action.chunk))
    return result


def _one_f_one_b_offload(p, m, s, chunks):
    return with_activation_offload(_one_f_one_b(p, m, s, chunks))


_BUILDERS = {"FThenB": _fthenb, "1F1B": _one_f_one_b, "VPP": _vpp, "1F1BOffload": _one_f_one_b_offload}
SCHEDULE_MODES = tuple(_BUILDERS)


def _check_int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"build_schedule(): argument '{name}' must be an int >= {minimum}; got {value!r}")


def build_schedule(mode: str, num_stages: int, num_micro_batches: int, stage: int,
                   num_chunks: int = 1) -> list[Action]:
    """The ordered actions pipeline rank `stage` runs for one training step under schedule `mode`."""
    if mode not in _BUILDERS:
        raise ValueError(f"build_schedule(): argument 'mode' must be one of {list(SCHEDULE_MODES)}; got {mode!r}")
    _check_int("num_stages", num_stages, 1)
    _check_int("num_micro_batches", num_micro_batches, 1)
    _check_int("num_chunks", num_chunks, 1)
    _check_int("stage", stage, 0)
    if stage >= num_stages:
        raise ValueError(f"build_schedule(): argument 'stage' must be below num_stages={num_stages}; got {stage}")
    if mode in ("1F1B", "1F1BOffload") and num_chunks != 1:
        raise ValueError(f"build_schedule(): mode '{mode}' runs one model chunk per stage; got num_chunks="
                         f"{num_chunks} (interleaved virtual stages use mode 'VPP')")
    if mode == "VPP":
        if num_chunks < 2:
            raise ValueError(f"build_schedule(): mode 'VPP' (interleaved 1F1B) needs num_chunks > 1 virtual "
                             f"stages per rank; got num_chunks={num_chunks}")
        if num_stages < 2:
            raise ValueError(f"build_schedule(): mode 'VPP' needs num_stages >= 2; got num_stages={num_stages}")
        if num_micro_batches < 2 * num_stages:
            raise ValueError(f"build_schedule(): mode 'VPP' needs num_micro_batches >= 2 * num_stages "
                             f"(= {2 * num_stages}), as Paddle's interleaved schedule does; got "
                             f"num_micro_batches={num_micro_batches}")
    return _BUILDERS[mode](num_stages, num_micro_batches, stage, num_chunks)
