"""Pipeline parallelism: PipelineLayer's segmentation against Paddle 3.2's own SegmentLayers, what travels
between stages, Paddle's micro-batch conventions and the one-stage PipelineLayer in-process; then one 2-rank MPI
job (scripts/pipeline_job.py) whose checks compare PipelineParallel with the same model run as one process
(dicts, tuples and stop_gradient tensors between stages, both schedules, shared layers, eval_batch, several loss
functions, bad input failing on every rank and the watchdog naming the stage). The GPT equal-loss layouts are
in test_pipeline_gpt.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import warnings

import numpy as np
import pytest
from parallel_jobs import assert_check_passed, launch_command, load_job

import oarlock
import oarlock.nn as nn
from oarlock.distributed.fleet.meta_parallel import LayerDesc, PipelineLayer
from oarlock_parallel.pipeline_data import MicroBatchError, micro_batches
from oarlock_parallel.pipeline_segment import segment
from oarlock_parallel.pipeline_struct import describe, flatten, unflatten


class Block(nn.Layer):
    def __init__(self, width=4):
        super().__init__()
        self.fc = nn.Linear(width, width)

    def forward(self, x):
        return oarlock.tanh(self.fc(x))


class Embedding(nn.Layer):
    def forward(self, x):
        return x


def _paddle_segments(paddle, names, parts, method, virtual=None):
    """Paddle's SegmentLayers on layers of the given class names (LayerDescs of freshly made classes)."""
    from paddle.distributed.fleet.meta_parallel.parallel_layers.pp_layers import LayerDesc as PaddleDesc
    from paddle.distributed.fleet.meta_parallel.parallel_layers.pp_layers import SegmentLayers
    classes = {n: type(n, (paddle.nn.Layer,), {}) for n in set(names)}
    descs = [PaddleDesc(classes[n]) for n in names]
    return SegmentLayers(descs, num_parts=parts, method=method, num_virtual_pipeline_stage=virtual).do_segment()


def _ours(names, parts, method, stages=None):
    classes = {n: type(n, (nn.Layer,), {}) for n in set(names)}
    return segment([LayerDesc(classes[n]) for n in names], parts, method, stages)


@pytest.mark.parametrize("items,parts", [(10, 4), (4, 2), (7, 3), (9, 9), (12, 8), (5, 2)])
def test_uniform_is_paddles(paddle, items, parts):
    names = ["Block"] * items
    assert _ours(names, parts, "uniform") == _paddle_segments(paddle, names, parts, "uniform")


def test_uniform_puts_the_remainder_last():
    assert _ours(["Block"] * 10, 4, "uniform") == [0, 2, 4, 7, 10]


@pytest.mark.parametrize("method,stages,virtual", [("layer:Block", 2, None), ("layer:block", 4, None),
                                                   ("layer:Block", 2, 2), ("layer:Emb|Head", 2, None)])
def test_by_layer_is_paddles(paddle, method, stages, virtual):
    names = ["Embedding"] + ["Block"] * 8 + ["Norm", "Head"]
    parts = stages * (virtual or 1)
    assert _ours(names, parts, method, stages) == _paddle_segments(paddle, names, stages, method, virtual)


def test_explicit_boundaries_are_paddles(paddle):
    names = ["Block"] * 6
    for bounds, parts in (([0, 1, 6], 2), ([0, 1, 4], 3), ([0, 3], 2), ([0, 2, 4, 6], 3)):
        assert _ours(names, parts, bounds) == _paddle_segments(paddle, names, parts, bounds)


@pytest.mark.parametrize("method,stages,message", [
    ("uniform", 4, "'uniform' leaves pipeline stage 0 without a layer: 3 layer(s) over 4 part(s)"),
    ([0, 3, 3], 2, "[0, 3, 3] leaves pipeline stage 1 without a layer"),
    ("layer:Nothing", 2, "'layer:Nothing' matches no layer"),
    ("layer:Block", 2, "matches 3 layers, which do not divide into 2 parts"),
    ([0, 3, 1, 3], 3, "must rise from 0 to the number of layers (3)"),
    ([1, 3], 2, "must hold int boundaries starting at 0"),
    ("cyclic", 2, "seg_method 'cyclic' is not supported; accepted: 'uniform'"),
])
def test_bad_splits_name_the_stage(method, stages, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        _ours(["Block"] * 3, stages, method)


def test_empty_virtual_stage_is_named():
    with pytest.raises(ValueError, match=re.escape("leaves pipeline stage 1 (virtual stage 3) without a layer")):
        _ours(["Block"] * 3, 4, [0, 1, 2, 3, 3], stages=2)


def test_structures_round_trip_and_describe():
    a, b = oarlock.ones([2, 3]), oarlock.zeros([4], dtype="int64")
    value = {"h": a, "pair": (b, None), "list": [a]}
    tensors, spec = flatten(value, "test")
    assert [t is x for t, x in zip(tensors, [a, b, a])] == [True] * 3
    rebuilt = unflatten(spec, tensors)
    assert rebuilt["h"] is a and rebuilt["pair"][0] is b and rebuilt["pair"][1] is None and rebuilt["list"][0] is a
    assert isinstance(rebuilt["pair"], tuple) and isinstance(rebuilt["list"], list)
    assert describe(spec, ["A", "B", "C"]) == "{'h': A, 'pair': (B, None), 'list': [C]}"
    with pytest.raises(TypeError, match="test: \\['x'\\] is a str; accepted: a Tensor, None"):
        flatten({"x": "text"}, "test")


def test_micro_batches_follow_paddles_conventions():
    x = oarlock.to_tensor(np.arange(12, dtype="float32").reshape(6, 2))
    y = oarlock.to_tensor(np.arange(6, dtype="int64"))
    micro = micro_batches([(x, None, [y[:2], y[2:4], y[4:]]), {"labels": y}], "f()", 2, 3, True, True)
    assert len(micro) == 3
    inputs, labels = micro[1]
    np.testing.assert_array_equal(inputs[0].numpy(), x.numpy()[2:4])
    assert inputs[1] is None and inputs[2].numpy().tolist() == [2, 3]
    assert labels["labels"].numpy().tolist() == [2, 3]
    assert micro_batches(None, "f()", 2, 3, False, False) == [(None, None)] * 3    # a middle stage reads nothing
    assert micro_batches([x, None], "f()", 3, 2, True, True)[0][1] is None
    for data, message in (([x, y], "data[0] (the inputs) has 6 rows on dim 0 (shape [6, 2]), but pipeline_configs "
                                   "micro_batch_size (4) x accumulate_steps (2) = 8"),
                          ([[x], y], "data[0] (the inputs) is a list of 1 values, but a list must hold one per "
                                     "micro-batch (accumulate_steps = 2)"),
                          ((x,), "data must be [inputs, labels]"),
                          ([oarlock.ones([8, 2]), "y"], "data[1] (the labels) is a str")):
        with pytest.raises(MicroBatchError, match=re.escape(message)):
            micro_batches(data, "f()", 4, 2, True, True)


class DictBlock(nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, d):
        return {"h": oarlock.tanh(self.fc(d["h"])) * (1 + d["mask"]), "mask": d["mask"], "ids": d["ids"]}


def test_one_stage_recompute_tracks_tensors_inside_a_dict():
    """With one stage the PipelineLayer is a plain model; recompute_interval=1 over layers passing a dict (a float
    tensor needing gradients, a float mask and int64 ids without) gives the outputs and gradients of the run
    without recompute (recompute() alone only tracks top-level tensors)."""
    rng = np.random.default_rng(0)
    grads = []
    for interval in (0, 1):
        model = PipelineLayer([LayerDesc(DictBlock) for _ in range(3)], num_stages=1, recompute_interval=interval,
                              recompute_ctx={"preserve_rng_state": True})
        h = oarlock.to_tensor(rng.standard_normal((2, 4)).astype("float32") if not grads else grads[0][2])
        h.stop_gradient = False
        value = {"h": h, "mask": oarlock.to_tensor([[1.0], [0.0]]), "ids": oarlock.to_tensor([3, 4])}
        out = model(value)
        assert out["ids"].numpy().tolist() == [3, 4]
        out["h"].sum().backward()
        grads.append([out["h"].numpy(), [p.grad.numpy() for p in model.parameters()], h.numpy(), h.grad.numpy()])
    np.testing.assert_allclose(grads[1][0], grads[0][0], rtol=1e-6)
    for got, want in zip(grads[1][1], grads[0][1]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(grads[1][3], grads[0][3], rtol=1e-5, atol=1e-7)


def test_one_stage_layer_checks_its_arguments():
    descs = [LayerDesc(Block), LayerDesc(Block)]
    for kwargs, kind, message in (
            ({"num_virtual_pipeline_stages": 2}, ValueError, "num_virtual_pipeline_stages=2 needs several pipeline"),
            ({"use_dualpipev": True}, NotImplementedError, "use_dualpipev=True"),
            ({"recompute_interval": 1}, ValueError, "recompute_ctx must be given")):
        with pytest.raises(kind, match=re.escape(message)):
            PipelineLayer(descs, num_stages=1, **kwargs)
    model = PipelineLayer(descs, num_stages=1)
    with pytest.raises(ValueError, match=re.escape("chunk_id=0 is only valid with virtual pipeline stages")):
        model(oarlock.ones([1, 4]), chunk_id=0)
    with pytest.raises(ValueError, match=re.escape("layer index 2 is out of range [0, 2)")):
        model.get_stage_from_index(2)


def test_building_keeps_the_generator_and_seeds_per_layer():
    """Paddle seeds layer i with 1234 + i and restores the generator: a layer's weights do not depend on what was
    built before it, and building does not move the program's random stream."""
    oarlock.seed(7)
    expected = oarlock.rand([3]).numpy()
    oarlock.seed(7)
    model = PipelineLayer([LayerDesc(Block), LayerDesc(Block)], num_stages=1)
    np.testing.assert_array_equal(oarlock.rand([3]).numpy(), expected)
    alone = PipelineLayer([LayerDesc(Block, 3), LayerDesc(Block)], num_stages=1)
    np.testing.assert_array_equal(model.run_function[1].fc.weight.numpy(), alone.run_function[1].fc.weight.numpy())


# -- the MPI job ----------------------------------------------------------------------------------------------
pytest.importorskip("mpi4py")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    job = load_job("pipeline_job")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """(the job's report, its completed process). The last check times out once on purpose: the watchdog then
    marks the world broken and the ranks exit with status 1 without MPI_Finalize, after the report is written."""
    out = tmp_path_factory.mktemp("pipeline") / "report.json"
    env = dict(os.environ, OARLOCK_COLLECTIVE_TIMEOUT="5", PYTHONWARNINGS="ignore")
    done = subprocess.run(launch_command("pipeline_job", out, ranks=2), capture_output=True, text=True, timeout=300,
                          env=env)
    assert out.exists(), f"the 2-rank pipeline job wrote no report ({done.returncode}):\n{done.stdout[-3000:]}\n" \
                         f"{done.stderr[-3000:]}"
    return json.loads(out.read_text()), done


@pytest.mark.parametrize("check", list(job.CHECKS))
def test_pipeline_job(report, check):
    got, _ = report
    assert got["size"] == 2
    assert_check_passed(got, check)


def test_pipeline_job_exits_by_the_expected_timeout_only(report):
    _, done = report
    assert done.returncode == 1 and "exiting without MPI_Finalize" in done.stderr and \
        "its peer(s) [1] have not matched it" in done.stderr, f"{done.returncode}:\n{done.stderr[-3000:]}"
