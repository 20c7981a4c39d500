"""The background half of async_save: at most one save writes in the background per process; the
next save or load, `wait_async_save()` and interpreter exit wait for it, and an error it met is
raised there (at exit it is printed, since nobody is left to catch it)."""

from __future__ import annotations

import atexit
import sys
import threading

_pending: dict = {"thread": None, "error": None, "what": ""}
_lock = threading.Lock()
_registered = []


def start(job, what: str) -> None:
    """Run `job()` in a background thread once the previous one has finished."""
    wait_async_save()
    if not _registered:
        atexit.register(_at_exit)   # registered after the communication library's own hook, so it runs first
        _registered.append(True)

    def run():
        try:
            job()
        except BaseException as exc:   # kept for the next wait, which raises it in the caller's thread
            with _lock:
                _pending["error"] = exc

    thread = threading.Thread(target=run, name="oarlock-async-save", daemon=True)
    with _lock:
        _pending.update(thread=thread, error=None, what=what)
    thread.start()


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
        raise RuntimeError(f"the async save of {what} failed: {error}") from error


def _at_exit() -> None:
    try:
        wait_async_save()
    except RuntimeError as exc:
        print(f"oarlock: {exc}", file=sys.stderr)
