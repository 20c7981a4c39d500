"""Pipeline schedules (oarlock_parallel.pipeline_schedules): the per-rank action lists against the order Paddle
3.2's own executors produce (PipelineParallel and PipelineParallelWithInterleave run with static_scheduler=True,
which walks the real scheduling loops and returns the order instead of running a model), and the errors."""

import json
import logging
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from oarlock_parallel.pipeline_schedules import SCHEDULE_MODES, Action, build_schedule, virtual_stage
from oarlock_parallel.pipeline_simulator import ScheduleError, simulate, simulate_mode

def paddle_schedule(num_stages, num_micro_batches, stage, chunks=1):
    """Paddle's own loop order for one rank, as Actions: an executor object built without __init__ (no ranks,
    no model), holding just what the static_scheduler path reads."""
    pp = pytest.importorskip("paddle.distributed.fleet.meta_parallel.pipeline_parallel",
                             reason="Paddle 3.2 is the oracle for the 1F1B and interleaved orders")
    cls = pp.PipelineParallel if chunks == 1 else pp.PipelineParallelWithInterleave
    self = object.__new__(cls)
    config = types.SimpleNamespace(forward_backward_overlap_scheduler=False)
    self.__dict__.update(
        num_stages=num_stages, stage_id=stage, accumulate_steps=num_micro_batches, processed_steps=10**9,
        _profiling=False, _using_cache=True, _layers=object(), num_model_chunks=chunks,
        _strategy=types.SimpleNamespace(hybrid_configs={"pp_configs": config}), _best_unbalanced_scheduler=False,
        _virtual_pp_world_size=chunks, _overlap_p2p_comm=False, _comm_overlap=False,
        bubble_hooks=types.SimpleNamespace(run_hook=lambda: None),
        _forward_micro_step_counter=dict.fromkeys(range(chunks), 0),
        _backward_micro_step_counter=dict.fromkeys(range(chunks), 0),
        _reset_user_hooks_status=lambda: None, _wrap_data=lambda data: None)
    logging.disable(logging.INFO)
    try:
        args = (None,) if chunks == 1 else (None, None)
        order = self.forward_backward_pipeline(*args, static_scheduler=True)
    finally:
        logging.disable(logging.NOTSET)
    actions = []
    for item in order.strip(";").split(";"):
        step, _, chunk = item.partition("_vp")
        actions.append(Action(step[0].upper(), int(step[1:]), int(chunk or 0)))
    return actions


@pytest.mark.parametrize("num_stages", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("num_micro_batches", [1, 2, 3, 4, 7, 8, 16])
def test_1f1b_is_paddles_order(num_stages, num_micro_batches):
    for stage in range(num_stages):
        assert build_schedule("1F1B", num_stages, num_micro_batches, stage) == \
            paddle_schedule(num_stages, num_micro_batches, stage)


@pytest.mark.parametrize("num_stages,num_chunks", [(2, 2), (3, 2), (4, 2), (4, 3), (8, 2)])
@pytest.mark.parametrize("extra_micro_batches", [0, 1, 3, 5, 8])
def test_vpp_is_paddles_interleaved_order(num_stages, num_chunks, extra_micro_batches):
    num_micro_batches = 2 * num_stages + extra_micro_batches
    for stage in range(num_stages):
        assert build_schedule("VPP", num_stages, num_micro_batches, stage, num_chunks) == \
            paddle_schedule(num_stages, num_micro_batches, stage, num_chunks)


def test_fthenb_runs_every_forward_first():
    assert build_schedule("FThenB", 3, 3, 1) == [Action("F", 0), Action("F", 1), Action("F", 2),
                                                  Action("B", 0), Action("B", 1), Action("B", 2)]
    # Paddle's PipelineParallelWithInterleaveFthenB order: chunk-major forwards, backwards from the last chunk
    assert build_schedule("FThenB", 2, 2, 0, num_chunks=2) == [
        Action("F", 0, 0), Action("F", 1, 0), Action("F", 0, 1), Action("F", 1, 1),
        Action("B", 0, 1), Action("B", 1, 1), Action("B", 0, 0), Action("B", 1, 0)]


def test_every_mode_runs_each_forward_and_backward_once():
    for mode in SCHEDULE_MODES:
        chunks = 2 if mode == "VPP" else 1
        actions = build_schedule(mode, 4, 8, 2, chunks)
        for kind in "FB":
            done = sorted((a.chunk, a.micro_batch) for a in actions if a.kind == kind)
            assert done == [(c, m) for c in range(chunks) for m in range(8)], (mode, kind)


def test_virtual_stage_is_paddles_interleave_layout():
    assert [virtual_stage(s, c, 4) for c in range(2) for s in range(4)] == list(range(8))


@pytest.mark.parametrize("args,message", [
    (("ZB", 2, 4, 0), "argument 'mode' must be one of"),
    (("1F1B", 0, 4, 0), "argument 'num_stages' must be an int >= 1; got 0"),
    (("1F1B", 2, 0, 0), "argument 'num_micro_batches' must be an int >= 1; got 0"),
    (("1F1B", 2, 4, 2), "argument 'stage' must be below num_stages=2; got 2"),
    (("1F1B", 2, 4, -1), "argument 'stage' must be an int >= 0; got -1"),
    (("1F1B", 2, 4.0, 0), "argument 'num_micro_batches' must be an int >= 1; got 4.0"),
    (("1F1B", 2, 4, 0, 2), "mode '1F1B' runs one model chunk per stage; got num_chunks=2"),
    (("VPP", 2, 4, 0, 1), "mode 'VPP' (interleaved 1F1B) needs num_chunks > 1"),
    (("VPP", 1, 4, 0, 2), "mode 'VPP' needs num_stages >= 2; got num_stages=1"),
    (("VPP", 4, 7, 0, 2), "needs num_micro_batches >= 2 * num_stages (= 8), as Paddle's interleaved schedule "
                          "does; got num_micro_batches=7"),
])
def test_bad_arguments_name_function_argument_and_value(args, message):
    with pytest.raises(ValueError, match=r"^build_schedule\(\): .*") as info:
        build_schedule(*args)
    assert message in str(info.value)


# ---- the simulator ----------------------------------------------------------------------------------------

def _modes_and_sizes():
    """Every mode, num_stages 1..8, micro-batch counts below, at and above the stage count (VPP: Paddle's
    m >= 2 * num_stages; fewer is refused, tested above)."""
    for num_stages in range(1, 9):
        for mode in SCHEDULE_MODES:
            chunk_choices = {"VPP": (2, 3), "FThenB": (1, 2)}.get(mode, (1,))
            for chunks in chunk_choices:
                if mode == "VPP" and num_stages == 1:
                    continue
                low = 2 * num_stages if mode == "VPP" else 1
                for m in sorted({low, low + 1, num_stages, 2 * num_stages + 3} - set(range(low))):
                    yield mode, num_stages, m, chunks


@pytest.mark.parametrize("mode", SCHEDULE_MODES)
def test_every_mode_stage_and_micro_batch_count_is_valid_and_deadlock_free(mode):
    cases = [c for c in _modes_and_sizes() if c[0] == mode]
    assert len(cases) >= 16
    for _, p, m, chunks in cases:
        result = simulate_mode(mode, p, m, chunks, costs={"F": 1, "B": 2}, comm=0.25)
        assert result.num_micro_batches == m and result.num_chunks == chunks
        assert result.channel_fifo, (mode, p, m, chunks)
        assert result.busy == pytest.approx([3 * m] * p)        # offload copies cost nothing by default
        # no schedule beats a rank's own work, nor one micro-batch's trip through every virtual stage and back
        hops = p * chunks - 1 if p > 1 else 0
        assert result.makespan >= max(3 * m, 3 * p + 2 * 0.25 * hops) - 1e-9


def test_simulator_times_a_small_1f1b_by_hand():
    """pp2, 2 micro-batches, F=1, B=2, messages take 0.5: stage 1 runs F0 [1.5, 2.5], B0 [2.5, 4.5], F1 [4.5, 5.5],
    B1 [5.5, 7.5]; stage 0 runs B0 [5, 7] and B1 [8, 10]."""
    result = simulate_mode("1F1B", 2, 2, costs={"F": 1, "B": 2}, comm=0.5)
    assert result.makespan == 10
    assert [result.start[1, i] for i in range(4)] == [1.5, 2.5, 4.5, 5.5]
    assert [result.start[0, i] for i in range(4)] == [0, 1, 5, 8]
    assert result.idle == [10 - 6, 10 - 6]


@pytest.mark.parametrize("costs", [{"F": 1, "B": 1}, {"F": 1, "B": 2}, {"F": 2, "B": 3}])
@pytest.mark.parametrize("p,m", [(2, 1), (2, 4), (3, 5), (4, 8), (4, 3), (8, 8), (8, 20)])
def test_1f1b_and_fthenb_bubble_is_the_analytic_one(costs, p, m):
    """(p - 1) / (m + p - 1) for both without communication time; 1F1B holds min(p - stage, m) micro-batches,
    FThenB all m."""
    for mode in ("1F1B", "FThenB"):
        result = simulate_mode(mode, p, m, costs=costs)
        assert result.bubble_fraction == pytest.approx((p - 1) / (m + p - 1))
        assert result.makespan == pytest.approx((m + p - 1) * (costs["F"] + costs["B"]))
    assert simulate_mode("1F1B", p, m, costs=costs).peak_activations == [min(p - s, m) for s in range(p)]
    assert simulate_mode("FThenB", p, m, costs=costs).peak_activations == [m] * p


@pytest.mark.parametrize("p,chunks", [(2, 2), (4, 2), (4, 4), (8, 2)])
def test_interleaving_divides_the_bubble_by_the_chunk_count(p, chunks):
    """Megatron's result for the interleaved schedule: bubble (p - 1) / (chunks * m + p - 1), also for m not a
    multiple of p (Paddle's first-chunk rule); below 1F1B's for the same m."""
    for m in (2 * p, 2 * p + 1, 3 * p):
        result = simulate_mode("VPP", p, m, chunks)
        assert result.bubble_fraction == pytest.approx((p - 1) / (chunks * m + p - 1))
        assert result.bubble_fraction < simulate_mode("1F1B", p, m).bubble_fraction


@pytest.mark.parametrize("p,m", [(2, 4), (3, 7), (4, 8), (4, 2), (6, 12), (8, 16)])
def test_offload_schedule_keeps_1f1b_bubble_with_at_most_two_micro_batches_on_the_device(p, m):
    plain, swapped = simulate_mode("1F1B", p, m), simulate_mode("1F1BOffload", p, m)
    assert swapped.makespan == plain.makespan and swapped.bubble_fraction == plain.bubble_fraction
    assert swapped.peak_activations == plain.peak_activations       # in flight: the same micro-batches
    assert max(swapped.peak_resident) == min(2, max(plain.peak_resident))
    assert all(a <= b for a, b in zip(swapped.peak_resident, plain.peak_resident))
    # copies that are not overlapped (the CPU: a memcpy inline) cost their time on the rank that makes them
    copies = sum(a.kind in "OL" for a in build_schedule("1F1BOffload", p, m, 0))
    costly = simulate_mode("1F1BOffload", p, m, costs={"O": 0.1, "L": 0.1})
    assert costly.busy[0] == pytest.approx(plain.busy[0] + 0.1 * copies)


def test_offload_removes_its_actions_in_pairs_around_each_swapped_forward():
    actions = build_schedule("1F1BOffload", 4, 8, 0)
    assert [a for a in actions if a.kind in "FB"] == build_schedule("1F1B", 4, 8, 0)
    assert actions[:10] == [Action("F", 0), Action("O", 0), Action("F", 1), Action("O", 1), Action("F", 2),
                            Action("O", 2), Action("L", 0), Action("F", 3), Action("O", 3), Action("B", 0)]
    for stage in (2, 3):        # 1F1B holds 2 and 1 micro-batches there: nothing to gain, nothing copied
        assert build_schedule("1F1BOffload", 4, 8, stage) == build_schedule("1F1B", 4, 8, stage)
    assert build_schedule("1F1BOffload", 2, 8, 0) == build_schedule("1F1B", 2, 8, 0)


A = Action


@pytest.mark.parametrize("schedules,message", [
    ([[A("F", 0), A("B", 0), A("F", 1), A("B", 1)], [A("F", 1), A("F", 0), A("B", 0), A("B", 1)]],
     "the schedule deadlocks: stage 0 waits at B0 for B0 of stage 1; stage 1 waits at F1 for F1 of stage 0; "
     "cycle of waits: stage 0 -> stage 1 -> stage 0"),
    ([[A("F", 0), A("F", 1), A("B", 1), A("B", 0)], [A("F", 0), A("B", 0), A("F", 1), A("B", 1)],
      [A("F", 0), A("F", 1), A("B", 0), A("B", 1)]],
     "stage 0 waits at B1 for B1 of stage 1; stage 1 waits at B0 for B0 of stage 2; stage 2 waits at F1 for F1 "
     "of stage 1; cycle of waits: stage 1 -> stage 2 -> stage 1"),
    ([[A("B", 0), A("F", 0)]], "stage 0's schedule runs B0 before F0 (position 0)"),
    ([[A("F", 0), A("F", 0), A("B", 0)]], "stage 0's schedule runs F0 twice"),
    ([[A("F", 0), A("F", 1), A("B", 0)]], "never runs the backward of (micro-batch, chunk) [(1, 0)]"),
    ([[A("F", 0), A("B", 0)], [A("F", 1), A("B", 1)]], "stage 1's schedule does not run micro-batches 0..n-1 "
     "(stage 0 runs 1) each through its 1 chunk(s) once: the forwards of (micro-batch, chunk) [(0, 0), (1, 0)] "
     "are missing or extra"),
    ([[A("F", 1), A("B", 1)]], "stage 0's schedule does not run micro-batches 0..n-1"),
    ([[A("F", 0, 1), A("B", 0, 1)]], "each through its 2 chunk(s) once: the forwards of (micro-batch, chunk) "
     "[(0, 0)] are missing or extra"),
    ([[A("F", 0), A("O", 0), A("B", 0)]], "runs B0 before L0"),
    ([[A("F", 0), A("L", 0), A("B", 0)]], "runs L0 before O0"),
    ([[A("F", 0), A("B", 0), A("W", 0), A("O", 0)]], "offloads O0 after its backward"),
    ([[A("F", 0), A("W", 0), A("B", 0)]], "runs W0 before B0"),
    ([[A("F", 0), A("X", 0)]], "has X0 at position 1; expected an Action of kind"),
    ([[A("F", -1), A("B", -1)]], "stage 0's action F-1 names chunk 0 of 1 / micro-batch -1"),
])
def test_broken_schedules_are_caught_with_the_actions_involved(schedules, message):
    with pytest.raises(ScheduleError, match=r"^simulate\(\): ") as info:
        simulate(schedules)
    assert message in str(info.value)


def test_receiving_out_of_send_order_is_reported():
    """Stage 1 takes micro-batch 1's activation before micro-batch 0's: no deadlock (sends never block), but an
    executor matching receives by source only would mix them up."""
    result = simulate([[A("F", 0), A("F", 1), A("B", 0), A("B", 1)], [A("F", 1), A("F", 0), A("B", 0), A("B", 1)]])
    assert not result.channel_fifo


def test_split_backward_and_memory_units_of_chunks():
    """A W pass ends the micro-batch's lifetime; a chunk counts 1/num_chunks of a stage's activations."""
    split = [[A("F", 0), A("F", 1), A("B", 0), A("B", 1), A("W", 0), A("W", 1)]]
    result = simulate(split, costs={"B": 1, "W": 1})
    assert result.peak_activations == [2] and result.makespan == 6
    assert simulate_mode("VPP", 2, 4, 2).peak_activations == [2.5, 1.5]


# ---- real runs: bench/pipeline.py on 4 ranks, tiny -----------------------------------------------------------

BENCH = Path(__file__).resolve().parents[3] / "bench" / "pipeline.py"


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory):
    """bench/pipeline.py at a tiny size: one 4-rank job (pp4, 8 micro-batches) training the GPT's PipelineLayer
    under FThenB, 1F1B, VPP, 1F1BOffload and 1F1B-wait (1F1B without receives posted ahead) side by side, 1
    measured step after 1."""
    pytest.importorskip("mpi4py")
    out = tmp_path_factory.mktemp("bench_pipeline") / "bench.json"
    command = [sys.executable, str(BENCH), "--steps", "1", "--warmup", "1", "--width", "32", "--layers", "8",
               "--seq-len", "32", "--vocab", "64", "--heads", "4", "--json", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=BENCH.parent,
                          env=dict(os.environ, OARLOCK_COLLECTIVE_TIMEOUT="120", PYTHONWARNINGS="ignore"))
    assert done.returncode == 0 and out.exists(), f"bench/pipeline.py failed ({done.returncode}):\n" \
                                                  f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return json.loads(out.read_text())["table"]


def test_real_runs_of_every_schedule_give_the_same_losses(bench_run):
    reference = bench_run["1F1B"]["losses"]
    assert len(reference) == 2 and reference[-1] < reference[0]
    for mode, row in bench_run.items():
        np.testing.assert_allclose(row["losses"], reference, rtol=1e-6, err_msg=mode)


def test_measured_peaks_follow_the_simulator(bench_run):
    """Stage 0 holds all 8 micro-batches under FThenB, 4 under 1F1B, 5.5 chunk-halves under VPP and at most 2
    on the device under 1F1BOffload (simulator); the measured peaks (bytes above the run's start) order the same
    way, and offloading cuts stage 0's below three quarters of 1F1B's (2 of 4 micro-batches, plus buffers)."""
    peak = {mode: row["peak_bytes"] for mode, row in bench_run.items()}
    simulated = {mode: simulate_mode(mode.removesuffix("-wait"), 4, 8, 2 if mode == "VPP" else 1).peak_resident
                 for mode in peak}
    assert simulated["FThenB"][0] > simulated["VPP"][0] > simulated["1F1B"][0] > simulated["1F1BOffload"][0]
    assert peak["FThenB"][0] > peak["VPP"][0] > peak["1F1B"][0] > peak["1F1BOffload"][0]
    assert peak["1F1BOffload"][0] < 0.75 * peak["1F1B"][0]
    for stage in range(3):      # every stage but the last holds more under FThenB than under 1F1B
        assert peak["FThenB"][stage] > peak["1F1B"][stage]
    assert peak["1F1B"][1] > peak["1F1BOffload"][1]        # 3 micro-batches against 2 (stage 2: 2 and 2)
    # 1F1B: stage s holds 4 - s micro-batches; the peaks fall from stage 0 to stage 2 (the blocks are spread
    # evenly; stage 3 also holds the head's logits)
    assert peak["1F1B"][0] > peak["1F1B"][1] > peak["1F1B"][2]


def test_receives_are_posted_an_action_ahead(bench_run):
    """With prefetch on, every receive but a link's first forward one (which waits for the link's metadata) is
    posted during an earlier action: stage 0 receives only gradients (8, all ahead), stages 1-2 8 inputs (7
    ahead) and 8 gradients (ahead), stage 3 8 inputs (7 ahead). 1F1B-wait posts none ahead."""
    np.testing.assert_allclose(bench_run["1F1B"]["received_ahead"], [1, 15 / 16, 15 / 16, 7 / 8])
    assert bench_run["1F1B-wait"]["received_ahead"] == [0, 0, 0, 0]
