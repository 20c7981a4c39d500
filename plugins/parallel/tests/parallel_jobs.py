"""What the MPI-job tests of plugins/parallel share (importable from these tests: conftest.py puts this folder on
sys.path): loading a job script of scripts/ as a module, to list its checks, and running it under
`python -m oarlock.cli launch -n N` to read the JSON report it writes (scripts/_checks.py writes it).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).parent / "scripts"


def load_job(name: str):
    """scripts/<name>.py as a module, loaded with scripts/ on sys.path, as when it runs as a script (the jobs
    import _checks, roundtrip_job imports hybrid_job)."""
    sys.path.insert(0, str(SCRIPTS))
    try:
        spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(SCRIPTS))
    return module


def launch_command(script: str, *args, ranks: int | None = 2) -> list:
    """The command running scripts/<script>.py with `args` under `oarlock launch -n ranks` (ranks None: as
    one plain process)."""
    launcher = [sys.executable] if ranks is None else [sys.executable, "-m", "oarlock.cli", "launch", "-n",
                                                      str(ranks)]
    return [*launcher, str(SCRIPTS / f"{script}.py"), *map(str, args)]


def job_outcome(command: list, out: Path, what: str, timeout: int = 300, collective_timeout: int = 60, cwd=None):
    """(the JSON the command wrote to `out`, None), or (None, why there is none) when it failed or wrote
    nothing. A collective that waits longer than `collective_timeout` seconds fails instead of hanging."""
    env = dict(os.environ, OARLOCK_COLLECTIVE_TIMEOUT=str(collective_timeout), PYTHONWARNINGS="ignore")
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    if done.returncode != 0 or not out.exists():
        return None, f"{what} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return json.loads(out.read_text()), None


def job_report(command: list, out: Path, what: str, timeout: int = 300, collective_timeout: int = 60, cwd=None):
    """The JSON the command wrote to `out`; the calling test fails with the job's output when it failed."""
    report, why = job_outcome(command, out, what, timeout, collective_timeout, cwd)
    assert why is None, why
    return report


def launch_report(script: str, out: Path, *args, ranks: int = 2, timeout: int = 300, collective_timeout: int = 60):
    """The report of scripts/<script>.py run on `ranks` ranks with (*args, out) as its arguments; asserts
    that it covers `ranks` ranks."""
    report = job_report(launch_command(script, *args, out, ranks=ranks), out, f"{ranks}-rank job {script}",
                        timeout, collective_timeout)
    assert report["size"] == ranks
    return report


def report_fixture(script: str, ranks: list, timeout: int = 300, collective_timeout: int = 60):
    """A module-scoped fixture `report`: the report of scripts/<script>.py (launch_report, run once per module),
    parametrized over the world sizes `ranks`."""
    @pytest.fixture(scope="module", params=ranks, ids=[f"{n}ranks" for n in ranks])
    def report(request, tmp_path_factory):
        out = tmp_path_factory.mktemp(f"{script}_{request.param}") / "report.json"
        return launch_report(script, out, ranks=request.param, timeout=timeout, collective_timeout=collective_timeout)
    return report


def assert_check_passed(report: dict, check: str) -> None:
    """A check of the report failed on no rank (the failures of every rank are the message)."""
    failures = report["failures"][check]
    assert not failures, "\n".join(failures)


# -- examples/hybrid_gpt.py, the GPT of the hybrid- and pipeline-parallel equal-loss tests ------------------

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "hybrid_gpt.py"
EXAMPLE_ENV = dict(os.environ, OARLOCK_COLLECTIVE_TIMEOUT="60", PYTHONWARNINGS="ignore")
# the tiny GPT of issues 17 and 19: vocab 64, width 32, 2 layers, 4 heads, seq 16, global batch 8; 20 steps
GPT_MODEL = ["--vocab", "64", "--width", "32", "--layers", "2", "--heads", "4", "--seq-len", "16", "--batch", "8"]
GPT_TRAIN = ["--steps", "20", "--seed", "0", "--lr", "0.01", "--weight-decay", "0.01", "--clip-norm", "1.0"]


def run_example(command: list, cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    """The finished command (a run of the example); the calling test fails with its output when it failed."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=EXAMPLE_ENV, cwd=cwd)
    assert done.returncode == 0, f"{' '.join(map(str, command))} failed ({done.returncode}):\n" \
                                 f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def save_gpt_init(workdir: Path) -> Path:
    """The example GPT's full initial weights (seed 0), written to workdir/init.pdparams."""
    path = workdir / "init.pdparams"
    run_example([sys.executable, str(EXAMPLE), *GPT_MODEL, "--seed", "0", "--save-init", str(path)], workdir)
    return path


def train_gpt(ranks: int, flags: list, init: Path, out: Path) -> dict:
    """The JSON report (per-step losses, ...) of the example GPT trained from `init` with `flags` on `ranks`
    ranks (1: one plain process)."""
    arguments = [str(EXAMPLE), *GPT_MODEL, *GPT_TRAIN, *flags, "--init", str(init), "--json", str(out)]
    launcher = [sys.executable, "-m", "oarlock.cli", "launch", "-n", str(ranks)] if ranks > 1 else [sys.executable]
    run_example(launcher + arguments, out.parent)
    return json.loads(out.read_text())
