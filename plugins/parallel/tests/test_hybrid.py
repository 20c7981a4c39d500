"""Hybrid parallelism through fleet (TensorParallel, HybridParallelOptimizer, rank-aware global-norm
clipping): real MPI jobs under `oarlock launch` run tests/scripts/hybrid_job.py with dp2 x mp2 on 4 ranks
and mp2 on 2 ranks; every check there compares with one process training the plain model on the full
weights (losses, the clip's global norm, the weights after 5 AdamW steps). One pytest test per check and
mode reports the failures of every rank. The wrappers' errors without a world run in-process.
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

JOB = Path(__file__).parent / "scripts" / "hybrid_job.py"
_spec = importlib.util.spec_from_file_location("hybrid_job", JOB)
job = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(job)

RANKS = {"dp2mp2": 4, "mp2": 2}


def _launch(mode: str, out: Path) -> dict:
    env = dict(os.environ, OARLOCK_COLLECTIVE_TIMEOUT="60", PYTHONWARNINGS="ignore")
    done = subprocess.run([sys.executable, "-m", "oarlock.cli", "launch", "-n", str(RANKS[mode]), str(JOB), mode,
                           str(out)], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0 and out.exists(), (
        f"{mode} job failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    return {}, tmp_path_factory.mktemp("hybrid")


@pytest.mark.parametrize("check", list(job.CHECKS))
@pytest.mark.parametrize("mode", list(RANKS))
def test_hybrid(reports, mode, check):
    done, folder = reports
    if mode not in done:   # one job per mode, shared by its checks
        done[mode] = _launch(mode, folder / f"{mode}.json")
    report = done[mode]
    assert report["size"] == RANKS[mode] and report["mode"] == mode
    failures = report["failures"][check]
    assert not failures, "\n".join(failures)


class FakeHcg:
    def get_model_parallel_group(self):
        raise AssertionError("not reached: the arguments are checked first")


def test_wrappers_reject_bad_arguments():
    from oarlock.distributed.fleet.meta_optimizers.dygraph_optimizer.hybrid_parallel_optimizer import (
        HybridParallelOptimizer)
    from oarlock.distributed.fleet.meta_parallel import TensorParallel
    import oarlock
    model = oarlock.nn.Linear(2, 2)
    with pytest.raises(TypeError, match=r"TensorParallel\(\): hcg must be a HybridCommunicateGroup .* got str"):
        TensorParallel(model, "hcg")
    with pytest.raises(TypeError, match=r"TensorParallel\(\): unexpected keyword argument\(s\) \['foo'\]"):
        TensorParallel(model, FakeHcg(), foo=1)
    opt = oarlock.optimizer.SGD(learning_rate=0.1, parameters=model.parameters())
    with pytest.raises(TypeError, match=r"HybridParallelOptimizer\(\): hcg must be a HybridCommunicateGroup"):
        HybridParallelOptimizer(opt, None, None)
