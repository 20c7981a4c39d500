"""Ops on DistTensors in one real 4-rank MPI job (scripts/spmd_job.py): every SPMD rule against the op on the
full tensors (values, claimed output placements, each rank's piece), Partial made by a matmul, a dp x mp MLP's
gradients against one process's, and the clear error for inputs on two meshes."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))   # spmd_jobs, next to this file
from spmd_jobs import launch  # noqa: E402


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return launch("spmd_job.py", tmp_path_factory.mktemp("spmd") / "report.json")


@pytest.mark.parametrize("check", ["check_ops", "check_gradients", "check_bad_input"])
def test_spmd_job(report, check):
    assert report["cases"] >= 30
    failures = report["failures"][check]
    assert not failures, "\n".join(failures)
