"""The processes of an MPI job, found and signalled through /proc, for `oarlock launch` and the ranks'
supervisors (oarlock_xccl.supervisor).

MPICH's Hydra starts its proxy and every rank in sessions of their own
(setsid), so signalling mpiexec's process group does not reach them. A job's
processes are therefore the descendants of mpiexec plus every process in the
sessions of mpiexec and of the ranks (which also catches a rank's children
re-parented to init). A process is identified by pid and start time, so a
later process that reuses a pid is never signalled.
"""

from __future__ import annotations

import dataclasses
import os
import signal

_HAVE_PROC = os.path.isdir("/proc/self")


@dataclasses.dataclass(frozen=True)
class ProcStat:
    """What the launcher needs of a process: its identity (pid + start time) and its place in the tree."""
    pid: int
    ppid: int
    sid: int
    state: str
    start: int | None   # clock ticks since boot; tells a process from a later one with the same pid


def read_proc_stat(pid: int) -> ProcStat | None:
    """The process's /proc/PID/stat, or None when it does not exist (or there is no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    fields = data.rpartition(b")")[2].split()  # the command name before ")" may contain anything
    try:
        return ProcStat(pid, int(fields[1]), int(fields[3]), fields[0].decode(), int(fields[19]))
    except (IndexError, ValueError):
        return None


def _all_processes() -> list[ProcStat]:
    if not _HAVE_PROC:
        return []
    stats = (read_proc_stat(int(name)) for name in os.listdir("/proc") if name.isdigit())
    return [stat for stat in stats if stat is not None]


def is_alive(pid: int, start: int | None) -> bool:
    """Whether the process `pid` that started at `start` still runs (a zombie has ended)."""
    if not _HAVE_PROC:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True
    stat = read_proc_stat(pid)
    return stat is not None and stat.state not in ("Z", "X") and (start is None or stat.start == start)


def job_processes(root: int | None, sessions: set[int]) -> dict[int, ProcStat]:
    """The live processes of a job: the descendants of `root` and all members of `sessions` and of the
    descendants' sessions. Never this process or a member of its session."""
    table = _all_processes()
    children: dict[int, list[ProcStat]] = {}
    for stat in table:
        children.setdefault(stat.ppid, []).append(stat)
    found: dict[int, ProcStat] = {}
    stack = list(children.get(root, [])) if root is not None else []
    while stack:
        stat = stack.pop()
        if stat.pid not in found:
            found[stat.pid] = stat
            stack.extend(children.get(stat.pid, []))
    own_session = os.getsid(0)
    sessions = (set(sessions) | {stat.sid for stat in found.values()}) - {0, own_session}
    found.update((stat.pid, stat) for stat in table if stat.sid in sessions)
    return {pid: stat for pid, stat in found.items()
            if pid != os.getpid() and stat.sid != own_session and stat.state not in ("Z", "X")}


def session_processes(sid: int) -> list[ProcStat]:
    """The live members of session `sid`, the calling process included (none without /proc)."""
    return [stat for stat in _all_processes() if stat.sid == sid and stat.state not in ("Z", "X")]


def send_signal(stat: ProcStat, sig: int) -> None:
    """Signal the process `stat` describes, if it is still that process (not a later one with its pid)."""
    pidfd = None
    try:
        if hasattr(os, "pidfd_open"):
            try:
                pidfd = os.pidfd_open(stat.pid)  # pins the process: no pid reuse between check and kill
            except ProcessLookupError:
                return
            except OSError:
                pidfd = None  # kernel without pidfds
        current = read_proc_stat(stat.pid) if _HAVE_PROC else stat
        if current is None or current.start != stat.start:
            return
        if pidfd is not None:
            signal.pidfd_send_signal(pidfd, sig)
        else:
            os.kill(stat.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    finally:
        if pidfd is not None:
            os.close(pidfd)

