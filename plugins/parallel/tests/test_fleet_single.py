"""One process: fleet.init(True) is refused (role_maker comes first), distributed_model/optimizer return
their arguments, and a third-party strategy registered through oarlock_register_parallel_strategies
becomes a hybrid_configs key, an order entry, a topology axis and a line of `oarlock plugins`.
Run in a fresh interpreter (scripts/single_job.py): it starts MPI and registers a plugin."""

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mpi4py")


def test_single_process_fleet_and_third_party_strategy():
    job = Path(__file__).parent / "scripts" / "single_job.py"
    done = subprocess.run([sys.executable, str(job)], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0 and "single-process fleet OK" in done.stdout, done.stdout + done.stderr[-3000:]


def test_plugins_command_lists_the_strategies():
    done = subprocess.run([sys.executable, "-m", "oarlock.cli", "plugins"], capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stderr
    for name in ("data", "tensor", "pipeline", "sharding", "sep"):
        assert f"parallel strategy: {name}: " in done.stdout, done.stdout
