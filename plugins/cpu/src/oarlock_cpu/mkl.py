"""Matrix products through Intel MKL where the `mkl` wheel is installed: the "cpu" backend's `matmul`.

Why: on this project's x86-64 machines numpy's OpenBLAS runs the GEMMs of a training step 13-40% slower per
core than MKL (the library PyTorch's CPU wheels link), and those GEMMs are most of a step
(`bench/gemm.py` measures both). oarlock-cpu depends on the `mkl` wheel on x86-64 Linux; elsewhere, without
it, or with OARLOCK_CPU_MKL=0, every product stays numpy's.

`matmul(a, b, out=None)` is a drop-in for numpy.matmul offered through `Backend.array_functions`, so kernels
generic over xp reach it with `oarlock.plugin_api.xp_function(numpy, "matmul")`: float32 and float64
ndarrays of at least 2 dimensions with equal batch shapes (or a 2-D side), row-major or transposed
matrices, go to MKL through oarlock_cpu._gemm (C, the GIL released), and so does `out=` when it is a
row-major result (a slice of rows included) that overlaps neither operand; anything else goes to numpy, so the
drop-in accepts and returns what numpy's does. The thread count of each product is the BLAS thread policy's
(oarlock_cpu.blas: by size, or by load under OARLOCK_BLAS_THREADS=auto). A product given several threads is, by
default, cut into pieces (blocks of batch entries, or of the result's rows or columns) that MKL runs on one thread
each, handed out one at a time to the calling thread and oarlock_cpu._gemm's own worker pool (_pool.c). Not MKL's
OpenMP team (OARLOCK_CPU_MKL=threads): on this project's 2-vCPU VM (a quarter of its time stolen by neighbours)
that team alone ran the step GEMMs 0.8-1.0x PyTorch's time against OpenBLAS's 1.1-1.4x (bench/gemm.py), but
inside training steps, beside the elementwise worker and the fused kernels' own threads, it made 2 of 3 runs of
bench/train_step.py 1.4-4x slower (a thread waiting at the team's barrier for one the VM descheduled, its idle
threads spinning on the core others need). The pool has no barrier: the caller takes what a late worker has not
claimed. OARLOCK_CPU_MKL=numpy leaves those products to numpy's OpenBLAS.
`matmul_serial(a, b, out=None)` is the same on one thread (the calling one), for kernels that run their own
threads (oarlock-flashmask's tile pool): the policy's count would oversubscribe the cores there.

Loading: libmkl_rt.so.2 and Intel's OpenMP runtime libiomp5.so are located through the installed
distributions' file lists (importlib.metadata), so a virtual environment's copy is found without
LD_LIBRARY_PATH. The OpenMP runtime is opened first with RTLD_LOCAL: libmkl_rt's threading layer then finds
it by its soname, and its symbols do not leak into libraries loaded later (PyTorch brings GNU OpenMP).
Without libiomp5, MKL runs sequentially (its threading layer would not load).

Results: MKL rounds differently from OpenBLAS (both are correctly rounded per fused step, in another order),
so products match numpy's to float rounding, not bit for bit; a given shape, thread count and machine gives
the same bits every run (MKL packs its operands, so the arrays' alignment does not change the order).
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import os

import numpy as np

from oarlock_cpu import blas

try:
    from oarlock_cpu import _gemm
except ImportError:   # never built (no compiler at install time): numpy serves every product
    _gemm = None

MKL_THREADING_SEQUENTIAL = 1   # mkl_set_threading_layer's value for the sequential layer


def _installed_file(distribution: str, name: str) -> str | None:
    """The absolute path of the file `name` (a basename) installed by `distribution`, or None."""
    try:
        files = importlib.metadata.files(distribution) or ()
    except importlib.metadata.PackageNotFoundError:
        return None
    for entry in files:
        if entry.name == name:
            path = os.path.realpath(str(entry.locate()))
            if os.path.exists(path):
                return path
    return None


def _load() -> str | None:
    """Open MKL for oarlock_cpu._gemm; returns the library's path, or None when MKL is off or missing."""
    if _gemm is None or os.environ.get("OARLOCK_CPU_MKL", "1") == "0":
        return None
    path = _installed_file("mkl", "libmkl_rt.so.2")
    if path is None:
        return None
    openmp = _installed_file("intel-openmp", "libiomp5.so")
    # Intel's OpenMP keeps its workers spinning for KMP_BLOCKTIME ms (200 by default) after each product: on
    # 2 cores that takes the core our other threads (the elementwise split, a pipeline's copies, other ranks)
    # would use. 1 ms still covers the gap between the GEMMs of one layer. Read when the runtime starts.
    os.environ.setdefault("KMP_BLOCKTIME", "1")
    try:
        if openmp is not None:
            ctypes.CDLL(openmp, mode=os.RTLD_LOCAL)
        library = ctypes.CDLL(path, mode=os.RTLD_LOCAL)
        if openmp is None:
            library.MKL_Set_Threading_Layer(MKL_THREADING_SEQUENTIAL)
        _gemm.load(path)
    except (OSError, AttributeError):
        return None
    return path


LIBRARY = _load()
_numpy_matmul = np.matmul


# How products the thread policy gives several threads are run (OARLOCK_CPU_MKL): "split" (the default) cuts
# them into pieces MKL runs on one thread each, on oarlock_cpu._gemm's own worker pool; "threads" hands them to
# MKL's OpenMP team; "numpy" leaves them to numpy's OpenBLAS (the choice before the pool existed).
MULTI_THREAD_MODE = {"threads": "threads", "numpy": "numpy"}.get(os.environ.get("OARLOCK_CPU_MKL", ""), "split")


def _threads(a, b):
    """(threads, split, to numpy) for a product the policy chooses threads for."""
    threads = blas.policy().threads_for(a.shape[-2], a.shape[-1], b.shape[-1],
                                        max(blas._batch(a.shape), blas._batch(b.shape)))
    if threads > 1:
        return threads, MULTI_THREAD_MODE == "split", MULTI_THREAD_MODE == "numpy"
    return threads, False, False


def _product(a, b, out, threads):
    if a.__class__ is np.ndarray and b.__class__ is np.ndarray and a.ndim >= 2 and b.ndim >= 2:
        split = False
        if threads is None:
            threads, split, to_numpy = _threads(a, b)
            if to_numpy:
                return _numpy_matmul(a, b) if out is None else _numpy_matmul(a, b, out=out)
        result = _gemm.matmul(a, b, threads, out, split)
        if result is not None:
            return result
    return _numpy_matmul(a, b) if out is None else _numpy_matmul(a, b, out=out)


def matmul_bias(a, b, bias):
    """a @ b + bias as a new array (bias None: a @ b), the bias [n] added to each row of the result by the thread that
    computed it, while it is in cache (a linear layer; numpy needs a second pass over the result); None where MKL does
    not take the operands (the caller computes it another way)."""
    if (LIBRARY is None or a.__class__ is not np.ndarray or b.__class__ is not np.ndarray or a.ndim < 2
            or b.ndim != 2 or not (bias is None or bias.__class__ is np.ndarray)):
        return None
    threads, split, to_numpy = _threads(a, b)
    return None if to_numpy else _gemm.matmul(a, b, threads, None, split, bias)


def matmul(a, b, out=None):
    """numpy.matmul(a, b, out=None), by MKL where the operands allow (see the module docstring)."""
    return _product(a, b, out, None)


def matmul_serial(a, b, out=None):
    """numpy.matmul(a, b, out=None), by MKL on the calling thread alone where the operands allow: for kernels
    that run products on threads of their own (oarlock-flashmask's tile pool), where the policy's count would
    oversubscribe the cores. What goes to numpy runs on OpenBLAS's count, which such kernels set themselves."""
    return _product(a, b, out, 1)


FUNCTIONS = {} if LIBRARY is None else {"matmul": matmul, "matmul_serial": matmul_serial}
