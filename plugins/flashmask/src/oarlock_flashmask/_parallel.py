"""Tile-level parallelism for the numpy kernels.

numpy's matmul on one small tile gains little from OpenBLAS's own threads, and when the cores are shared
(oversubscription) OpenBLAS's threads make a 128 x 64 x 256 product up to hundreds of times slower. So while a
FlashMask kernel runs, OpenBLAS is set to one thread (through its C API, when numpy's OpenBLAS exposes it; the
previous setting is restored afterwards) and independent tiles run on a small thread pool instead (numpy releases
the GIL in matmul and ufuncs), which pull items from a shared queue. The number of workers is os.cpu_count()
capped at 8, or OARLOCK_FLASHMASK_THREADS.
Note: the OpenBLAS setting is process-wide, so numpy work in other Python threads runs single-threaded meanwhile.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy

_lock = threading.Lock()
_state = {"blas": None, "pool": None, "depth": 0, "saved": None}


def workers() -> int:
    env = os.environ.get("OARLOCK_FLASHMASK_THREADS")
    if env:
        return max(1, int(env))
    return max(1, min(8, os.cpu_count() or 1))


def _blas():
    if _state["blas"] is None:
        found = False
        try:
            base = os.path.join(os.path.dirname(numpy.__file__), "..", "numpy.libs")
            for path in glob.glob(os.path.join(base, "*openblas*")):
                lib = ctypes.CDLL(path)
                for prefix in ("scipy_openblas", "openblas"):
                    for suffix in ("64_", ""):
                        s, g = f"{prefix}_set_num_threads{suffix}", f"{prefix}_get_num_threads{suffix}"
                        if hasattr(lib, s) and hasattr(lib, g):
                            setter, getter = getattr(lib, s), getattr(lib, g)
                            setter.argtypes, getter.restype = [ctypes.c_int], ctypes.c_int
                            found = (setter, getter)
                            break
                    if found:
                        break
                if found:
                    break
        except OSError:
            found = False
        _state["blas"] = found
    return _state["blas"]


@contextlib.contextmanager
def single_threaded_blas():
    blas = _blas()
    if not blas:
        yield
        return
    setter, getter = blas
    with _lock:
        if _state["depth"] == 0:
            _state["saved"] = getter()
            setter(1)
        _state["depth"] += 1
    try:
        yield
    finally:
        with _lock:
            _state["depth"] -= 1
            if _state["depth"] == 0:
                setter(_state["saved"])


_END = object()


def _shared(items):
    """One iterator over `items` that several workers pull from (a lock keeps next() safe without the GIL)."""
    lock = threading.Lock()
    it = iter(items)

    def pull():
        while True:
            with lock:
                item = next(it, _END)
            if item is _END:
                return
            yield item
    return pull


def run(xp, fn, items, dynamic=True):
    """fn(worker_index, items_of_worker) for each worker, on the pool (numpy) or inline (other xp / 1 worker).
    dynamic: workers pull the next item from one shared queue as they finish the previous one, so the load
    balances itself when items differ in size (causal rows) or a core is shared with other processes; give the
    items heaviest first within each run of items that share data, so the last ones to finish are short. Use it
    where the result does not depend on which worker ran an item. Otherwise (dynamic=False) items are dealt
    round-robin: the same items go to the same worker every call (deterministic sums per worker)."""
    n = workers() if xp is numpy else 1
    n = min(n, len(items))
    if n <= 1:
        with single_threaded_blas() if xp is numpy else contextlib.nullcontext():
            return [fn(0, items)]
    if _state["pool"] is None:
        _state["pool"] = ThreadPoolExecutor(max_workers=max(workers(), 2), thread_name_prefix="oarlock-flashmask")
    pull = _shared(items) if dynamic else None
    with single_threaded_blas():
        futures = [_state["pool"].submit(fn, w, pull() if dynamic else items[w::n]) for w in range(n)]
        return [f.result() for f in futures]
