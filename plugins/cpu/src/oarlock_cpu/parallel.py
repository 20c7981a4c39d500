"""Elementwise C kernels split over the cores, as PyTorch's CPU kernels are.

The ufuncs of oarlock_cpu._kernels release the GIL while they run, so a large call can run its second
half on a worker thread while the calling thread runs the first: `split_ufunc(ufunc, x, ...)` does that
for C-contiguous inputs of one shape of at least MIN_ELEMENTS elements. How many cores it uses follows
the BLAS thread policy (oarlock_cpu.blas): the usable cores (under OARLOCK_BLAS_THREADS=auto minus those
other processes keep busy, so a loaded machine gets one thread), and OARLOCK_BLAS_THREADS=1 keeps every
kernel on one core. Results are
the same bits either way (each element is computed alone).
"""

from __future__ import annotations

import queue
import threading

import numpy as np

MIN_ELEMENTS = 1 << 17   # below this (about 50-100 us of work) the hand-off to the worker costs more than it saves
ALIGN = 64               # split at a multiple of 64 elements: both halves start on a cache line


class _Worker:
    """One daemon thread running submitted calls; `run(fn, *args)` returns a wait() that re-raises."""

    def __init__(self):
        self._jobs = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name="oarlock-cpu-elementwise", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            fn, args, done, outcome = self._jobs.get()
            try:
                fn(*args)
            except BaseException as exc:   # handed to the caller's wait()
                outcome.append(exc)
            done.set()

    def run(self, fn, *args):
        done, outcome = threading.Event(), []
        self._jobs.put((fn, args, done, outcome))

        def wait():
            done.wait()
            if outcome:
                raise outcome[0]
        return wait


_worker: _Worker | None = None
_worker_lock = threading.Lock()


def _the_worker() -> _Worker:
    global _worker
    if _worker is None:
        with _worker_lock:
            if _worker is None:
                _worker = _Worker()
    return _worker


def _two_cores() -> bool:
    from oarlock_cpu import blas   # here, not at the top: blas imports kernels, which imports this module

    policy = blas.policy()
    return policy.threads_for(1 << 10, 1 << 10, 1 << 10) >= 2   # a product this size gets every free core


def split_ufunc(ufunc, *inputs):
    """ufunc(*inputs) as a new array of the first input's dtype, the second half on the worker thread
    when the inputs are large, C-contiguous, of one shape and dtype, and two cores are free."""
    x = inputs[0]
    n = x.size
    if (n < MIN_ELEMENTS or x.__class__ is not np.ndarray
            or not all(a.__class__ is np.ndarray and a.shape == x.shape and a.dtype == x.dtype
                       and a.flags.c_contiguous for a in inputs)
            or not _two_cores()):
        result = ufunc(*inputs)
        return result if result.__class__ is np.ndarray else np.asarray(result)
    out = np.empty(x.shape, dtype=x.dtype)
    flat_in = [a.reshape(-1) for a in inputs]
    flat_out = out.reshape(-1)
    half = (n // 2) // ALIGN * ALIGN
    wait = _the_worker().run(ufunc, *[a[half:] for a in flat_in], flat_out[half:])
    try:
        ufunc(*[a[:half] for a in flat_in], out=flat_out[:half])
    finally:
        wait()
    return out
