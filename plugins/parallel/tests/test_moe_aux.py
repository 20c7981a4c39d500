"""The MoE gates' whole-batch options on a 2-rank MPI job (scripts/moe_aux_job.py): with global_aux the aux
loss of GShardGate (data- and expert-parallel layouts) and SwitchGate is the whole batch's, against float64
numpy, with gradients whose average over the ranks is the whole batch's; without it Paddle's local loss;
batch_group makes random routing one process's; bad input fails."""

from __future__ import annotations

import pytest
from parallel_jobs import assert_check_passed, load_job, report_fixture

pytest.importorskip("mpi4py")

JOB = load_job("moe_aux_job")
report = report_fixture("moe_aux_job", [2])


@pytest.mark.parametrize("check", list(JOB.CHECKS))
def test_job_check(report, check):
    assert_check_passed(report, check)
