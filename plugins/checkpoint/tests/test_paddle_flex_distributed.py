"""Paddle 3.2's FlexCheckpoint between real multi-rank jobs of both frameworks, bit for bit:

- Paddle saves on 2 ranks (`python -m paddle.distributed.launch`, gloo on CPU) with its tensors split
  by rows; oarlock loads on 2 ranks split by columns (`oarlock launch`, MPI) and on 1 rank whole;
- oarlock saves on 2 ranks by rows with format="paddle"; Paddle loads on 2 ranks by columns (dist
  tensors) and on 1 rank whole, with its own load_state_dict.

The tensors (float32, float64, bfloat16 with NaN payloads, an int64 scalar) and layouts are in
paddle_flex_data.py; each rank of each job compares its boxes with them and writes a report.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mpi4py")
pytest.importorskip("paddle")

SCRIPTS = Path(__file__).parent / "scripts"
PADDLE_JOB, OARLOCK_JOB = SCRIPTS / "paddle_flex_job.py", SCRIPTS / "oarlock_paddle_flex_job.py"


def _command(framework: str, ranks: int, args: list, log_dir: Path) -> list:
    job = PADDLE_JOB if framework == "paddle" else OARLOCK_JOB
    if ranks == 1:
        return [sys.executable, str(job), *args]
    if framework == "paddle":
        return [sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", str(ranks), "--log_dir",
                str(log_dir), str(job), *args]
    return [sys.executable, "-m", "oarlock.cli", "launch", "-n", str(ranks), str(job), *args]


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """job(framework, ranks, phase, checkpoint, layout) -> the rank reports (load) or the checkpoint dir."""
    root = tmp_path_factory.mktemp("paddle-flex")
    env = dict(os.environ, OARLOCK_COLLECTIVE_TIMEOUT="120", PYTHONWARNINGS="ignore")

    def run(framework: str, ranks: int, phase: str, checkpoint: str, layout: str):
        name = f"{framework}-{phase}-{checkpoint}-{layout}-{ranks}"
        report = root / name
        args = [phase, str(root / checkpoint), layout] + ([str(report)] if phase == "load" else [])
        done = subprocess.run(_command(framework, ranks, args, root / f"{name}-logs"), capture_output=True,
                              text=True, timeout=300, env=env)
        logs = "".join(p.read_text(errors="replace")[-2000:] for p in (root / f"{name}-logs").glob("workerlog.*"))
        assert done.returncode == 0, f"{name} exited {done.returncode}:\n{done.stderr[-3000:]}\n{logs}"
        if phase == "save":
            return root / checkpoint
        return [json.loads(Path(f"{report}.{rank}.json").read_text()) for rank in range(ranks)]

    return run


@pytest.fixture(scope="module")
def paddle_saved(job):
    return job("paddle", 2, "save", "by-paddle", "rows")


@pytest.fixture(scope="module")
def oarlock_saved(job):
    return job("oarlock", 2, "save", "by-oarlock", "rows")


def _errors(reports) -> list:
    return [e for r in reports for e in r["errors"]]


@pytest.mark.parametrize("ranks, layout", [(2, "cols"), (1, "whole")])
def test_oarlock_loads_what_paddle_saved_on_two_ranks(job, paddle_saved, ranks, layout):
    assert sorted(p.name for p in paddle_saved.iterdir()) == ["0.metadata", "0_0.distcp", "1_0.distcp"]
    assert not _errors(job("oarlock", ranks, "load", "by-paddle", layout))


@pytest.mark.parametrize("ranks, layout", [(2, "cols"), (1, "whole")])
def test_paddle_loads_what_oarlock_saved_on_two_ranks(job, oarlock_saved, ranks, layout):
    assert not _errors(job("paddle", ranks, "load", "by-oarlock", layout))


def test_both_frameworks_describe_the_same_boxes(paddle_saved, oarlock_saved):
    """The same tensors, boxes and dtypes in both metadata files; each box stored once (Paddle keeps a
    replicated box in rank 0's file, oarlock in the file of the rank with fewer bytes so far)."""
    def boxes(directory):
        with open(directory / "0.metadata", "rb") as f:
            meta = pickle.load(f)   # real Paddle's classes: both files name them
        described = {key: sorted((tuple(e.global_offset), tuple(e.local_shape), e.dtype, tuple(e.global_shape))
                                 for e in entries) for key, entries in meta.state_dict_metadata.items()}
        stored = sorted((index.tensor_key, tuple(index.global_offset)) for index in meta.storage_metadata)
        return described, stored, sorted(set(meta.storage_metadata.values()))

    assert boxes(paddle_saved) == boxes(oarlock_saved)
    assert boxes(oarlock_saved)[2] == ["0_0.distcp", "1_0.distcp"]
