"""What Paddle records as attributes of a parameter (`is_distributed`, `split_axis`, `sequence_parallel`,
the sharding owner, ...): oarlock's Tensor has fixed slots, so the parallel strategies keep those marks
here, keyed by the parameter's identity, and forget them when the parameter is collected.

`mark(param, is_distributed=True, split_axis=1)` sets marks; `get(param, "split_axis", None)` reads
one; `marks_of(param)` returns all of them as a dict (a copy).
"""

from __future__ import annotations

import threading
import weakref

_MARKS: dict[int, dict] = {}
_LOCK = threading.Lock()


def _forget(key: int) -> None:
    with _LOCK:
        _MARKS.pop(key, None)


def mark(param, **marks) -> None:
    """Record `marks` on `param` (merged with the ones it has)."""
    key = id(param)
    with _LOCK:
        entry = _MARKS.get(key)
        if entry is None:
            # the id is reused once the parameter dies, so the marks must go with it
            weakref.finalize(param, _forget, key)
            entry = _MARKS[key] = {}
        entry.update(marks)


def get(param, name: str, default=None):
    """One mark of `param`, or `default`."""
    entry = _MARKS.get(id(param))
    return default if entry is None else entry.get(name, default)


def marks_of(param) -> dict:
    return dict(_MARKS.get(id(param), {}))


def is_distributed(param) -> bool:
    """Whether `param` is one rank's slice of a tensor-parallel weight (Paddle's `param.is_distributed`)."""
    return bool(get(param, "is_distributed", False))
