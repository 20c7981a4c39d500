"""What the MPI job scripts of these tests share: the registry of their checks, the comparisons a check
records its failures with, and the loop that runs every check on every rank and reports to rank 0.

A check is a function that appends a line to `failures` for each thing that went wrong; an exception it raises
is recorded as a failure too, so one broken check never hides the others. Results travel to rank 0 through
raw mpi4py (not through the code under test), which writes {"size": ranks, ...extra, "failures": {check:
[failures of every rank, each tagged with its rank]}} as JSON for the pytest side (tests/parallel_jobs.py).

Job scripts are run by path, so this folder is sys.path[0] and `import _checks` finds this module; the tests
load the scripts with this folder on sys.path (parallel_jobs.load_job).
"""

from __future__ import annotations

import json
import traceback

import numpy as np
from mpi4py import MPI

import oarlock


def registry() -> tuple:
    """A fresh {name: check} dict, in definition order, and the decorator that registers a check in it."""
    checks: dict = {}

    def check(fn):
        checks[fn.__name__] = fn
        return fn
    return checks, check


def _array(value) -> np.ndarray:
    return value.numpy() if isinstance(value, oarlock.Tensor) else np.asarray(value)


def close(failures: list, what: str, got, want, rtol: float, atol: float) -> None:
    """Records a failure unless `got` and `want` (Tensors, arrays, lists or numbers) have the same shape and
    agree within rtol / atol. Each job binds its own tolerances (functools.partial)."""
    got, want = _array(got), _array(want)
    if got.shape != want.shape:
        failures.append(f"{what}: shape {got.shape} != {want.shape}")
    elif not np.allclose(got, want, rtol=rtol, atol=atol):
        failures.append(f"{what}: got {got.ravel()[:6]}, want {want.ravel()[:6]} (max abs diff "
                        f"{np.abs(got - want).max():.3g})")


def leaf(array, dtype=None):
    """A Tensor that records its gradient (`dtype`: the array is cast to it first)."""
    t = oarlock.to_tensor(np.asarray(array, dtype=dtype) if dtype is not None else array)
    t.stop_gradient = False
    return t


def mean_over_ranks(value) -> float:
    """The mean of a number over the ranks of the job, through raw MPI (not the code under test)."""
    return MPI.COMM_WORLD.allreduce(float(value)) / MPI.COMM_WORLD.size


def expect_error(failures: list, what: str, kind, parts, make) -> None:
    """Records a failure unless make() raises `kind` (an exception class or a tuple of them) whose message
    holds every one of `parts` (a str or a list of them)."""
    parts = [parts] if isinstance(parts, str) else list(parts)
    kinds = kind if isinstance(kind, tuple) else (kind,)
    try:
        make()
    except kinds as error:
        missing = [part for part in parts if part not in str(error)]
        if missing:
            failures.append(f"{what}: message lacks {missing}: {error}")
    except Exception as error:       # noqa: BLE001 - any other kind is the failure reported
        failures.append(f"{what}: {type(error).__name__} instead of "
                        f"{' or '.join(k.__name__ for k in kinds)}: {error}")
    else:
        failures.append(f"{what}: no error")


def run_one(fn, *args) -> list:
    """The failures of one check, fn(*args, failures); what it raises is one of them."""
    failures: list = []
    try:
        fn(*args, failures)
    except Exception:
        failures.append(traceback.format_exc())
    return failures


def write_report(out: str, names, failures: dict, **extra) -> None:
    """Gathers every rank's {check: failures} on rank 0 (a check missing from `failures` was not run, which
    fails it) and writes the JSON report there; `extra` goes into the report as it is."""
    comm = MPI.COMM_WORLD
    tagged = {name: [f"rank {comm.rank}: {f}" for f in failures.get(name, ["not run"])] for name in names}
    gathered = comm.gather(tagged, root=0)
    if comm.rank == 0:
        merged = {name: sum((r[name] for r in gathered), []) for name in names}
        with open(out, "w") as f:
            json.dump({"size": comm.size, **extra, "failures": merged}, f)


def run_checks(checks: dict, out: str, *args, setup_error: str | None = None, **extra) -> None:
    """Runs every check as fn(*args, failures) on this rank and writes the report (write_report). With
    `setup_error` (the traceback of a setup every check needs) each check fails with it instead."""
    if setup_error is not None:
        failures = {name: [f"the job's setup failed, the check did not run:\n{setup_error}"] for name in checks}
    else:
        failures = {name: run_one(fn, *args) for name, fn in checks.items()}
    write_report(out, checks, failures, **extra)
