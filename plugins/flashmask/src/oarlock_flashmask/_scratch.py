"""Scratch arrays the numpy kernels reuse from one call to the next.

A kernel call needs several O(S) working arrays (the Q, K^T and V layouts, the gradient accumulators, per-worker
score buffers) of a few MiB each. Allocated fresh, every call pays a page fault per 4 KiB page on first touch:
glibc serves blocks this large with mmap and hands them back on free, so each call maps and zeroes them again
(about 7% of a causal forward at S=2048). The kernels therefore take them with `take` and give them back with
`give`; a given-back array is handed out again for the same shape and dtype. At most LIMIT bytes are kept, the
least recently given back dropped first; `clear()` drops them all. Only numpy arrays are kept (other array
modules have their own caching allocators). Arrays come back uninitialised.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy

LIMIT = 256 << 20

_lock = threading.Lock()
_free: OrderedDict = OrderedDict()  # id -> array, least recently given back first
_bytes = 0


def take(xp, shape, dtype):
    """An array of `shape` and `dtype` (uninitialised): a kept one when there is one, else a new one."""
    if xp is not numpy:
        return xp.empty(shape, dtype=dtype)
    shape, dtype = tuple(shape), numpy.dtype(dtype)
    global _bytes
    with _lock:
        for key, arr in reversed(_free.items()):
            if arr.shape == shape and arr.dtype == dtype:
                del _free[key]
                _bytes -= arr.nbytes
                return arr
    return numpy.empty(shape, dtype=dtype)


def give(*arrays):
    """Keeps numpy arrays from `take` for later calls (within LIMIT); the caller must not use them afterwards."""
    global _bytes
    with _lock:
        for arr in arrays:
            if not isinstance(arr, numpy.ndarray) or arr.base is not None or arr.nbytes > LIMIT:
                continue
            _free[id(arr)] = arr
            _bytes += arr.nbytes
        while _bytes > LIMIT:
            _, old = _free.popitem(last=False)
            _bytes -= old.nbytes


def clear():
    """Drops every kept array."""
    global _bytes
    with _lock:
        _free.clear()
        _bytes = 0
