"""Ops on DistTensors in one real 4-rank MPI job (scripts/spmd_job.py): every SPMD rule against the op on the
full tensors (values, claimed output placements, each rank's piece), Partial made by a matmul, a dp x mp MLP's
gradients against one process's, and the clear error for inputs on two meshes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).parent / "scripts"


def launch(script: str, out: Path, ranks: int = 4, timeout: int = 300) -> dict:
    """The JSON report scripts/<script>.py wrote to `out` when run on `ranks` ranks under `oarlock launch`."""
    env = dict(os.environ, OARLOCK_COLLECTIVE_TIMEOUT="60", PYTHONWARNINGS="ignore")
    done = subprocess.run([sys.executable, "-m", "oarlock.cli", "launch", "-n", str(ranks), str(SCRIPTS / script),
                           str(out)], capture_output=True, text=True, timeout=timeout, env=env)
    assert done.returncode == 0 and out.exists(), f"{script} failed ({done.returncode}):\n{done.stdout[-3000:]}\n" \
                                                  f"{done.stderr[-3000:]}"
    report = json.loads(out.read_text())
    assert report["size"] == ranks
    return report


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return launch("spmd_job.py", tmp_path_factory.mktemp("spmd") / "report.json")


@pytest.mark.parametrize("check", ["check_ops", "check_gradients", "check_bad_input"])
def test_spmd_job(report, check):
    assert report["cases"] >= 30
    failures = report["failures"][check]
    assert not failures, "\n".join(failures)
