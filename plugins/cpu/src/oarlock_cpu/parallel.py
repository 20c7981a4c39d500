"""Large elementwise and row C kernels on all free cores, as PyTorch's CPU kernels are.

The C extensions of oarlock-cpu (_kernels: the ufuncs, the softmax and log-sum-exp rows; _rows: the norm and rotary
rows, the embedding backward; _optim: the Adam and SGD updates) cut a large call into pieces run on
oarlock_cpu._gemm's worker pool, the one that runs the split matrix products (see _pool_api.h): calls from about
32768 elements up, PyTorch's grain. How many threads they may use is the BLAS thread policy's count for a large
product (oarlock_cpu.blas): the usable cores, under OARLOCK_BLAS_THREADS=auto minus those other processes keep busy,
and OARLOCK_BLAS_THREADS=1 keeps every kernel on one core. `sync_threads()` hands that count to the extensions when
it changes; the kernels' wrappers call it. Results are the same bits on any number of threads (elements are computed
alone; the reductions over rows are cut by the row count, not by the threads).
"""

from __future__ import annotations

import numpy as np

_MODULES = []
for _name in ("_kernels", "_rows", "_optim"):
    try:
        _module = __import__(f"oarlock_cpu.{_name}", fromlist=[_name])
    except ImportError:   # never built: nothing to tell
        continue
    if hasattr(_module, "set_threads"):   # an extension built before the pool was shared lacks it
        _MODULES.append(_module)

_LARGE = 1 << 10   # the policy's count for a product of this size is the count for any large call
_told = [1]        # what the extensions were last told (their default is one thread)


def kernel_threads() -> int:
    """The threads a large kernel call may use now (the BLAS thread policy's)."""
    return _blas().policy().threads_for(_LARGE, _LARGE, _LARGE)


_settled = [None]   # a policy whose count cannot change (neither adaptive nor replaced) once the extensions know it


def sync_threads() -> None:
    """Tell the C extensions the current thread count, if it changed (every kernel wrapper calls this: a policy that
    does not follow the load is asked once)."""
    policy = _blas().policy()
    if policy is _settled[0]:
        return
    threads = policy.threads_for(_LARGE, _LARGE, _LARGE)
    if threads != _told[0]:
        for module in _MODULES:
            module.set_threads(threads)
        _told[0] = threads
    _settled[0] = None if policy.adaptive else policy


_BLAS = []


def _blas():
    """oarlock_cpu.blas (imported on first use: blas imports kernels, which imports this module)."""
    if not _BLAS:
        from oarlock_cpu import blas
        _BLAS.append(blas)
    return _BLAS[0]


def run_ufunc(ufunc, *inputs):
    """ufunc(*inputs) as an array (a 0-d input gives a 0-d array, not a numpy scalar), its large contiguous calls
    split over the free cores by the extension itself."""
    sync_threads()
    result = ufunc(*inputs)
    return result if result.__class__ is np.ndarray else np.asarray(result)
