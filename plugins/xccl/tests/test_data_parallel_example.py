"""examples/data_parallel.py under `oarlock launch`: N ranks averaging gradients with all_reduce take
the same steps as one process on the whole batch (its --check compares the parameters)."""

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mpi4py")

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "data_parallel.py"


@pytest.mark.parametrize("ranks", [2, 4])
def test_data_parallel_matches_one_process(ranks):
    done = subprocess.run([sys.executable, "-m", "oarlock.cli", "launch", "-n", str(ranks), str(EXAMPLE), "--check",
                           "--steps", "60", "--tolerance", "1e-5"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"[rank 0] {ranks}-rank data parallel matches one process" in done.stdout
