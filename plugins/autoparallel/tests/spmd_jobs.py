"""Launching the MPI job scripts of test_spmd_dist and test_auto_train (scripts/*.py) under `oarlock launch`."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).parent / "scripts"


def launch(script: str, out: Path, ranks: int = 4, timeout: int = 300) -> dict:
    """The JSON report scripts/<script> wrote to `out` when run on `ranks` ranks; the calling test fails with
    the job's output when it failed. A collective that waits over 60 s fails instead of hanging."""
    env = dict(os.environ, OARLOCK_COLLECTIVE_TIMEOUT="60", PYTHONWARNINGS="ignore")
    done = subprocess.run([sys.executable, "-m", "oarlock.cli", "launch", "-n", str(ranks), str(SCRIPTS / script),
                           str(out)], capture_output=True, text=True, timeout=timeout, env=env)
    assert done.returncode == 0 and out.exists(), f"{script} failed ({done.returncode}):\n{done.stdout[-3000:]}\n" \
                                                  f"{done.stderr[-3000:]}"
    report = json.loads(out.read_text())
    assert report["size"] == ranks
    return report


def assert_run_equals_one_process(report: dict, run: str, steps: int = 20) -> None:
    """A training job's run `run` raised nothing on any rank and its per-step losses equal the job's
    one-process reference within 1e-5 relative."""
    failures = report["failures"][run]
    assert not failures, "\n".join(failures)
    reference, losses = report["losses"]["one_process"], report["losses"][run]
    assert len(losses) == len(reference) == steps
    for step, (got, want) in enumerate(zip(losses, reference)):
        assert got == pytest.approx(want, rel=1e-5), f"{run}: step {step}"
