"""Host copies for async saves that write from a thread: one staging array per tensor, kept between
saves and reused, so a periodic async save costs one memory copy (on several threads: numpy's copy
releases the GIL) and no fresh allocation. Fresh memory is slow to touch: its pages fault in one by
one. The staging area holds one copy of the saved state between saves; a save of other keys or
shapes replaces it.

GPU tensors need no staging: their host arrays are fresh device-to-host copies anyway.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

_buffers: dict = {}
_CHUNK = 16 << 20   # bytes per copy task


def snapshot(arrays: dict) -> dict:
    """{key: private copy} of {key: host array}, in reused buffers."""
    out, tasks = {}, []
    for key, array in arrays.items():
        buffer = _buffers.get(key)
        if buffer is None or buffer.shape != array.shape or buffer.dtype != array.dtype:
            buffer = np.empty(array.shape, array.dtype)
        out[key] = buffer
        src, dst = array.reshape(-1).view(np.uint8), buffer.reshape(-1).view(np.uint8)
        tasks += [(dst[i:i + _CHUNK], src[i:i + _CHUNK]) for i in range(0, len(src), _CHUNK)]
    workers = min(len(tasks), len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2, 8)
    if workers > 1:
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(lambda task: np.copyto(*task), tasks))
    else:
        for dst, src in tasks:
            np.copyto(dst, src)
    _buffers.clear()
    _buffers.update(out)
    return out
