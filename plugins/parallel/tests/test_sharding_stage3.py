"""GroupShardedStage3 ('p_g_os'): real 2- and 4-rank jobs under `oarlock launch` run
tests/scripts/sharding_stage3_job.py, whose checks compare a GPT-like model trained 5 steps with AdamW and
global-norm clipping, each rank on its own slice of the batch, with one process training the plain model on
the whole batch (per-step losses, final weights, state_dict), measure the per-rank bytes of pieces +
gradients + optimizer states against one process, and check the errors. One pytest test per check and world
size reports the failures of every rank.
"""

from __future__ import annotations

import pytest
from parallel_jobs import assert_check_passed, load_job, report_fixture

pytest.importorskip("mpi4py")

job = load_job("sharding_stage3_job")
report = report_fixture("sharding_stage3_job", [2, 4], timeout=600)


@pytest.mark.parametrize("check", list(job.CHECKS))
def test_ranks(report, check):
    assert_check_passed(report, check)
