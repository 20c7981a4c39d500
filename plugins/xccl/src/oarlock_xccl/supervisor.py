"""The supervisor of a rank: how a rank's end becomes known, and why no rank outlives its job.

How a rank ended. `oarlock launch` names the cause of every rank's death, but a
process cannot report its own os._exit or a fatal signal, and the one process
that learns its wait status, its parent, is the MPI launcher's proxy (Hydra's
hydra_pmi_proxy): it reaps the rank and passes on only an aggregate exit code.
Reading a zombie's status in /proc would race with that reaping. So the rank
wrapper (oarlock_xccl.rank) forks once, before the script starts: the child
runs the script, and MPI too - it inherits the PMI fd and environment and is
the only MPI process of its rank, as under a shell wrapper - while the parent,
the process mpiexec started, becomes this supervisor. It waits for the child,
writes the child's wait status as the rank's EXIT record for the launcher, and
then ends the same way (the same exit code, or the same signal), so mpiexec
sees what it would have seen without it. A fork rather than a second
interpreter: no second start-up, and the copy-on-write image is of an
interpreter that has imported nothing heavy and runs no thread.

No orphans. Hydra runs every rank in a session of its own and is not told when
whoever started mpiexec dies, so after a SIGKILL of `oarlock launch` (or of
mpiexec and its proxies together) nothing would end the ranks. The supervisor
watches for that, every WATCH_S:
* its parent, for a rank started by an MPI launcher (PMI_RANK or the like set):
  when the proxy that started it is gone, the job is lost;
* the `oarlock launch` process named in OARLOCK_LAUNCHER, by pid and start time
  (a later process with the same pid does not pass).
When either is gone it sends SIGTERM to the rank - its session when it leads
one (the script and the script's children), else the script - and SIGKILL to
what is left TERM_WAIT_S later, then removes the launch directory the dead
launcher left. With their ranks gone, Hydra's proxies and mpiexec exit too.

The other way round, the script's process dies with the supervisor
(PR_SET_PDEATHSIG = SIGKILL; a watcher thread where prctl is missing): Hydra's
clean-up after MPI_Abort or a failed rank SIGKILLs the process it started,
which is the supervisor. Signals sent to the supervisor (SIGTERM from mpiexec or
the launcher, SIGINT, SIGHUP, SIGUSR1, ...) are forwarded to the script.

Cost: the supervisor sleeps in select(); the child's end wakes it at once
(SIGCHLD through the signal wakeup fd), the watch costs a getppid() and one
/proc read every WATCH_S.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time
import traceback
from typing import NoReturn

from oarlock_xccl import failure
from oarlock_xccl.processes import is_alive, read_proc_stat, send_signal, session_processes

WATCH_S = 0.5       # how often the supervisor checks that its job still exists
TERM_WAIT_S = 2.0   # between SIGTERM and SIGKILL when the job is gone

_FORWARDED = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
                   if hasattr(signal, name))
_PR_SET_PDEATHSIG = 1   # from <linux/prctl.h>


# -- the launcher's identity -------------------------------------------------------------------------------------------
def launcher_identity() -> str:
    """The OARLOCK_LAUNCHER value naming the calling process: "PID:START" (START empty without /proc)."""
    stat = read_proc_stat(os.getpid())
    return f"{os.getpid()}:{stat.start if stat is not None else ''}"


def _launcher() -> tuple[int, int | None] | None:
    """The launcher's (pid, start) from OARLOCK_LAUNCHER; None without one."""
    pid, _, start = os.environ.get(failure.LAUNCHER_ENV, "").partition(":")
    if not pid.isdigit():
        return None
    return int(pid), int(start) if start.isdigit() else None


def launcher_gone() -> bool:
    """Whether this process was started by an `oarlock launch` that no longer runs."""
    launcher = _launcher()
    return launcher is not None and not is_alive(*launcher)


# -- the fork ----------------------------------------------------------------------------------------------------------
def fork() -> None:
    """Split this rank into the script's process and its supervisor.

    Returns in the child, which is to run the script. The parent supervises the child and ends
    as it did: it never returns. Without os.fork the script runs in this process, unsupervised.
    """
    if not hasattr(os, "fork"):
        return
    launched = any(os.environ.get(name) for name in failure.RANK_ENVS)
    parent = os.getppid() if launched and os.getppid() != 1 else None
    supervisor_pid = os.getpid()
    # Signals wait until the parent's handlers are in place (and the child has reset them).
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {*_FORWARDED, signal.SIGCHLD})
    child = os.fork()
    if child == 0:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        _die_with(supervisor_pid)
        return
    try:
        _Supervisor(child, parent, _launcher(), blocked).run()
    except BaseException:  # never run the script a second time here; the child dies with this process
        print(f"oarlock_xccl.rank: the supervisor of rank {failure.launch_rank()} failed:", file=sys.stderr)
        traceback.print_exc()
    os._exit(1)


def _die_with(parent: int) -> None:
    """Make the calling process (the script's) end when `parent` (the supervisor) does."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
                if os.getppid() != parent:  # it died before prctl: no signal will come
                    os.kill(os.getpid(), signal.SIGKILL)
                return
        except (OSError, AttributeError):
            pass
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True, name="oarlock-rank-parent-watch").start()


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(WATCH_S)
    os.kill(os.getpid(), signal.SIGKILL)


# -- the supervisor ----------------------------------------------------------------------------------------------------
class _Supervisor:
    """The parent half of a rank: waits for the script's process, watches the job, reports and mirrors the end."""

    def __init__(self, child: int, parent: int | None, launcher: tuple[int, int | None] | None, mask):
        self.child = child
        self.parent = parent        # None: not watched
        self.launcher = launcher    # None: not started by `oarlock launch`
        self.mask = mask            # the signal mask to restore once the handlers are in place
        self.reaped = False
        self.orphaned = False       # the launcher is gone: nobody reads records any more

    def run(self) -> NoReturn:
        wake, waker = os.pipe()
        os.set_blocking(wake, False)
        os.set_blocking(waker, False)
        signal.set_wakeup_fd(waker, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, _ignore)  # a Python handler, so that SIGCHLD reaches the wakeup fd
        for sig in _FORWARDED:
            signal.signal(sig, self._forward)
        signal.pthread_sigmask(signal.SIG_SETMASK, self.mask)
        while (status := self._reap()) is None:
            if self._job_lost():
                self._end_rank()
                continue
            select.select([wake], [], [], WATCH_S)
            _drain(wake)
        if self.orphaned:
            _remove_launch_dir()
        else:
            self._record(status)
        _end_like(status)

    def _reap(self) -> int | None:
        pid, status = os.waitpid(self.child, os.WNOHANG)
        if pid == 0:
            return None
        self.reaped = True  # from here on the pid may belong to another process
        return status

    def _forward(self, signum, frame) -> None:
        if not self.reaped:
            try:
                os.kill(self.child, signum)
            except ProcessLookupError:
                pass

    def _job_lost(self) -> bool:
        if self.parent is not None and os.getppid() != self.parent:
            return True
        if self.launcher is not None and not is_alive(*self.launcher):
            self.orphaned = True
            return True
        return False

    def _end_rank(self) -> None:
        """SIGTERM to the rank's processes, SIGKILL to those left TERM_WAIT_S later; returns when all are gone."""
        targets = self._rank_processes()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for stat in targets:
                send_signal(stat, sig)
            if not targets:  # no /proc: the script's process is all that can be found
                self._forward(sig, None)
            deadline = time.monotonic() + TERM_WAIT_S
            while any(is_alive(stat.pid, stat.start) for stat in targets) and time.monotonic() < deadline:
                time.sleep(0.05)

    def _rank_processes(self):
        """The rank's processes but this one: its session when it leads one (Hydra's setsid), else the script's."""
        me = os.getpid()
        if os.getsid(0) == me:
            return [stat for stat in session_processes(me) if stat.pid != me]
        stat = read_proc_stat(self.child)
        return [] if stat is None else [stat]

    def _record(self, status: int) -> None:
        signum = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        payload = {"rank": failure.launch_rank(), "pid": self.child, "time": time.monotonic(),
                   "exit_code": None if signum is not None else os.WEXITSTATUS(status), "signal": signum,
                   "core_dumped": signum is not None and os.WCOREDUMP(status)}
        try:
            failure.write_record(failure.EXIT, payload)
        except OSError:
            pass  # the launcher and its directory went away meanwhile


def _ignore(signum, frame) -> None:
    pass


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def _remove_launch_dir() -> None:
    """Remove the launch directory of a launcher that died without doing it (only one made by the launcher)."""
    import shutil
    directory = failure.launch_dir()
    if directory and os.path.basename(os.path.normpath(directory)).startswith(failure.LAUNCH_DIR_PREFIX):
        shutil.rmtree(directory, ignore_errors=True)  # every rank tries: the last one to finish succeeds


def _end_like(status: int) -> NoReturn:
    """End this process as the wait status `status` says the child ended: same exit code or same signal."""
    signal.set_wakeup_fd(-1)
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        try:
            import resource
            resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
        except (ImportError, ValueError, OSError):
            pass  # the script's core dump is the one that matters; this one would be a second, useless one
        try:
            signal.signal(signum, signal.SIG_DFL)
        except (OSError, ValueError):
            pass  # SIGKILL and SIGSTOP cannot be caught anyway
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
        os.kill(os.getpid(), signum)
        os._exit(128 + signum)  # a signal whose default action does not end a process
    os._exit(os.waitstatus_to_exitcode(status))
