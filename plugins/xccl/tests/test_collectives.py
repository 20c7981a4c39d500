"""Every collective checked against numpy in real MPI jobs: 1 process (MPI singleton), 2 ranks under
`oarlock launch` and 4 ranks (oversubscribing the 2 cores) under plain `mpiexec`, and 2 ranks
again with OARLOCK_DISTRIBUTED_DEBUG=1 (no false alarms from the agreement check).

Each job runs tests/scripts/collectives_job.py once; one pytest test per check
and world size reports that check's failures from every rank.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mpi4py")

SCRIPTS = Path(__file__).parent / "scripts"
JOB = SCRIPTS / "collectives_job.py"
_spec = importlib.util.spec_from_file_location("collectives_job", JOB)
job = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(job)

# (world size, how it is started); the debug run also checks every call's cross-rank agreement
RUNS = [(1, "python"), (2, "oarlock launch"), (4, "mpiexec"), (2, "debug")]


def _command(size: int, how: str, out: Path) -> list:
    if how == "python":
        return [sys.executable, str(JOB), str(out)]
    if how in ("oarlock launch", "debug"):
        return [sys.executable, "-m", "oarlock.cli", "launch", "-n", str(size), str(JOB), str(out)]
    mpiexec = shutil.which("mpiexec") or str(Path(sys.executable).parent / "mpiexec")
    return [mpiexec, "-n", str(size), sys.executable, str(JOB), str(out)]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Run each job once (lazily) and keep its JSON report."""
    cache = {}

    def get(size: int, how: str) -> dict:
        if (size, how) not in cache:
            out = tmp_path_factory.mktemp(f"job{size}") / "report.json"
            env = dict(os.environ, OARLOCK_COLLECTIVE_TIMEOUT="120", PYTHONWARNINGS="ignore",
                       OARLOCK_DISTRIBUTED_DEBUG="1" if how == "debug" else "0")
            done = subprocess.run(_command(size, how, out), capture_output=True, text=True, timeout=600, env=env)
            assert done.returncode == 0 and out.exists(), (
                f"{how} job with {size} rank(s) failed ({done.returncode}):\n{done.stdout[-3000:]}\n"
                f"{done.stderr[-3000:]}")
            cache[(size, how)] = json.loads(out.read_text())
        return cache[(size, how)]

    return get


@pytest.mark.parametrize("size,how", RUNS, ids=[f"{n}ranks-{how.replace(' ', '_')}" for n, how in RUNS])
@pytest.mark.parametrize("check", list(job.CHECKS))
def test_collective(results, check, size, how):
    report = results(size, how)
    assert report["size"] == size
    failures = report["failures"][check]
    assert not failures, "\n".join(failures)
