"""Elastic restarts: real `oarlock launch --max-restarts` jobs (scripts/elastic_job.py) in which one rank
SIGKILLs itself at a random step, compared with the same training run uninterrupted.

- 2 ranks, the killed rank's directory deleted before it dies: the job finishes after one restart, the
  lost files are rebuilt from the replica its buddy holds in memory (checksums verified), and every
  step's loss and the final parameters are bit-identical to the uninterrupted run (dropout on: the ranks'
  generator states must be restored too).
- 2 ranks, the killed rank's directory kept (restored from the ranks' own directories): bit-identical.
- 4 ranks, rank 3 killed with its directory, --min-nproc 2: the job restarts on 2 ranks, the 4-rank
  checkpoint is rebuilt and re-sharded, and every loss equals the uninterrupted 4-rank run's within 1e-5
  (no dropout: the 2-rank run computes the same means over the same global batches, rounded differently).
- 4 ranks, bit-identical like the 2-rank case.
The two cases that only repeat what the others show (directory kept; 4 ranks bit-identical) run only with
OARLOCK_RESILIENCE_LONG=1, for the suite's time budget.
The replica store of each job is a private folder under /dev/shm (OARLOCK_REPLICA_DIR), removed afterwards.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mpi4py")

JOB = Path(__file__).parent / "scripts" / "elastic_job.py"
STEPS, EVERY = 12, 3


def run_job(tmp: Path, name: str, ranks: int, *args, launch_args=()) -> dict:
    """Run elastic_job.py under `oarlock launch -n ranks`; returns its report, losses ({step: (loss, world)},
    the last run of each step), final parameters and the launcher's stderr. Fails the test when it fails."""
    ckpt, out = tmp / f"{name}_ckpt", tmp / name
    shm = Path("/dev/shm" if os.path.isdir("/dev/shm") else tmp) / f"oarlock-test-{uuid.uuid4().hex}"
    env = dict(os.environ, OARLOCK_REPLICA_DIR=str(shm), OARLOCK_COLLECTIVE_TIMEOUT="60", PYTHONWARNINGS="ignore")
    command = [sys.executable, "-m", "oarlock.cli", "launch", "-n", str(ranks), "--grace", "1", *launch_args,
               str(JOB), "--ckpt", str(ckpt), "--out", str(out), "--steps", str(STEPS), "--every", str(EVERY),
               *map(str, args)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=240, env=env)
    finally:
        leftover = shm.exists() and any(shm.iterdir())
        shutil.rmtree(shm, ignore_errors=True)
    assert done.returncode == 0, f"{name} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert not leftover, f"{name}: the job left replicas in {shm}"
    losses = {}
    for line in (out / "losses.jsonl").read_text().splitlines():
        row = json.loads(line)
        losses[row["step"]] = (row["loss"], row["world"])
    final = np.load(out / "final.npz")
    return {"report": json.loads((out / "report.json").read_text()), "losses": losses,
            "params": [final[key] for key in sorted(final.files, key=lambda k: int(k.split("_")[1]))],
            "stderr": done.stderr, "ckpt": ckpt}


def kill_step(rng=random.Random()) -> int:
    """A random step after the second checkpoint (steps 2 and 5): the buddies hold a replica by then."""
    return rng.randint(EVERY + 3, STEPS - 2)


@pytest.fixture(scope="module")
def reference2(tmp_path_factory):
    return run_job(tmp_path_factory.mktemp("ref2"), "ref", 2)


def assert_bit_identical(run: dict, reference: dict) -> None:
    assert sorted(run["losses"]) == list(range(STEPS))
    for step in range(STEPS):
        assert run["losses"][step] == reference["losses"][step], f"step {step}"
    assert len(run["params"]) == len(reference["params"])
    for got, want in zip(run["params"], reference["params"]):
        assert got.dtype == want.dtype and np.array_equal(got, want)


LONG = pytest.mark.skipif(not os.environ.get("OARLOCK_RESILIENCE_LONG"), reason="set OARLOCK_RESILIENCE_LONG=1: left "
                          "out of the suite for its time budget (the lost-directory case below kills a rank too)")


@LONG
def test_sigkill_resume_bit_identical_2_ranks(reference2, tmp_path):
    step = kill_step()
    run = run_job(tmp_path, "killed", 2, "--kill-step", step, "--kill-rank", 1, launch_args=["--max-restarts", "2"])
    assert "rank 1 was killed by SIGKILL" in run["stderr"]
    assert "restarting the job on 2 rank(s) (restart 1 of 2" in run["stderr"]
    report = run["report"]
    assert report["restart"] == 1 and report["world"] == 2
    # the latest checkpoint at or before the killed step, read from the ranks' own directories
    assert report["resumed_at"] == max(s for s in range(EVERY - 1, STEPS, EVERY) if s <= step)
    assert report["restore"]["rebuilt"] == []
    assert_bit_identical(run, reference2)


def test_lost_directory_rebuilt_from_buddy_replica(reference2, tmp_path):
    step = kill_step()
    run = run_job(tmp_path, "lost", 2, "--kill-step", step, "--kill-rank", 1, "--delete-dir",
                  launch_args=["--max-restarts", "2"])
    report = run["report"]
    assert report["restart"] == 1
    rebuilt = report["restore"]["rebuilt"]
    assert {Path(target).name for target, _, _ in rebuilt} == {f"1_{report['resumed_at']}.safetensors",
                                                                f"1_{report['resumed_at']}.rng.json"}
    assert all(kind == "replica in memory" and "/held-by-0/rank1/" in source for _, kind, source in rebuilt)
    assert_bit_identical(run, reference2)


def test_restart_on_fewer_ranks_reshards(tmp_path):
    reference = run_job(tmp_path, "ref4", 4, "--dropout", 0)
    run = run_job(tmp_path, "shrunk", 4, "--dropout", 0, "--kill-step", kill_step(), "--kill-rank", 3, "--delete-dir",
                  launch_args=["--max-restarts", "2", "--min-nproc", "2"])
    assert "restarting the job on 2 rank(s)" in run["stderr"]
    report = run["report"]
    assert report["world"] == 2 and report["restore"]["saved_world_size"] == 4
    rebuilt = report["restore"]["rebuilt"]
    assert any("/rank3/3_" in target and kind == "replica in memory" for target, kind, _ in rebuilt)
    resumed = report["resumed_at"]
    assert {world for step, (_, world) in run["losses"].items() if step > resumed} == {2}
    for step in range(STEPS):
        assert abs(run["losses"][step][0] - reference["losses"][step][0]) <= 1e-5, f"step {step}"
    for got, want in zip(run["params"], reference["params"]):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


@LONG
def test_sigkill_resume_bit_identical_4_ranks(tmp_path):
    reference = run_job(tmp_path, "ref4", 4)
    run = run_job(tmp_path, "killed4", 4, "--kill-step", kill_step(), "--kill-rank", 2, "--delete-dir",
                  launch_args=["--max-restarts", "2"])
    assert run["report"]["restart"] == 1 and run["report"]["world"] == 4
    assert_bit_identical(run, reference)
