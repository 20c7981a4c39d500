"""Helpers for tests that run oarlock in several threads: `run_threads` starts targets and re-raises what
they raised (a failing thread aborts the barrier the others wait at, so nothing hangs), and
`fast_switching` makes the interpreter switch threads as often as it can (maximal interleaving)."""

from __future__ import annotations

import contextlib
import sys
import threading

TIMEOUT = 60.0   # seconds any one wait or join may take before the test fails instead of hanging


def run_threads(*targets, barrier: threading.Barrier | None = None, timeout: float = TIMEOUT):
    """Run each target in its own thread; re-raise the first exception any of them raised (aborting
    `barrier` so the others stop waiting), and fail if one is still running after `timeout`."""
    errors = []

    def guarded(target):
        try:
            target()
        except BaseException as e:  # noqa: BLE001 - reported in the main thread
            errors.append(e)
            if barrier is not None:
                barrier.abort()

    threads = [threading.Thread(target=guarded, args=(t,), daemon=True) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "a thread did not finish (deadlock?)"
    real = [e for e in errors if not isinstance(e, threading.BrokenBarrierError)]
    if errors:
        raise (real or errors)[0]


@contextlib.contextmanager
def fast_switching(interval: float = 1e-6):
    """Switch threads every `interval` seconds inside the block (the default is 5 ms)."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(interval)
    try:
        yield
    finally:
        sys.setswitchinterval(old)
