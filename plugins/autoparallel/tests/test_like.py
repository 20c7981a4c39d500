"""zeros_like / full_like / randn_like / ones_like of distributed tensors on a 2x2 mesh, in one 4-rank MPI job
(scripts/like_job.py): each rank holds its piece of the result (the single-process layout checks are in
test_dtensor.py)."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))   # spmd_jobs, next to this file
from spmd_jobs import launch  # noqa: E402


def test_like_functions_give_each_rank_its_piece(tmp_path):
    report = launch("like_job.py", tmp_path / "report.json", timeout=200)
    assert not report["failures"], "\n".join(report["failures"])
