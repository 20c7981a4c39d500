"""Model on 2 ranks (scripts/data_parallel_job.py under `oarlock launch -n 2`): fit trains through DataParallel
exactly as a one-process replica trains on the global batches, evaluate gathers the ranks' outputs and counts
each of the 25 samples once (the sampler's padding cut), and only rank 0 prints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parent / "scripts" / "data_parallel_job.py"


def test_two_ranks_train_like_one_process_on_the_global_batch(tmp_path):
    command = [sys.executable, "-m", "oarlock.cli", "launch", "-n", "2", str(SCRIPT), str(tmp_path)]
    env = dict(os.environ, OARLOCK_COLLECTIVE_TIMEOUT="60", PYTHONWARNINGS="ignore")
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for report in reports:
        assert report["world"] == 2
        assert report["max_param_diff"] <= 1e-6
        assert report["eval_acc"] == report["replica_acc"]
    assert "Eval samples: 25" in reports[0]["printed"] and "Epoch 2/2" in reports[0]["printed"]
    assert "step 4/4 - loss:" in reports[0]["printed"]
    assert reports[1]["printed"] == ""   # only local rank 0 logs
