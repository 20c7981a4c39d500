"""`python -m oarlock_xccl.rank script.py [args...]`: what `oarlock launch` runs in every rank.

It runs the script as `__main__` like `python script.py` would, in a child
process of the one mpiexec started, which supervises it (oarlock_xccl.supervisor):
it records how the script's process ended, os._exit and signals included, ends
the same way, and ends the rank when its job is gone (mpiexec's proxy or the
launcher killed). Under the launcher (OARLOCK_LAUNCH_DIR set) it adds:

* fds 1 and 2 go to the launcher's FIFOs for this rank, first thing, so that
  everything the rank writes (C code and child processes included) reaches
  the launcher, which prefixes it with the rank;
* records for the launcher (see oarlock_xccl.failure): the supervisor's pid at
  start, "done" after a normal end, "failed" with the reason otherwise, and
  "exit" with the script process's wait status.

A script that raises or exits non-zero goes through failure.fail(), which
aborts the MPI job when mpi4py is running, so the other ranks do not wait
forever; this also holds under plain `mpiexec` without the launcher.
"""

from __future__ import annotations

import errno
import io
import os
import runpy
import sys
import time

from oarlock_xccl import failure, supervisor

USAGE = "usage: python -m oarlock_xccl.rank SCRIPT [ARGS ...]  (normally started by `oarlock launch`)"

_CONNECT_WAIT_S = 10.0   # how long to wait for the launcher to have the FIFO open for reading


def main(argv: list[str] | None = None) -> int:
    """Run the script `argv[0]` with the arguments `argv[1:]`; returns 0 or ends the process through fail()."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print(USAGE, file=sys.stderr)
        return 2
    directory = failure.launch_dir()
    if directory is not None:
        connect_output(directory, failure.launch_rank())
        _write_record(failure.PID, _identity())
    supervisor.fork()  # returns in the process that runs the script
    try:
        run_script(argv[0], argv[1:])
    except SystemExit as exc:
        if exc.code not in (0, None):
            failure.fail(exc)
    except BaseException as exc:  # KeyboardInterrupt included: the job must end either way
        failure.fail(exc.with_traceback(_script_frames(exc.__traceback__)))
    # Written before this process exits, so the launcher never sees a normally ended rank
    # gone without it; mpi4py's MPI_Finalize (atexit) follows when main() returns.
    _write_record(failure.DONE, {"rank": failure.launch_rank(), "pid": os.getpid()})
    return 0


def run_script(script: str, args: list[str]) -> None:
    """Run `script` as `__main__` with sys.argv and sys.path[0] as `python script [args]` sets them."""
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


def _script_frames(tb):
    """The traceback without its first frames in this wrapper and runpy: as `python script.py` shows it."""
    wrapper = (__file__, runpy.__file__, "<frozen runpy>")
    while tb is not None and tb.tb_frame.f_code.co_filename in wrapper:
        tb = tb.tb_next
    return tb


def connect_output(directory: str, rank: int) -> None:
    """Point fds 1 and 2 at this rank's FIFOs in the launch directory (kept as they are when that fails)."""
    for fd, kind, name in ((1, failure.OUT, "stdout"), (2, failure.ERR, "stderr")):
        path = failure.launch_file(directory, rank, kind)
        stream = getattr(sys, name)
        try:
            writer = _open_fifo(path)
        except OSError as exc:
            print(f"oarlock_xccl.rank: rank {rank} cannot connect its {name} to the launcher's FIFO {path}: {exc}; "
                  f"writing to the inherited {name}", file=sys.stderr)
            continue
        if stream is not None:
            stream.flush()
        os.dup2(writer, fd)
        os.close(writer)
        if isinstance(stream, io.TextIOWrapper) and not stream.line_buffering:
            stream.reconfigure(line_buffering=True)  # lines reach the launcher as they are written


def _open_fifo(path: str) -> int:
    """Open the FIFO for writing. Non-blocking, so a launcher that is gone cannot hang the rank; it
    normally has the read end open already, but gets _CONNECT_WAIT_S to get there (unless it died)."""
    deadline = time.monotonic() + _CONNECT_WAIT_S
    while True:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO or time.monotonic() >= deadline or supervisor.launcher_gone():
                raise
            time.sleep(0.01)
            continue
        os.set_blocking(fd, True)  # writes wait for the launcher to read, as on a terminal or a pipe
        return fd


def _identity() -> dict:
    """This process (the rank's supervisor) as the launcher should recognise it: pid, start time (against pid
    reuse), session."""
    from oarlock_xccl.processes import read_proc_stat
    stat = read_proc_stat(os.getpid())
    return {"rank": failure.launch_rank(), "pid": os.getpid(), "start": stat.start if stat else None,
            "sid": os.getsid(0)}


def _write_record(kind: str, payload: dict) -> None:
    try:
        failure.write_record(kind, payload)
    except OSError as exc:  # the launcher is gone or its directory unusable: the script itself may still run
        print(f"oarlock_xccl.rank: cannot write the {kind} record: {exc}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
