"""A rank killed (SIGKILL, no cleanup) in the middle of a save: the earlier checkpoint still loads,
the interrupted one is rejected with a clear error, and the next save neither trips over nor
reuses its remains. The kill is real: the test watches the checkpoint directory and kills the
writing process (for an async save, the rank and its forked writer) as soon as the second save's
first file appears."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import oarlock
import oarlock.distributed as dist

JOB = Path(__file__).parent / "scripts" / "flex_crash_job.py"


def _with_children(pid: int) -> list:
    """pid and its descendants (Linux /proc)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return [pid]
    return [pid] + [p for child in children for p in _with_children(int(child))]


def _kill_during_second_save(tmp_path, ranks: int, flags: list, victim: int) -> Path:
    """Run the job, SIGKILL rank `victim` once a file of checkpoint 1 shows up; returns the directory."""
    directory, pids = tmp_path / "ckpt", tmp_path / "pid"
    if ranks == 1:
        command = [sys.executable, str(JOB)]
    else:
        mpiexec = shutil.which("mpiexec") or str(Path(sys.executable).parent / "mpiexec")
        command = [mpiexec, "-n", str(ranks), sys.executable, str(JOB)]
    job = subprocess.Popen([*command, str(directory), str(pids), "192", *flags], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env=dict(os.environ, OARLOCK_COLLECTIVE_TIMEOUT="60"))
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            started = directory.exists() and any(name.split(".")[0].endswith("_1") for name in os.listdir(directory))
            if started and Path(f"{pids}.{victim}").exists():
                for pid in _with_children(int(Path(f"{pids}.{victim}").read_text())):
                    os.kill(pid, signal.SIGKILL)   # an async save writes in a forked child: kill it too
                break
            assert job.poll() is None, f"the job ended before the second save started: {job.communicate()}"
            time.sleep(0.0005)
        else:
            pytest.fail("the second save never started")
        out, err = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
    assert "second save finished" not in out, "the kill came too late: the save had finished"
    assert job.returncode != 0
    assert not (directory / "1.metadata").exists()
    return directory


@pytest.mark.parametrize("ranks, flags, victim, mode", [(1, [], 0, "cow"), (1, ["--async"], 0, "cow"),
                                                      (1, ["--async"], 0, "copy"), (1, ["--async"], 0, "fork"),
                                                      (2, [], 1, "cow")],
                         ids=["one_process", "one_process_async", "one_process_async_copy", "one_process_async_fork",
                              "rank1_of_2"])
def test_a_killed_save_leaves_the_previous_checkpoint_loadable(tmp_path, monkeypatch, ranks, flags, victim, mode):
    monkeypatch.setenv("OARLOCK_ASYNC_SAVE", mode)
    if ranks > 1:
        pytest.importorskip("mpi4py")
    directory = _kill_during_second_save(tmp_path, ranks, flags, victim)
    with pytest.raises(ValueError, match=r"checkpoint 1 in .* is incomplete: its save did not finish \(found "
                                         r".*_1\.safetensors.* but no 1\.metadata\); load an earlier one: complete "
                                         r"ids are \[0\]"):
        dist.load_state_dict({"big": oarlock.zeros([192 << 18])}, directory, unique_id=1)
    target = oarlock.zeros([8 * ranks])
    with pytest.warns(UserWarning, match=r"newer checkpoint\(s\) \[1\] are incomplete"):
        dist.load_state_dict({"w": target}, directory)
    np.testing.assert_array_equal(target.numpy(), np.repeat(np.arange(1.0, ranks + 1), 8))
    # saving again works: a new id, then the broken id reused (its remains are cleared first)
    dist.save_state_dict({"w": oarlock.full([8 * ranks], 3.0)}, directory)
    assert (directory / "2.metadata").exists()
    dist.save_state_dict({"w": oarlock.full([8 * ranks], 4.0)}, directory, unique_id=1)
    dist.load_state_dict({"w": target}, directory, unique_id=1)
    assert set(target.numpy().tolist()) == {4.0}
    assert sorted(p.name for p in directory.iterdir() if p.name.split(".")[0].endswith("1")) == \
        ["0_1.safetensors", "1.metadata"]
