"""The background half of async_save. At most one save is in flight per process; the next save or
load, `wait_async_save()` and interpreter exit wait for it, and an error it met is raised there (at
exit it is printed, since nobody is left to catch it).

Three ways to write in the background (OARLOCK_ASYNC_SAVE):
- "cow" (the default): a thread writes straight from the tensors' own memory; an oarlock op about
  to write a tensor the thread has not finished first copies it (cow.py: write guards). The caller
  pays almost nothing, and a training step only for what is still unwritten when it updates the
  tensors (OARLOCK_ASYNC_SAVE_PRECOPY=1 adds a thread copying ahead of the writer).
- "copy": the caller copies the tensors into reused host buffers (staging.py) and a thread writes
  them. The caller pays one memory copy; training then runs undisturbed.
- "fork" (where the platform has fork()): a forked child process writes the tensors as they were
  at the fork, copy-on-write, so the caller is blocked only for the fork (about a millisecond); but
  every page training writes before the child is done is copied then, one page fault at a time,
  which costs more than the up-front copy when the optimizer writes the tensors right away (see
  bench/checkpoint.py). It pays off when training does a lot before writing them (a long forward
  and backward) and for GPU tensors, whose host copies the parent never writes. The child touches
  no communication library, ignores Ctrl-C (the parent's exit waits for it instead) and leaves with
  os._exit, skipping the parent's exit hooks; it finishes even if the parent is killed, since what
  it writes is a consistent snapshot.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import warnings

MODES = ("cow", "copy", "fork")


def mode() -> str:
    chosen = os.environ.get("OARLOCK_ASYNC_SAVE", "cow")
    if chosen not in MODES:
        raise ValueError(f"save_state_dict(): OARLOCK_ASYNC_SAVE must be one of {', '.join(MODES)}, got {chosen!r}")
    if chosen == "fork" and not hasattr(os, "fork"):
        raise ValueError("save_state_dict(): OARLOCK_ASYNC_SAVE=fork needs os.fork(), which this platform lacks")
    return chosen


_pending: dict = {"thread": None, "error": None, "what": ""}
_lock = threading.Lock()


class _ChildFailed(RuntimeError):
    """The forked writer failed; its message already names the error type."""
_registered = []


def start(job, what: str, fork: bool) -> None:
    """Run `job()` in the background (in a thread, or a forked child) once the previous one finished.
    The caller has already waited for the previous save (wait_async_save) before taking its snapshot."""
    if not _registered:
        atexit.register(_at_exit)   # registered after the communication library's own hook, so it runs first
        _registered.append(True)
    body = _forked(job) if fork else job

    def run():
        try:
            if not fork:
                _yield_to_training()
            body()
        except BaseException as exc:   # kept for the next wait, which raises it in the caller's thread
            with _lock:
                _pending["error"] = exc

    thread = threading.Thread(target=run, name="oarlock-async-save", daemon=True)
    with _lock:
        _pending.update(thread=thread, error=None, what=what)
    thread.start()


def _yield_to_training() -> None:
    """Make the calling (writer) thread run only on a core the training loop leaves idle: Linux's
    SCHED_IDLE for this thread (threads it starts inherit it), so the step is not slowed by the write;
    the save still finishes in the gaps, and at the latest when something waits for it.
    OARLOCK_ASYNC_SAVE_PRIORITY=normal keeps the ordinary priority."""
    setting = os.environ.get("OARLOCK_ASYNC_SAVE_PRIORITY", "idle")
    if setting not in ("idle", "normal"):
        raise ValueError(f"save_state_dict(): OARLOCK_ASYNC_SAVE_PRIORITY must be 'idle' or 'normal', got {setting!r}")
    if setting == "idle" and hasattr(os, "SCHED_IDLE"):
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))   # 0: this thread (Linux)
        except OSError:
            pass   # not allowed here (a container's policy): the thread keeps its priority


def _forked(job):
    """Fork now; the child runs job() and reports an error through a pipe. Returns the parent's wait."""
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():   # Python 3.12+ warns about fork() in a threaded process; the child
        warnings.simplefilter("ignore", DeprecationWarning)   # runs only this job and no other thread's locks
        pid = os.fork()
    if pid == 0:   # the child
        status = 1
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C stops training, not the save in flight
            os.close(read_end)
            job()
            status = 0
        except BaseException as exc:
            os.write(write_end, f"{type(exc).__name__}: {exc}".encode()[:1 << 16])
        finally:
            os._exit(status)
    os.close(write_end)

    def wait():
        with os.fdopen(read_end, "rb") as pipe:
            message = pipe.read().decode(errors="replace")
        _, status = os.waitpid(pid, 0)
        if status:
            code = os.waitstatus_to_exitcode(status)
            raise _ChildFailed(message or f"the writer process {pid} ended with status {code}")
    return wait


def wait_async_save() -> None:
    """Block until the pending async save (if any) is on disk; raise the error it met, if any."""
    with _lock:
        thread = _pending["thread"]
    if thread is not None:
        thread.join()
    with _lock:
        error, what = _pending["error"], _pending["what"]
        _pending.update(thread=None, error=None)
    if error is not None:
        detail = str(error) if isinstance(error, _ChildFailed) else f"{type(error).__name__}: {error}"
        raise RuntimeError(f"the async save of {what} failed: {detail}") from error


def _at_exit() -> None:
    try:
        wait_async_save()
    except RuntimeError as exc:
        print(f"oarlock: {exc}", file=sys.stderr)
