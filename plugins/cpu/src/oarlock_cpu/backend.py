"""The numpy backend: array module, host copies, seeded generator and memory statistics."""

from __future__ import annotations

import numpy as np

from oarlock.device import Backend


class CPUBackend(Backend):
    type = "cpu"
    parent = None
    xp = np
    array_types = (np.ndarray,)
    dlpack_device_type = 1  # kDLCPU

    def __init__(self, seed: int = 0):
        self._seed = seed
        self._generator = np.random.default_rng(seed)

    def device_count(self) -> int:
        return 1

    def asarray(self, data, dtype=None, index: int = 0):
        return np.asarray(data, dtype=dtype)

    def to_host(self, array):
        return np.asarray(array)

    def from_dlpack(self, obj):
        return np.from_dlpack(obj)

    # -- random -----------------------------------------------------------------------------
    def generator(self, index: int = 0):
        return self._generator

    def seed(self, seed: int) -> None:
        self._seed = seed
        self._generator = np.random.default_rng(seed)

    def get_rng_state(self, index: int = 0):
        return self._generator.bit_generator.state

    def set_rng_state(self, state, index: int = 0) -> None:
        self._generator.bit_generator.state = state

    # -- memory: filled in by the allocation tracker (see memstat.py) -----------------------
    def memory_allocated(self, index: int = 0) -> int:
        return 0

    def max_memory_allocated(self, index: int = 0) -> int:
        return 0
