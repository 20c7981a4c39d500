"""The planner's cost model: a layout's step time and peak memory per rank from a Calibration.

Time (seconds per step, the slowest rank):
* compute: layers x block(rows, mp) + ends(rows, mp), the forward + backward at the rows one rank takes (batch /
  data ranks) and its 1/mp share of the widths, timed with all N ranks computing that shape at once (they share
  the machine's cores; the probe's `concurrent` figures, the slowest rank's, not the time alone scaled by one
  contention factor);
* tensor parallel (mp > 1): 4 all-reduces of the activations [rows, seq, width] per block (two in forward, two in
  backward) and 2 for the embedding and head, over mp ranks, each costing the collective alone plus the probe's
  synchronisation wait (`sync`: an all-reduce between compute segments waits for the slowest rank of its group,
  which back-to-back collectives do not show when ranks time-share cores);
* data parallel (dp x sharding > 1): one all-reduce of the rank's gradients over the data ranks; with sharding
  stage 1, the probe's measurement of its own collectives over the sharding group (a reduce per gradient tensor
  to its owner, the norm's all-reduce, a broadcast per parameter: each pays a latency, where data parallelism
  fuses the gradients into one all-reduce), then the owned gradients' all-reduce over dp; expert parallel adds 4
  all-to-alls of the routed tokens per block (dispatch and combine, forward and backward), costed as all-gathers
  of those bytes;
* pipeline (pp > 1, 1F1B over M micro-batches, the stages cut as oarlock train's PipelineLayer cuts them): M
  slots of the slowest stage's forward + backward of one micro-batch and pp - 1 fill / drain slots, each at the
  speed of the ranks busy then (the slot's time interpolated between alone and all at once by the busy ranks:
  an idle stage gives its core to the busy ones). In the M slots the busy ranks are dp x the stages' work over
  the slowest stage's (a lighter stage waits part of each slot), in the fill / drain half of that; plus a send
  and a receive around each slot's forward and backward, each exchange with the probe's handoff wait (a blocking
  receive waits for the neighbour to be scheduled);
* the AdamW step over the rank's parameters / sharding, timed with all ranks stepping at once (a calibration
  without that figure: measured alone, slowed as the rank's block is when all ranks compute at once).

Memory (bytes, the fullest rank): parameters (float32) + AdamW's two moments / sharding + the corpus oarlock train
holds + the larger of (the activations the forward keeps: what each block adds in a model, times the micro-batches
in flight on the first pipeline stage, min(M, pp), + the ends' + once the first block's excess (the kernels'
scratch, reused by every block) + the largest backward transient) and the gradients with, over data ranks,
DataParallel's flat bucket and its all-reduced copy (cleared after every step: they grow as backward frees the
activations); at least what the rank holds at the start, when oarlock train has built the whole GPT to take its
share from it (under mp or pp).
"""

from __future__ import annotations

from dataclasses import dataclass

from oarlock_autoparallel.planner_layouts import Layout
from oarlock_autoparallel.planner_model import CORPUS_TOKENS, FLOAT_BYTES, ModelSpec
from oarlock_autoparallel.planner_probe import Calibration
from oarlock_parallel.pipeline_segment import uniform


@dataclass(frozen=True)
class Prediction:
    layout: Layout
    step_seconds: float
    memory_bytes: int
    time_parts: dict
    memory_parts: dict


def micro_rows(spec: ModelSpec, layout: Layout) -> int:
    """Rows one rank computes at once: its share of the batch, cut into micro-batches under pp."""
    return spec.batch // layout.data_ranks // layout.micro_batches


def shape_of(spec: ModelSpec, layout: Layout) -> tuple[int, int]:
    """The (rows, mp) the probe measures for this layout."""
    return micro_rows(spec, layout), layout.mp


def collective(cal: Calibration, op: str, group: int, nbytes: float) -> float:
    """Seconds of one `op` of `nbytes` per rank over `group` ranks (0 for a group of one)."""
    if group <= 1:
        return 0.0
    alpha, beta = cal.comm[op][str(group)]
    return alpha + beta * nbytes


@dataclass(frozen=True)
class Stage:
    """One pipeline stage's layers: its blocks, and whether it holds the embedding or the head (with the final
    norm and the loss)."""

    blocks: int
    embed: bool
    head: bool


def stages(spec: ModelSpec, pp: int) -> list[Stage]:
    """oarlock train's pipeline stages: its PipelineLayer cuts [embedding, the blocks, head] into pp parts by
    Paddle's "uniform" rule (floor(n / pp) items each, the remainder one by one on the last parts), so with
    4 layers over 4 stages the first holds the embedding alone and the last two blocks each side of the head."""
    items = spec.layers + 2
    bounds = uniform(items, pp)   # oarlock-parallel's PipelineLayer rule itself
    return [Stage(sum(1 for i in range(start, end) if 0 < i <= spec.layers), start == 0, end == items)
            for start, end in zip(bounds, bounds[1:])]


def stage_parameters(spec: ModelSpec, layout: Layout, stage: Stage) -> int:
    if layout.pp == 1:
        return spec.parameters(layout.mp, layout.ep)
    return spec.parameters(1, layout.ep, stage.blocks, embed=stage.embed, head=stage.head)


def rank_parameters(spec: ModelSpec, layout: Layout) -> int:
    """Parameters of the fullest rank (the fullest pipeline stage)."""
    return max(stage_parameters(spec, layout, stage) for stage in stages(spec, layout.pp))


def _stage_seconds(cal: Calibration, spec: ModelSpec, layout: Layout, stage: Stage, together: bool) -> float:
    """One stage's forward + backward of a micro-batch, alone or with all ranks computing. The ends' measured
    cost is charged to the stage with the head (the embedding's lookup is a small part of it)."""
    rows, mp = shape_of(spec, layout)
    block, ends = cal.busy_seconds(rows, mp) if together else (cal.block(rows, mp).seconds, cal.end(rows, mp).seconds)
    return stage.blocks * block + (ends if stage.head else 0.0)


def busy_slot(cal: Calibration, spec: ModelSpec, layout: Layout, busy_ranks: float) -> float:
    """Seconds of the slowest stage's forward + backward of a micro-batch while `busy_ranks` of the N ranks
    compute: interpolated between the time alone (1 busy) and the time with all N busy (the probe's two
    measurements)."""
    parts = stages(spec, layout.pp)
    together = max(_stage_seconds(cal, spec, layout, stage, True) for stage in parts)
    alone = max(_stage_seconds(cal, spec, layout, stage, False) for stage in parts)
    if layout.ranks <= 1:
        return alone
    share = min(1.0, max(0.0, (busy_ranks - 1) / (layout.ranks - 1)))
    return alone + (together - alone) * share


def _stage_memory(spec: ModelSpec, layout: Layout, cal: Calibration, index: int, stage: Stage) -> dict:
    """The memory terms of pipeline stage `index` (the whole model without pp)."""
    rows, mp = shape_of(spec, layout)
    block, ends = cal.block(rows, mp), cal.end(rows, mp)
    params = stage_parameters(spec, layout, stage)
    grad_bytes = params * FLOAT_BYTES
    data = layout.dp * layout.sharding * layout.ep
    in_flight = min(layout.micro_batches, layout.pp - index)   # 1F1B: pp - stage forwards before a backward
    ends_saved = ends.saved if stage.head else 0
    return {
        "parameters": params * FLOAT_BYTES,
        "optimizer states": 2 * params * FLOAT_BYTES // layout.sharding,
        "corpus": CORPUS_TOKENS * 8 * (spec.seq_len + 1) // spec.seq_len,
        "activations": in_flight * (stage.blocks * block.saved + ends_saved) + (block.fixed if stage.blocks else 0),
        "backward transient": max(block.transient if stage.blocks else 0, ends.transient if stage.head else 0),
        "gradient buckets": 2 * grad_bytes if data > 1 else 0,
        "gradients (not at the peak unless larger)": grad_bytes,
        # oarlock train builds the whole GPT on every rank and takes this rank's share of it: under mp or pp
        # both exist for a moment (the peak of a small stage: pp4's first stage measured 5.5 MiB, 2.1 without it)
        "at start (the whole model built first)": (spec.parameters() * FLOAT_BYTES if layout.mp > 1 or layout.pp > 1
                                                   else 0) + params * FLOAT_BYTES
                                                  + CORPUS_TOKENS * 8 * (spec.seq_len + 1) // spec.seq_len,
    }


def _peak(memory: dict) -> int:
    # the gradients (cleared after every step) grow while backward frees the activations; DataParallel's fused
    # buckets (a flat copy, and the all-reduced copy) exist only once the gradients do: the peak holds the larger
    grads = memory["gradients (not at the peak unless larger)"]
    step = (memory["parameters"] + memory["optimizer states"] + memory["corpus"]
            + max(memory["activations"] + memory["backward transient"], grads + memory["gradient buckets"]))
    return int(max(step, memory["at start (the whole model built first)"]))


def predict(spec: ModelSpec, layout: Layout, cal: Calibration) -> Prediction:
    rows, mp = shape_of(spec, layout)
    blocks = max(stage.blocks for stage in stages(spec, layout.pp))
    activation_bytes = rows * spec.seq_len * spec.width * FLOAT_BYTES
    grad_bytes = rank_parameters(spec, layout) * FLOAT_BYTES
    # every rank steps its optimizer at the same time: measured so by the probe (an older calibration: the time
    # alone, slowed as the rank's block is when all ranks compute at once)
    if str(mp) in cal.concurrent_optimizer:
        (opt_block, opt_ends), slowdown = cal.concurrent_optimizer[str(mp)], 1.0
    else:
        opt_block, opt_ends = cal.optimizer[str(mp)]
        slowdown = max(1.0, cal.busy_seconds(rows, mp)[0] / cal.block(rows, mp).seconds)
    parts = {"optimizer": slowdown * (blocks * opt_block + opt_ends) / layout.sharding}
    stage = busy_slot(cal, spec, layout, layout.ranks)
    all_reduce = collective(cal, "all_reduce", mp, activation_bytes) + cal.synchronisation(mp)
    parts["mp comm"] = (4 * blocks + 2) * all_reduce * layout.micro_batches
    if layout.ep > 1:
        routed = activation_bytes * spec.top_k
        parts["ep comm"] = 4 * blocks * collective(cal, "all_gather", layout.ep, routed / layout.ep)
    if layout.pp > 1:
        p2p = cal.p2p[0] + cal.p2p[1] * activation_bytes
        bubble = layout.pp - 1
        # a stage with less work than the slowest waits part of each slot: the ranks busy at once are the
        # stages' work over the slowest's (times the dp replicas), half of that in the fill and drain
        work = [_stage_seconds(cal, spec, layout, st, False) for st in stages(spec, layout.pp)]
        busy = layout.dp * sum(work) / max(work)
        parts["compute"] = layout.micro_batches * busy_slot(cal, spec, layout, busy)
        parts["pp bubble"] = bubble * busy_slot(cal, spec, layout, busy / 2)
        # each slot: a receive and a send around the forward and around the backward, each exchange also
        # waiting for the neighbour to be scheduled (the probe's handoff)
        parts["pp comm"] = (layout.micro_batches + bubble) * 2 * (p2p + cal.handoff)
    else:
        parts["compute"] = stage
    data = layout.dp * layout.sharding * layout.ep
    stage1 = cal.sharding.get(f"{layout.sharding},{mp}") if layout.sharding > 1 else None
    if stage1 is None:   # no sharding (or a calibration without its measurement): one fused all-reduce
        parts["dp comm"] = collective(cal, "all_reduce", data, grad_bytes)
    else:
        # sharding stage 1: a reduce and a broadcast per tensor over the sharding group (measured as it runs),
        # then the owned gradients' fused all-reduce over dp
        parts["sharding comm"] = stage1
        parts["dp comm"] = collective(cal, "all_reduce", layout.dp * layout.ep, grad_bytes / layout.sharding)
    per_stage = [_stage_memory(spec, layout, cal, i, st) for i, st in enumerate(stages(spec, layout.pp))]
    fullest = max(per_stage, key=_peak)
    memory = dict(fullest)
    if layout.pp > 1:   # what the benchmark measures: rank 0, the first stage
        memory["first stage (rank 0)"] = _peak(per_stage[0])
    return Prediction(layout, sum(parts.values()), _peak(fullest), parts, memory)
