"""`oarlock launch --max-restarts K [--min-nproc M]`: one real 2-rank job (scripts/restart_job.py) whose first
run hangs in a collective, which the watchdog (--timeout) turns into a failure of rank 0: the launcher
restarts it with OARLOCK_RESTART_COUNT=1; that run raises on rank 1, and with --max-restarts 1 the
launcher gives up with the failed rank's exit code. (A restart that then succeeds, bit-identically, is
plugins/resilience's test_elastic.) The size of a restart on fewer ranks (restart_size) and the argument
checks need no job."""

import argparse
import os
import subprocess
import sys

import pytest

pytest.importorskip("mpi4py")

from oarlock_xccl import launch  # noqa: E402

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "restart_job.py")


def test_hang_restarted_then_gives_up():
    env = {k: v for k, v in os.environ.items() if k not in ("OARLOCK_LAUNCH_DIR", "OARLOCK_LAUNCHER",
                                                             launch.RESTART_ENV)}
    done = subprocess.run([sys.executable, "-m", "oarlock.cli", "launch", "-n", "2", "--timeout", "2", "--grace",
                           "1", "--max-restarts", "1", JOB], capture_output=True, text=True, timeout=120, env=env,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 1, done.stderr[-3000:]
    for restart in range(2):
        for rank in range(2):
            assert f"[rank {rank}] restart {restart} world 2" in done.stdout
    assert "restart 2 world" not in done.stdout
    first, _, second = done.stderr.partition("oarlock launch: restarting the job on 2 rank(s) (restart 1 of 1, "
                                             "OARLOCK_RESTART_COUNT=1)")
    assert second, done.stderr[-3000:]
    assert "rank 0 failed" in first and "CollectiveTimeoutError" in first, first[-2000:]
    assert "rank 1 failed (exit code 1): ValueError: boom on restart 1" in second, second[-2000:]
    assert "giving up after 1 restart(s)" in second


@pytest.mark.parametrize("nproc, current, failed, min_nproc, expected", [
    (4, 4, 1, None, 4),     # without --min-nproc the failed ranks' places are taken again
    (4, 4, 1, 2, 2),        # 3 left, rounded down to a divisor of 4
    (4, 4, 1, 3, None),     # 2 would be below --min-nproc
    (8, 8, 2, 1, 4),        # 6 left -> 4
    (6, 6, 1, 1, 3),        # 5 left -> 3
    (2, 2, 2, 1, None),     # nobody left
])
def test_restart_size(nproc, current, failed, min_nproc, expected):
    assert launch.restart_size(nproc, current, failed, min_nproc) == expected


@pytest.mark.parametrize("args, message", [
    (["-n", "2", "--max-restarts", "-1"], "--max-restarts must be a number of restarts >= 0, got -1"),
    (["-n", "2", "--min-nproc", "3"], "--min-nproc must be a number of ranks in [1, -n 2], got 3"),
    (["-n", "2", "--min-nproc", "0"], "--min-nproc must be a number of ranks in [1, -n 2], got 0"),
])
def test_bad_arguments(args, message, capsys):
    parser = argparse.ArgumentParser()
    launch.configure(parser)
    assert launch.run(parser.parse_args([*args, JOB])) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("args, expected", [
    ([], {"OARLOCK_SDC_CHECK": None, "OARLOCK_NNODES": None}),
    (["--sdc-check"], {"OARLOCK_SDC_CHECK": "1"}),
    (["--sdc-options", "interval=2,replay_interval=100"], {"OARLOCK_SDC_CHECK": "interval=2,replay_interval=100"}),
    (["--nnodes", "2", "--node-rank", "1", "--master", "10.0.0.1:29500"],
     {"OARLOCK_NNODES": "2", "OARLOCK_NODE_RANK": "1", "OARLOCK_MASTER": "10.0.0.1:29500",
      "OARLOCK_NPROC_PER_NODE": "2"}),
])
def test_rank_environment(args, expected, monkeypatch):
    """The switches reach every rank as variables; Paddle's and Slurm's rank variables do not (MPI names the rank)."""
    for name in ("PADDLE_TRAINER_ID", "PADDLE_TRAINERS_NUM", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS"):
        monkeypatch.setenv(name, "0")
    for name in ("OARLOCK_SDC_CHECK", "OARLOCK_NNODES"):
        monkeypatch.delenv(name, raising=False)
    parser = argparse.ArgumentParser()
    launch.configure(parser)
    env = launch._rank_environment(parser.parse_args(["-n", "2", *args, JOB]), "/tmp/launch-dir")
    for name, value in expected.items():
        assert env.get(name) == value, name
    assert not {"PADDLE_TRAINER_ID", "PADDLE_TRAINERS_NUM", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS"} & set(env)
