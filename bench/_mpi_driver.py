"""The driver half of the benchmarks that time N MPI ranks (allreduce.py, checkpoint.py): run without MPI,
such a script launches itself under mpiexec once per rank count, with RANK_MODE_ENV=1 so the copies know they
are ranks, and rank 0 hands its figures back as JSON in the file RESULT_ENV names."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

RANK_MODE_ENV = "OARLOCK_BENCH_RANK_MODE"     # set by the driver in the ranks it launches
RESULT_ENV = "OARLOCK_BENCH_RESULT"           # where rank 0 writes its figures as JSON (a driver's temp file)


def is_rank() -> bool:
    return os.environ.get(RANK_MODE_ENV) == "1"


def main(args, run_rank, drive) -> int:
    """A benchmark's entry point: run_rank(args) in a rank the driver launched, else drive(args)."""
    if is_rank():
        run_rank(args)
        return 0
    return drive(args)


def save_json(path, results: dict) -> None:
    """--json PATH: the driver's raw figures (nothing when no path was given)."""
    if path:
        with open(path, "w") as fh:
            json.dump(results, fh, indent=2)


def write_result(result: dict) -> None:
    """Rank 0: hand the figures to the driver (nothing when run by hand under mpiexec)."""
    path = os.environ.get(RESULT_ENV)
    if path:
        with open(path, "w") as fh:
            json.dump(result, fh)


def find_launcher(name: str, script: str) -> str | None:
    launcher = shutil.which(name)
    if launcher is None:
        print(f"{script}: {name!r} is not on PATH (pip install mpich gives MPICH's mpiexec)", file=sys.stderr)
    return launcher


def mpi_library() -> str:
    """The MPI library's version line, without initialising MPI in the driver."""
    import mpi4py
    mpi4py.rc.initialize = False
    from mpi4py import MPI
    return re.sub(r"\s+", " ", MPI.Get_library_version().strip().splitlines()[0].strip())


def run_ranks(launcher: str, nranks: int, script: str, arguments: list, timeout: float, env: dict | None = None):
    """Run `script arguments` as nranks ranks; returns rank 0's result, or None after printing why there is none.
    The ranks' stdout is printed; stderr (progress, errors) passes through."""
    with tempfile.TemporaryDirectory() as tmp:
        result_path = os.path.join(tmp, "result.json")
        env = dict(os.environ, **(env or {}), **{RANK_MODE_ENV: "1", RESULT_ENV: result_path})
        command = [launcher, "-n", str(nranks), sys.executable, os.path.abspath(script), *arguments]
        started = time.perf_counter()
        try:
            done = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            print(f"{nranks} ranks: no result within {timeout:g} s (mpiexec killed)", flush=True)
            return None
        if done.stdout.strip():
            print()
            print(done.stdout.rstrip())
        print(f"({nranks} rank{'s' if nranks > 1 else ''}: {time.perf_counter() - started:.0f} s including "
              "start-up)", file=sys.stderr, flush=True)
        if done.returncode != 0 or not os.path.exists(result_path):
            print(f"{nranks} ranks: mpiexec exited with status {done.returncode}", flush=True)
            return None
        with open(result_path) as fh:
            return json.load(fh)


def run_world_sizes(launcher: str, ranks: list, script: str, arguments: list, timeout: float,
                    env: dict | None = None) -> tuple[list, int]:
    """run_ranks for each world size in `ranks`: (rank 0's results of the runs that gave one, exit status 1
    if any gave none else 0)."""
    runs = [run_ranks(launcher, nranks, script, arguments, timeout, env) for nranks in ranks]
    return [run for run in runs if run is not None], int(any(run is None for run in runs))
