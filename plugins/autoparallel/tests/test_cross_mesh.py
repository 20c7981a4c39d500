"""Differentiable reshard between meshes of other processes (how a pipeline moves activations between stages),
in one 4-rank MPI job (scripts/cross_mesh_job.py): a two-stage computation's loss and gradients equal one
process's, for disjoint meshes ([0, 1] -> [2, 3]) and overlapping ones ([0, 1] -> [1, 2])."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))   # spmd_jobs, next to this file
from spmd_jobs import launch  # noqa: E402

CASES = ["disjoint_s0", "disjoint_r_to_s1", "overlapping"]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return launch("cross_mesh_job.py", tmp_path_factory.mktemp("cross_mesh") / "report.json", timeout=200)


@pytest.mark.parametrize("case", CASES)
def test_two_stages_equal_one_process(report, case):
    failures = report["failures"][case]
    assert not failures, "\n".join(failures)
