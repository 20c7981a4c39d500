"""The random generators a resumed run must continue from: oarlock's, numpy's global one and Python's,
as JSON (per rank: dropout and data sampling may draw different numbers on every rank)."""

from __future__ import annotations

import json
import random

import numpy as np


def capture() -> bytes:
    import oarlock
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss = random.getstate()
    state = {"oarlock": oarlock.get_rng_state(),
             "numpy": [kind, keys.tolist(), int(pos), int(has_gauss), float(cached)],
             "python": [version, list(internal), gauss]}
    return json.dumps(state).encode()


def restore(data: bytes) -> None:
    import oarlock
    state = json.loads(data)
    oarlock.set_rng_state(state["oarlock"])
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
