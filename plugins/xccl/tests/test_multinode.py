"""Multi-node launch on one machine: two `oarlock launch --nnodes 2 --node-rank R --master HOST:PORT -n 2`
launchers act as two nodes (two separate mpiexec jobs joined into one MPI world through node 0's
rendezvous and MPI_Comm_connect/accept).

- examples/hybrid_gpt.py (dp 2 x mp 2) on the two nodes gives every step's loss of one `-n 4` launcher.
- A rank failing on node 1 stops node 0's ranks too: both launchers end, naming global rank 3.
- The two processes Paddle's own `python -m paddle.distributed.launch --nproc_per_node 2` starts join
  into one world of 2 in init_parallel_env (each re-runs itself under `mpiexec -n 1`; rank 0 serves
  the rendezvous at PADDLE_MASTER). srun's variables are read the same way (unit cases; no Slurm here).
- A process started alone while PADDLE_TRAINER_ID / PADDLE_TRAINERS_NUM announce 2 ranks, with no
  rendezvous address, fails in init_parallel_env with a clear error instead of training alone.
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mpi4py")

from oarlock_xccl import launch  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
GPT = ROOT / "examples" / "hybrid_gpt.py"
FAIL = Path(__file__).parent / "scripts" / "multinode_fail.py"
LAUNCH = [sys.executable, "-m", "oarlock.cli", "launch"]
GPT_ARGS = ["--dp", "2", "--mp", "2", "--steps", "4", "--seed", "3"]


OTHER_LAUNCHERS = ("PADDLE_TRAINER_ID", "PADDLE_TRAINERS_NUM", "PADDLE_MASTER", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS",
                   "MASTER_ADDR", "MASTER_PORT")


def environment() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith(("OARLOCK_LAUNCH", "OARLOCK_NODE",
                                                                     "OARLOCK_NNODES", "OARLOCK_MASTER",
                                                                     "OARLOCK_REWIRED"))
            and k not in OTHER_LAUNCHERS}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def two_nodes(script, *args, timeout=180):
    """Run `script args` as two nodes of 2 ranks; returns the two launchers' CompletedProcess-like results."""
    master = f"127.0.0.1:{free_port()}"
    procs = [subprocess.Popen([*LAUNCH, "--nnodes", "2", "--node-rank", str(node), "--master", master, "-n", "2",
                               "--grace", "1", str(script), *map(str, args)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=environment(), cwd=ROOT)
             for node in (0, 1)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=timeout)
        results.append((proc.returncode, out, err))
    return results


def test_two_launchers_train_like_one(tmp_path):
    single = tmp_path / "single.json"
    done = subprocess.run([*LAUNCH, "-n", "4", str(GPT), *GPT_ARGS, "--json", str(single)], capture_output=True,
                          text=True, timeout=180, env=environment(), cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    split = tmp_path / "nodes.json"
    (rc0, out0, err0), (rc1, out1, err1) = two_nodes(GPT, *GPT_ARGS, "--json", split)
    assert rc0 == 0 and rc1 == 0, f"{err0[-2000:]}\n{err1[-2000:]}"
    assert json.loads(split.read_text())["layout"]["world"] == 4
    want, got = json.loads(single.read_text())["losses"], json.loads(split.read_text())["losses"]
    assert len(got) == 4 and got == want


def test_failure_on_one_node_stops_the_other():
    (rc0, out0, err0), (rc1, out1, err1) = two_nodes(FAIL, 3, timeout=60)
    # the prefixes and the joined world are global (the others may be ended by the failure before printing)
    assert "[rank 3] rank 3 of 4 sum 6" in out1
    assert rc1 == 1 and "rank 3 failed (exit code 1): ValueError: boom on rank 3" in err1, err1[-2000:]
    assert rc0 == 1 and "node 1: rank 3 failed (exit code 1): ValueError: boom on rank 3" in err0, err0[-2000:]


def test_processes_of_paddles_launcher_join(tmp_path):
    """Paddle 3.2's own launcher starts two processes (PADDLE_TRAINER_ID, PADDLE_TRAINERS_NUM, PADDLE_MASTER)."""
    pytest.importorskip("paddle")
    logs = tmp_path / "logs"
    done = subprocess.run([sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", "2", "--log_dir",
                           str(logs), str(FAIL), "-1"], capture_output=True, text=True, timeout=120,
                          env=environment(), cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for rank in range(2):
        assert f"rank {rank} of 2 sum 1" in (logs / f"workerlog.{rank}").read_text()


def test_alone_while_paddle_env_announces_two_ranks():
    env = dict(environment(), PADDLE_TRAINER_ID="1", PADDLE_TRAINERS_NUM="2")
    done = subprocess.run([sys.executable, "-c", "import oarlock.distributed as d; d.init_parallel_env()"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode != 0
    assert ("init_parallel_env(): the environment says this process is rank 1 of 2 (PADDLE_TRAINER_ID=1, "
            "PADDLE_TRAINERS_NUM=2), but MPI started it alone") in done.stderr


@pytest.mark.parametrize("args, message", [
    (["--nnodes", "2"], "--nnodes 2 needs --master HOST:PORT"),
    (["--nnodes", "2", "--node-rank", "2", "--master", "h:1"], "--node-rank in [0, --nnodes), got --nnodes 2 "
                                                                "--node-rank 2"),
    (["--nnodes", "2", "--master", "nohost"], "expected HOST:PORT (e.g. 10.0.0.1:29500), got 'nohost'"),
    (["--nnodes", "2", "--master", "h:1", "--max-restarts", "1"], "--max-restarts works on one node only"),
])
def test_bad_arguments(args, message, capsys):
    import argparse
    parser = argparse.ArgumentParser()
    launch.configure(parser)
    assert launch.run(parser.parse_args(["-n", "2", *args, str(FAIL)])) == 2
    assert message in capsys.readouterr().err


class _Alone:
    rank, size = 0, 1


@pytest.mark.parametrize("env, refused", [
    ({"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2"}, "(SLURM_PROCID=1, SLURM_STEP_NUM_TASKS=2)"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "4"}, None),            # a batch script's shell: one process is fine
    ({"PADDLE_TRAINER_ID": "0", "PADDLE_TRAINERS_NUM": "1"}, None),
])
def test_announced_world_of_other_launchers(env, refused, monkeypatch):
    """srun's and Paddle's rank variables, read in-process: a world of several refused for a process alone (no
    rendezvous address), a world of one (or a batch script's SLURM_NTASKS) accepted."""
    from oarlock_xccl import world
    for name in ("PADDLE_TRAINER_ID", "PADDLE_TRAINERS_NUM", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    if refused is None:
        world._check_announced(_Alone())
    else:
        with pytest.raises(RuntimeError, match="MPI started it alone") as info:
            world._check_announced(_Alone())
        assert refused in str(info.value)


@pytest.mark.parametrize("env, master", [
    ({"MASTER_ADDR": "10.0.0.2", "MASTER_PORT": "29500"}, "10.0.0.2:29500"),
    ({"PADDLE_MASTER": "10.0.0.3:6170", "MASTER_ADDR": "10.0.0.2", "MASTER_PORT": "29500"}, "10.0.0.3:6170"),
    ({"MASTER_ADDR": "10.0.0.2"}, None),
])
def test_rendezvous_address_from_the_environment(env, master, monkeypatch):
    from oarlock_xccl import nodes
    for name in ("OARLOCK_MASTER", "PADDLE_MASTER", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert nodes.announced_master() == master


def test_rank_and_world_before_init_count_every_node(monkeypatch):
    """Before init_parallel_env, get_rank()/get_world_size() of a rank of node 1 (2 ranks a node) are global,
    not its node launcher's local figures; outside --nnodes they are the launcher's."""
    import oarlock.distributed as dist
    from oarlock_xccl import groups

    monkeypatch.setattr(groups, "is_initialized", lambda: False)   # as before init, whatever ran in this process
    monkeypatch.setenv("PMI_RANK", "1")
    monkeypatch.setenv("PMI_SIZE", "2")
    assert (dist.get_rank(), dist.get_world_size()) == (1, 2)
    monkeypatch.setenv("OARLOCK_NNODES", "2")
    monkeypatch.setenv("OARLOCK_NODE_RANK", "1")
    monkeypatch.setenv("OARLOCK_NPROC_PER_NODE", "2")
    assert (dist.get_rank(), dist.get_world_size()) == (3, 4)
