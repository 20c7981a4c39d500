"""Host copies for async saves: one staging array per tensor key, kept between saves and reused, so
a periodic async save costs memory copies (on several threads: numpy's copy releases the GIL) and
no fresh allocation. Fresh memory is slow to touch: its pages fault in one by one. The staging area
holds at most one copy of the saved state between saves; a save of other keys or shapes replaces it.

Two users: OARLOCK_ASYNC_SAVE=copy copies every tensor before the call returns (`snapshot`), and
the default copy-on-write mode (cow.py) copies a tensor only when training is about to write it
before the writer has (`buffer` + `copy`).

GPU tensors need no staging: their host arrays are fresh device-to-host copies anyway.
"""

from __future__ import annotations

import os
import threading
import numpy as np

from oarlock_checkpoint.flex.threads import run_parallel

_buffers: dict = {}
_lock = threading.Lock()
_CHUNK = 16 << 20   # bytes per copy task


def _workers() -> int:
    return min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2, 8)


def buffer(key: str, like: np.ndarray) -> np.ndarray:
    """The reused staging array for `key`, of `like`'s shape and dtype (a new one if that changed)."""
    with _lock:
        found = _buffers.get(key)
        if found is None or found.shape != like.shape or found.dtype != like.dtype:
            found = _buffers[key] = np.empty(like.shape, like.dtype)
        return found


def keep_only(keys) -> None:
    """Forget the staging arrays of every other key (a save of other keys frees the old ones)."""
    keys = set(keys)
    with _lock:
        for key in [k for k in _buffers if k not in keys]:
            del _buffers[key]


def copy(pairs: list) -> None:
    """np.copyto(dst, src) for each (dst, src) pair of equal-length uint8 arrays, in chunks on several
    threads when there is enough to share."""
    tasks = [(dst[i:i + _CHUNK], src[i:i + _CHUNK]) for dst, src in pairs for i in range(0, len(src), _CHUNK)]
    run_parallel(np.copyto, tasks, _workers())


def snapshot(arrays: dict) -> dict:
    """{key: private copy} of {key: host array}, in reused buffers."""
    out = {key: buffer(key, array) for key, array in arrays.items()}
    copy([(out[key].reshape(-1).view(np.uint8), array.reshape(-1).view(np.uint8)) for key, array in arrays.items()])
    keep_only(out)
    return out
