"""The tiny GPT trained 20 steps under auto parallel on a 2x2 (dp x mp) mesh in one 4-rank MPI job
(scripts/auto_gpt_job.py): under shard_layer with a column / row parallel shard_fn, under parallelize with
ColWiseParallel / RowWiseParallel plans, with shard_optimizer(ShardingStage1("dp")), ShardingStage2("dp")
(whose gradients must be dp shards after each backward) and ShardingStage3("dp"); every step's loss within
1e-5 relative of the same model trained in one process."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))   # spmd_jobs, next to this file
from spmd_jobs import assert_run_equals_one_process, launch  # noqa: E402

RUNS = ["shard_layer", "parallelize", "stage1", "stage2", "stage3"]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return launch("auto_gpt_job.py", tmp_path_factory.mktemp("auto_gpt") / "report.json", timeout=400)


@pytest.mark.parametrize("run", RUNS)
def test_auto_parallel_training_equals_one_process(report, run):
    assert_run_equals_one_process(report, run)
