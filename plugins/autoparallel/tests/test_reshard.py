"""reshard on a real 4-rank MPI job (scripts/reshard_job.py, launched once): the whole matrix of placements
R / S0 / S1 / P (and the co-sharded [S0, S0]) on a 1-d and a 2-d mesh, even and uneven shapes, checked bit for
bit against numpy slices, with unshard_dtensor and gradients; the collective each transition uses; reshards
between meshes; bad input failing on every rank."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent / "scripts" / "reshard_job.py"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("reshard") / "report.json"
    env = dict(os.environ, OARLOCK_COLLECTIVE_TIMEOUT="60", PYTHONWARNINGS="ignore")
    done = subprocess.run([sys.executable, "-m", "oarlock.cli", "launch", "-n", "4", str(SCRIPT), str(out)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0 and out.exists(), \
        f"the 4-rank job failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    result = json.loads(out.read_text())
    assert result["size"] == 4
    return result


@pytest.mark.parametrize("check", ["matrix", "collectives", "other_reductions", "between_meshes",
                                   "bad_input"])
def test_reshard_job(report, check):
    failures = report["failures"][check]
    assert not failures, "\n".join(failures[:20])


def test_the_matrix_is_complete(report):
    # 1-d mesh: 4 x 4 placement pairs, 2-d mesh: 16 x 16, each on (8, 12) and (7, 5)
    assert report["counts"]["reshards"] == (16 + 256) * 2
