"""Pipeline schedules (oarlock_parallel.pipeline_schedules): the per-rank action lists against the order Paddle
3.2's own executors produce (PipelineParallel and PipelineParallelWithInterleave run with static_scheduler=True,
which walks the real scheduling loops and returns the order instead of running a model), and the errors."""

import logging
import types

import pytest

from oarlock_parallel.pipeline_schedules import SCHEDULE_MODES, Action, build_schedule, virtual_stage

pp = pytest.importorskip("paddle.distributed.fleet.meta_parallel.pipeline_parallel",
                         reason="Paddle 3.2 is the oracle for the 1F1B and interleaved orders")


def paddle_schedule(num_stages, num_micro_batches, stage, chunks=1):
    """Paddle's own loop order for one rank, as Actions: an executor object built without __init__ (no ranks,
    no model), holding just what the static_scheduler path reads."""
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
