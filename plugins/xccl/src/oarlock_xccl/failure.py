"""How a failing rank takes its job down and tells `oarlock launch` why.

Under `oarlock launch` every rank has the launcher's directory in
OARLOCK_LAUNCH_DIR. A rank writes small record files there, which the launcher
polls: `rank{r}.pid` when it starts, `rank{r}.done` when the script finished
normally, `rank{r}.failed` (JSON: rank, exit code, a one-line summary) when
it failed, and `rank{r}.exit` (the script process's wait status, written by the
rank's supervisor, see oarlock_xccl.supervisor) when the script's process has
ended, however it ended. Records are written under a temporary name and then
renamed, so the launcher never reads half a record.

`fail(exc)` is the one way a rank fails: the rank wrapper (oarlock_xccl.rank),
the collective watchdog and the excepthook installed by init_parallel_env all
call it. It must work without the launcher too (a job started with plain
mpiexec): there MPI_Abort is what stops the other ranks, which would otherwise
wait forever in their next collective.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import NoReturn

LAUNCH_DIR_ENV = "OARLOCK_LAUNCH_DIR"
LAUNCH_DIR_PREFIX = "oarlock-launch-"   # the launch directory's name starts with it (tempfile.mkdtemp's prefix)
LAUNCHER_ENV = "OARLOCK_LAUNCHER"       # "PID:START" of the `oarlock launch` process (see oarlock_xccl.supervisor)

# The rank as the MPI launcher announces it: MPICH's Hydra sets PMI_RANK, Open MPI the other two.
RANK_ENVS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")

# The files of rank r in the launch directory are rank{r}.{kind}: its records (PID, DONE, FAILED, EXIT)
# and the FIFOs its stdout and stderr go to (OUT, ERR).
PID, DONE, FAILED, EXIT, OUT, ERR = "pid", "done", "failed", "exit", "out", "err"

_SUMMARY_LIMIT = 300


def launch_rank() -> int:
    """The rank of this process as announced by the MPI launcher; 0 when none is announced."""
    for name in RANK_ENVS:
        value = os.environ.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return 0


def launch_dir() -> str | None:
    """The `oarlock launch` directory of this job, or None when the process was not started by it."""
    return os.environ.get(LAUNCH_DIR_ENV) or None


def file_name(rank: int, kind: str) -> str:
    """The name of the launch directory's file `kind` (PID, DONE, FAILED, EXIT, OUT or ERR) of `rank`."""
    return f"rank{rank}.{kind}"


def launch_file(directory: str, rank: int, kind: str) -> str:
    """The path of the file `kind` of `rank` in the launch directory `directory`."""
    return os.path.join(directory, file_name(rank, kind))


def write_record(kind: str, payload: dict, *, replace: bool = True) -> bool:
    """Write this rank's record `kind` as JSON into the launch directory, atomically.

    With replace=False an existing record is kept (the first failure is the cause; later
    ones are consequences). Returns whether a record was written; False without a launch
    directory. Raises OSError when the file system does.
    """
    directory = launch_dir()
    if directory is None:
        return False
    final = launch_file(directory, launch_rank(), kind)
    temporary = os.path.join(directory, f".{os.path.basename(final)}.{os.getpid()}.tmp")
    with open(temporary, "w") as fh:
        json.dump(payload, fh)
    try:
        if replace:
            os.replace(temporary, final)
            return True
        try:
            os.link(temporary, final)  # atomic and fails if the record exists: the first one wins
            return True
        except FileExistsError:
            return False
        except OSError:  # a file system without hard links: nearly as good
            if os.path.exists(final):
                return False
            os.replace(temporary, final)
            return True
    finally:
        if os.path.lexists(temporary):
            os.unlink(temporary)


def record_failure(code: int, summary: str) -> None:
    """Tell `oarlock launch` that this rank failed with exit code `code`; a no-op without the launcher.

    Never raises: it is called while a process is already going down. The record's time
    (time.monotonic(), one clock for all processes of the machine) orders failures of
    several ranks.
    """
    try:
        write_record(FAILED, {"rank": launch_rank(), "exit_code": int(code), "summary": str(summary),
                              "pid": os.getpid(), "time": time.monotonic()}, replace=False)
    except Exception:  # reporting must not replace the failure being reported
        pass


def summarize(exc: BaseException) -> str:
    """One line naming the exception, e.g. "ValueError: boom" or "SystemExit: 3"."""
    kind = type(exc)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    lines = str(exc).strip().splitlines()
    summary = f"{name}: {lines[0]}" if lines else name
    return summary if len(summary) <= _SUMMARY_LIMIT else summary[:_SUMMARY_LIMIT - 3] + "..."


def exit_code_of(exc: BaseException, code: int = 1) -> int:
    """The process exit status for `exc`: SystemExit's integer code (as the shell sees it), else `code`.

    Always non-zero: fail() is only called for failures.
    """
    if isinstance(exc, SystemExit) and isinstance(exc.code, int) and not isinstance(exc.code, bool):
        status = exc.code % 256  # what the shell would see, e.g. sys.exit(-1) -> 255
    else:
        status = code % 256
    return status or 1


def _print_failure(exc: BaseException) -> None:
    if isinstance(exc, SystemExit):
        # sys.exit(3) is a deliberate exit, not a crash: a traceback would only be noise.
        print(f"SystemExit: {exc.code}", file=sys.stderr)
    else:
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)


def _flush_standard_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed or broken stream must not stop the exit
            pass


def _mpi_abort(exit_code: int) -> None:
    """MPI_Abort the whole job when this process is a live MPI rank of a job with others in it.

    mpi4py is only used when the program already imported it: importing it here would
    initialize MPI in a process that never meant to use it.
    """
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None:
        return
    try:
        if mpi.Is_initialized() and not mpi.Is_finalized() and mpi.COMM_WORLD.Get_size() > 1:
            mpi.COMM_WORLD.Abort(exit_code)
    except Exception:  # fall back to os._exit; the launcher stops the others
        pass


def fail(exc: BaseException, code: int = 1) -> NoReturn:
    """Report `exc` as this rank's failure and end the process (and, through MPI_Abort, the job).

    Prints the traceback (for SystemExit just "SystemExit: <code>"), writes the failure
    record for `oarlock launch`, flushes the standard streams, then calls
    MPI_Abort when mpi4py is already initialized in a job of more than one rank, else
    os._exit. The exit status is SystemExit's integer code, else `code`.
    """
    exit_code = exit_code_of(exc, code)
    try:
        _print_failure(exc)
    except Exception:  # a broken stderr must not keep the rank alive
        pass
    record_failure(exit_code, summarize(exc))
    _flush_standard_streams()
    _mpi_abort(exit_code)
    os._exit(exit_code)
