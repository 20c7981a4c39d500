"""Asynchronous host-pool copies on the cpu (Backend.copy_to_host_async / copy_to_device_async).

One worker thread runs the copies in order, so a copy overlaps the caller's compute: numpy's memcpy releases
the GIL, and on a machine with a free core the copy costs the caller only the hand-off (~20 us). The copy's
source is kept alive by the task until it has run. A GPU's counterpart is its copy stream (oarlock-cuda).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from oarlock_cpu.host_pool import copy_to_host



def _count_allocations() -> None:
    """The worker's numpy allocations (loaded arrays) count in memory_allocated like the caller's: _memstat's
    allocator is installed per thread context."""
    try:
        from oarlock_cpu import _memstat
    except ImportError:      # a source tree whose extension was never built: backend.py has warned
        return
    _memstat.install()


_WORKER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="oarlock-cpu-copy", initializer=_count_allocations)


class FutureTransfer:
    """A copy running on the worker: done() whether it has finished, wait() its result (re-raising its error)."""

    __slots__ = ("_future",)

    def __init__(self, future):
        self._future = future

    def done(self) -> bool:
        return self._future.done()

    def wait(self):
        return self._future.result()


def _to_device(host):
    return np.array(host, copy=True)   # a numpy allocation: counted by memory_allocated again


def to_host_async(array) -> FutureTransfer:
    return FutureTransfer(_WORKER.submit(copy_to_host, array))


def to_device_async(host) -> FutureTransfer:
    return FutureTransfer(_WORKER.submit(_to_device, host))
