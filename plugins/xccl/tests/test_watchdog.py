"""The collective watchdog in real jobs: a rank that skips a collective (or a send) makes the
others fail with an error naming the collective, the group and the missing ranks, within the
timeout, and `oarlock launch` then stops the whole job."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("mpi4py")

JOB = Path(__file__).parent / "scripts" / "watchdog_job.py"
TIMEOUT_S = 2


def _launch(size: int, skipper: int, mode: str, *options: str):
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "oarlock.cli", "launch", "-n", str(size), "--timeout", str(TIMEOUT_S),
                           *options, str(JOB), str(skipper), mode], capture_output=True, text=True, timeout=120)
    return done, time.monotonic() - start


@pytest.mark.parametrize("size,skipper", [(2, 1), (4, 2)])
def test_skipped_collective_fails_the_others_within_the_timeout(size, skipper):
    done, wall = _launch(size, skipper, "sleep")
    assert done.returncode != 0
    reports = re.findall(r"\[rank (\d+)\] WATCHDOG after ([\d.]+): (.*)", done.stdout)
    assert reports, done.stdout + done.stderr
    rank, waited, message = reports[0]
    assert int(rank) != skipper
    assert TIMEOUT_S <= float(waited) < TIMEOUT_S + 4      # the timeout, plus the watchdog's questions
    assert "all_reduce()" in message and "group 0" in message and "collective #2" in message
    assert f"ranks that have not arrived: [{skipper}]" in message
    assert f"rank {skipper} has entered 1 collective(s) on this group and is not in a collective" in message
    assert wall < 40, "the job must stop well before the skipping rank's 60 s sleep ends"
    assert "CollectiveTimeoutError" in done.stderr      # the launcher's summary names the failure


def test_unmatched_recv_names_its_peer():
    done, _ = _launch(2, 1, "p2p")
    assert done.returncode != 0
    message = re.search(r"\[rank 0\] WATCHDOG after [\d.]+: (.*)", done.stdout).group(1)
    assert "recv() timed out" in message and "its peer(s) [1] have not matched it" in message


def test_debug_mode_names_ranks_that_pass_different_shapes():
    """Rank 2 all_reduces a [1, 3] tensor where the others pass [3]: same dtype and element count,
    so the default agreement check lets it through (MPI would too); `oarlock launch --debug`
    (OARLOCK_DISTRIBUTED_DEBUG=1) also compares shapes and fails every rank at once."""
    done, wall = _launch(4, 2, "reshape", "--debug")
    assert done.returncode != 0
    message = re.search(r"\[rank \d\] WATCHDOG after [\d.]+: (.*)", done.stdout).group(1)
    assert "disagree on collective #2 (OARLOCK_DISTRIBUTED_DEBUG check)" in message
    assert "rank 2: all_reduce, float32, SUM, [1, 3]" in message and "rank 0: all_reduce, float32, SUM, [3]" in message
    assert wall < 40
