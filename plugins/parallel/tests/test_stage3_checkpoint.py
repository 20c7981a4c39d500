"""Stage 3 ('p_g_os') FlexCheckpoints: GroupShardedStage3.sharded_state_dict gives each partitioned
parameter's piece as a flattened ShardedWeight (Paddle's is_flattened / flattened_range; an empty range
for a piece that is all padding), kept-whole parameters replicated, and the optimizer stage 3 hands back
gives its moments the same way. Real MPI jobs (scripts/stage3_checkpoint_job.py): 4 ranks train 3 steps
with AdamW and save; one plain process loads that bit for bit and its next 2 losses equal the
uninterrupted run's (rtol 1e-5); it saves, and a fresh p_g_os model on 4 ranks loads that in place bit
for bit (the full weights gathered from the pieces included) and its next loss equals the process's.
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

JOB = Path(__file__).parent / "scripts" / "stage3_checkpoint_job.py"
_spec = importlib.util.spec_from_file_location("stage3_checkpoint_job", JOB)
job = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(job)

ENV = dict(os.environ, OARLOCK_COLLECTIVE_TIMEOUT="60", PYTHONWARNINGS="ignore")
RANKS = {"save": 4, "single": 1, "load": 4}


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """{check: [failures]} of the three jobs, run in order (each loads what the one before saved)."""
    folder, failures = tmp_path_factory.mktemp("stage3_ckpt"), {}
    for mode, ranks in RANKS.items():
        out = folder / f"{mode}.json"
        command = [sys.executable, str(JOB), mode, str(folder), str(out)] if ranks == 1 else \
            [sys.executable, "-m", "oarlock.cli", "launch", "-n", str(ranks), str(JOB), mode, str(folder), str(out)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=ENV)
        if done.returncode != 0 or not out.exists():
            why = f"the {mode} job failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            failures.update({name: [why] for m in list(RANKS)[list(RANKS).index(mode):] for name in job.CHECKS[m]})
            break
        report = json.loads(out.read_text())
        assert report["size"] == ranks
        failures.update(report["failures"])
    return failures


@pytest.mark.parametrize("check", [name for mode in RANKS for name in job.CHECKS[mode]])
def test_stage3_checkpoint(reports, check):
    assert not reports[check], "\n".join(reports[check])
