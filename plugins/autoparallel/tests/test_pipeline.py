"""parallelize with pp_config: the GPT trained 20 steps on two pipeline stages (pp2 x dp2 and pp2 x mp2) in one
4-rank MPI job (scripts/pp_gpt_job.py), every step's loss within 1e-5 relative of one process; and pp_config's
bad input (checked in this process, before anything is moved)."""

import os
import sys

import pytest

import oarlock
import oarlock.distributed as dist
import oarlock.nn as nn

sys.path.insert(0, os.path.dirname(__file__))   # spmd_jobs, next to this file
from spmd_jobs import assert_run_equals_one_process, launch  # noqa: E402

RUNS = ["pp2_dp2", "pp2_mp2"]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return launch("pp_gpt_job.py", tmp_path_factory.mktemp("pp_gpt") / "report.json", timeout=400)


@pytest.mark.parametrize("run", RUNS)
def test_pipeline_training_equals_one_process(report, run):
    assert_run_equals_one_process(report, run)


class Stack(nn.Layer):
    def __init__(self):
        super().__init__()
        self.layers = nn.LayerList([nn.Linear(4, 4) for _ in range(3)])
        self.out = nn.Linear(4, 2)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.out(x)


PP2 = dist.ProcessMesh([[0], [1]], dim_names=["pp", "dp"])


@pytest.mark.parametrize("config, error, words", [
    ({"pp_config": {"split_spec": {"layers.7": dist.SplitPoint.END}}}, ValueError, "'layers.7'"),
    ({"pp_config": {"split_spec": {"layers.0": dist.SplitPoint.BEGINNING}}}, NotImplementedError, "BEGINNING"),
    ({"pp_config": {"split_spec": {"out": dist.SplitPoint.END}}}, ValueError, "nothing follows split layer 'out'"),
    ({"pp_config": {"split_spec": "blocks"}}, ValueError, "matches 0 numbered layers"),
    ({"pp_config": {"split_spec": {"layers.0": dist.SplitPoint.END, "layers.1": dist.SplitPoint.END}}},
     ValueError, "needs 1"),
    ({"pp_config": {"split_spec": "layers", "global_spec": "out"}}, NotImplementedError, "global_spec"),
    ({"pp_config": {"split_spec": "layers", "micro": 2}}, ValueError, "unknown keys ['micro']"),
    ({"cp_config": {"parallelize_plan": {}}}, NotImplementedError, "cp_config"),
])
def test_bad_pipeline_configs_are_refused(config, error, words):
    with pytest.raises(error, match="parallelize\\(\\)") as caught:
        dist.parallelize(Stack(), None, mesh=PP2, config=config)
    assert words in str(caught.value)


def test_pp_config_needs_a_pp_mesh_dim():
    with pytest.raises(ValueError, match="mesh dim named 'pp'"):
        dist.parallelize(Stack(), None, mesh=dist.ProcessMesh([0], dim_names=["dp"]),
                         config={"pp_config": {"split_spec": "layers"}})


def test_an_even_split_puts_each_stage_on_its_sub_mesh():
    model, _ = dist.parallelize(Stack(), None, mesh=dist.ProcessMesh([[0], [1]], dim_names=["pp", "dp"]),
                                config={"pp_config": {"split_spec": "layers"}})
    stage0, stage1 = PP2.get_mesh_with_dim("pp", 0), PP2.get_mesh_with_dim("pp", 1)
    assert model.layers[0].weight.process_mesh == stage0 and model.layers[1].weight.process_mesh == stage0
    assert model.layers[2].weight.process_mesh == stage1 and model.out.bias.process_mesh == stage1
    assert oarlock.distributed.get_rank() == 0 and not model.out.weight._is_initialized()
