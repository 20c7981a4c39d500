"""Launching the MPI job scripts of test_spmd_dist and test_auto_train (scripts/*.py) under `oarlock launch`."""

import json
import os
import subprocess
import sys
from pathlib import Path

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
