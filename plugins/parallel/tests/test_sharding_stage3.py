"""GroupShardedStage3 ('p_g_os'): real 2- and 4-rank jobs under `oarlock launch` run
tests/scripts/sharding_stage3_job.py, whose checks compare a GPT-like model trained 5 steps with AdamW and
global-norm clipping, each rank on its own slice of the batch, with one process training the plain model on
the whole batch (per-step losses, final weights, state_dict), measure the per-rank bytes of pieces +
gradients + optimizer states against one process, and check the errors. One pytest test per check and world
size reports the failures of every rank.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mpi4py")

JOB = Path(__file__).parent / "scripts" / "sharding_stage3_job.py"
_spec = importlib.util.spec_from_file_location("sharding_stage3_job", JOB)
job = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(job)

_REPORTS: dict = {}


def _report(ranks, tmp_path_factory):
    if ranks not in _REPORTS:
        out = tmp_path_factory.mktemp(f"stage3_{ranks}") / "report.json"
        env = dict(os.environ, OARLOCK_COLLECTIVE_TIMEOUT="60", PYTHONWARNINGS="ignore")
        done = subprocess.run([sys.executable, "-m", "oarlock.cli", "launch", "-n", str(ranks), str(JOB), str(out)],
                              capture_output=True, text=True, timeout=600, env=env)
        assert done.returncode == 0 and out.exists(), (
            f"{ranks}-rank job failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        _REPORTS[ranks] = json.loads(out.read_text())
    return _REPORTS[ranks]


@pytest.mark.parametrize("ranks", [2, 4])
@pytest.mark.parametrize("check", list(job.CHECKS))
def test_ranks(tmp_path_factory, ranks, check):
    report = _report(ranks, tmp_path_factory)
    assert report["size"] == ranks
    failures = report["failures"][check]
    assert not failures, "\n".join(failures)
