"""A FlexCheckpoint saved under dp2 x mp2 (model.sharded_state_dict() and the optimizer's
sharded_state_dict, AdamW moments and step counts included) loads under mp4, sharding 4 and one process
bit for bit, and training resumes with the losses of an uninterrupted run: a real 4-rank job under
`oarlock launch` (tests/scripts/roundtrip_job.py, mode "parallel"), then one plain process on the same
checkpoint (mode "single"). One pytest test per check reports the failures of every rank.
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

SCRIPTS = Path(__file__).parent / "scripts"
JOB = SCRIPTS / "roundtrip_job.py"
sys.path.insert(0, str(SCRIPTS))     # roundtrip_job imports hybrid_job, as it does when run as a script
_spec = importlib.util.spec_from_file_location("roundtrip_job", JOB)
job = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(job)
sys.path.remove(str(SCRIPTS))

ENV = dict(os.environ, OARLOCK_COLLECTIVE_TIMEOUT="60", PYTHONWARNINGS="ignore")


def _run(command: list, out: Path, what: str) -> dict:
    done = subprocess.run(command, capture_output=True, text=True, timeout=400, env=ENV)
    assert done.returncode == 0 and out.exists(), (
        f"{what} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    folder = tmp_path_factory.mktemp("roundtrip")
    parallel = _run([sys.executable, "-m", "oarlock.cli", "launch", "-n", "4", str(JOB), "parallel", str(folder),
                     str(folder / "parallel.json")], folder / "parallel.json", "the 4-rank job")
    assert parallel["size"] == 4
    single = ({"failures": {name: ["the 4-rank job saved no checkpoint"] for name in job.CHECKS["single"]}}
              if not (folder / "saved.npz").exists() else
              _run([sys.executable, str(JOB), "single", str(folder), str(folder / "single.json")],
                   folder / "single.json", "the one-process load"))
    return {**parallel["failures"], **single["failures"]}


@pytest.mark.parametrize("check", job.CHECKS["parallel"] + job.CHECKS["single"])
def test_roundtrip(reports, check):
    failures = reports[check]
    assert not failures, "\n".join(failures)
