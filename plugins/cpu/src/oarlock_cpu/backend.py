"""The numpy backend: array module, host copies, seeded generator and memory statistics.

Memory statistics come from the C extension `oarlock_cpu._memstat`, a numpy
allocator handler (NEP 49) that counts the bytes of array data. Constructing a
CPUBackend installs it in the current context; see that module's docstring
for what is counted and for threads, which each need their own install().
"""

from __future__ import annotations

import os
import warnings

import numpy as np

from oarlock.device import Backend
from oarlock_cpu import copy_worker, fastmath, flash_kernels, mkl
from oarlock_cpu.host_pool import COUNTER as HOST_POOL
from oarlock_cpu.host_pool import copy_to_host

try:
    from oarlock_cpu import _memstat
except ImportError as exc:  # a source tree whose extension was never built
    _memstat = None
    _memstat_error = exc


# Arrays up to 32 MiB come from malloc's reusable heap, and up to 256 MiB of freed heap is kept: see
# tune_malloc in _memstat.c (fresh mmap'ed pages for every activation cost a training step 25-40%).
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 256 << 20


class CPUBackend(Backend):
    type = "cpu"
    parent = None
    xp = np
    array_types = (np.ndarray,)
    dlpack_device_type = 1  # kDLCPU
    # for kernels generic over xp: vectorised float32 exp and exp2, and matmul by MKL where it is installed (and
    # oarlock-flashmask's C forward over it)
    array_functions = {**fastmath.FUNCTIONS, **mkl.FUNCTIONS, **flash_kernels.FUNCTIONS}
    host_pool = HOST_POOL                  # pin_memory's blocks (host_memory_allocated)

    def __init__(self, seed: int = 0):
        self._seed = seed
        self._generator = np.random.default_rng(seed)
        if _memstat is None:
            # Keep the device usable without the extension; only the statistics fail (see _memstat_module).
            warnings.warn(_missing_memstat_message(), RuntimeWarning, stacklevel=2)
        else:
            _memstat.install()
            if not any(key in os.environ for key in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")):
                _memstat.tune_malloc(MMAP_THRESHOLD, TRIM_THRESHOLD)  # the user's own malloc settings win

    def device_count(self) -> int:
        return 1

    def asarray(self, data, dtype=None, index: int = 0):
        return np.asarray(data, dtype=dtype)

    def to_host(self, array):
        return np.asarray(array)

    def from_dlpack(self, obj):
        return np.from_dlpack(obj)

    def pin_memory(self, host):
        """A copy of `host` in the host pool (host_pool.py): the cpu's stand-in for pinned memory, counted by
        host_memory_allocated and not by memory_allocated."""
        return copy_to_host(host)

    def copy_to_host_async(self, array, index: int = 0):
        """pin_memory's copy, run by the copy worker thread (copy_worker.py)."""
        return copy_worker.to_host_async(array)

    def copy_to_device_async(self, host, index: int = 0):
        return copy_worker.to_device_async(host)

    # -- random -----------------------------------------------------------------------------
    def generator(self, index: int = 0):
        return self._generator

    def seed(self, seed: int) -> None:
        self._seed = seed
        self._generator = np.random.default_rng(seed)

    # numpy's draws hold the bit generator's lock (and release the GIL) while they advance its state, but
    # reading or writing `state` takes no lock: take it, so another thread's draw never tears the state
    def get_rng_state(self, index: int = 0):
        bits = self._generator.bit_generator
        with bits.lock:
            return bits.state

    def set_rng_state(self, state, index: int = 0) -> None:
        bits = self._generator.bit_generator
        with bits.lock:
            bits.state = state

    # -- memory: one cpu device, so `index` is ignored -----------------------------------------
    def memory_allocated(self, index: int = 0) -> int:
        return _memstat_module().current()

    def max_memory_allocated(self, index: int = 0) -> int:
        return _memstat_module().peak()

    def reset_max_memory_allocated(self, index: int = 0) -> None:
        _memstat_module().reset_peak()


def _missing_memstat_message() -> str:
    return (f"oarlock_cpu._memstat is not built ({_memstat_error}); cpu memory statistics are unavailable. "
            "Reinstall the plugin to compile it: pip install -e plugins/cpu")


def _memstat_module():
    # Raise rather than report 0 bytes: a silent zero would pass for a real measurement.
    if _memstat is None:
        raise RuntimeError(_missing_memstat_message())
    return _memstat
