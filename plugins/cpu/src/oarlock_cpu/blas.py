"""BLAS threads per matrix product: chosen from the call's size and the machine's load.

A multi-threaded OpenBLAS GEMM waits for its slowest thread, so when another process keeps a core busy a
2-thread GEMM of 512^3 on 2 cores runs about 10x slower than a 1-thread one; and small products
never pay for the threads' start-up. `ThreadPolicy.threads_for(m, k, n, batch)` answers:

- OARLOCK_BLAS_THREADS=N in the environment: always N (read once, when the policy is built);
- products under SMALL_FLOPS: 1 thread (a skinny product above it still gains from a second thread on an
  idle machine: 40 against 24 GFLOP/s for [4096, 512] @ [512, 8] here);
- otherwise the usable cores (os.sched_getaffinity); with OARLOCK_BLAS_THREADS=auto (adaptive), minus the
  cores other processes keep busy, at least 1.
Adaptive is not the default because OpenBLAS rounds some products differently with 1 and 2 threads: a
count that follows the machine's load made two runs of the same seed differ in the last bits (`oarlock train`'s
losses from step 3 on, on a VM whose neighbours' steal time came and went). By size alone, the count, and so
every result, is the same in every run; `auto` trades that for speed on a busy machine.

The load is the CPU time the whole machine spent busy (/proc/stat) minus this process's own
(time.process_time: its BLAS threads spinning count as ours, not as load), over the last interval,
sampled at most every SAMPLE_S seconds and smoothed; `load_reader` can be replaced (tests inject one).
Where /proc/stat does not exist the load counts as 0.

The count is handed to the BLAS library only when it changes (a set call costs about 0.3 us). The library
is found among the shared objects numpy loaded (/proc/self/maps): OpenBLAS under its plain names or the
scipy-openblas ones (scipy_openblas_set_num_threads64_, ...). Without one (another BLAS, another OS) the
policy still decides but sets nothing.

The cpu device's matmul, bmm and linear kernels (registered by `register`) apply it and then run the generic
kernels, so results are those of the generic kernels (only the thread count differs).
"""

from __future__ import annotations

import ctypes
import math
import os
import time

from oarlock_cpu.kernels import generic, register_all

SMALL_FLOPS = 2 * 96 ** 3      # below this a GEMM is done before a second thread pays for itself
SAMPLE_S = 0.1                 # the load is re-read at most this often
BUSY_THRESHOLD = 0.5           # another process's share of a core above which that core counts as taken
SMOOTHING = 0.5                # weight of the newest load sample in the running average

# (set, get) symbol names, most specific first: the scipy-openblas wheels prefix and suffix theirs
BLAS_SYMBOLS = [("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
                ("scipy_openblas_set_num_threads", "scipy_openblas_get_num_threads"),
                ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
                ("openblas_set_num_threads", "openblas_get_num_threads")]


class BlasLibrary:
    """set/get of the BLAS thread count through ctypes; `available` is False when no library was found."""

    def __init__(self, path: str | None = None):
        self.path = path if path is not None else _loaded_blas_path()
        self._set = self._get = None
        if self.path:
            try:
                lib = ctypes.CDLL(self.path)
            except OSError:
                lib = None
            for set_name, get_name in BLAS_SYMBOLS if lib is not None else ():
                if hasattr(lib, set_name) and hasattr(lib, get_name):
                    self._set, self._get = getattr(lib, set_name), getattr(lib, get_name)
                    self._set.argtypes, self._set.restype = [ctypes.c_int], None
                    self._get.argtypes, self._get.restype = [], ctypes.c_int
                    break

    @property
    def available(self) -> bool:
        return self._set is not None

    def get_threads(self) -> int | None:
        return self._get() if self._get is not None else None

    def set_threads(self, n: int) -> None:
        if self._set is not None:
            self._set(n)


def _loaded_blas_path() -> str | None:
    """The path of the OpenBLAS shared object mapped into this process (numpy's), or None."""
    import numpy  # noqa: F401  (numpy loads its BLAS on import)
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rsplit(None, 1)[-1]
                if "openblas" in os.path.basename(path).lower() and ".so" in path:
                    return path
    except OSError:
        pass
    return None


class ProcStatLoad:
    """Cores kept busy by other processes since the previous call: the machine's busy CPU time (/proc/stat)
    minus this process's (time.process_time), over the wall time between calls. The first call gives 0."""

    def __init__(self, path: str = "/proc/stat"):
        self.path = path
        self.hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self.previous = None

    def __call__(self) -> float:
        try:
            with open(self.path) as stat:
                fields = stat.readline().split()[1:]
        except OSError:
            return 0.0
        ticks = [int(v) for v in fields]
        busy = (sum(ticks) - ticks[3] - (ticks[4] if len(ticks) > 4 else 0)) / self.hz  # all but idle and iowait
        now = (time.monotonic(), busy, time.process_time())
        previous, self.previous = self.previous, now
        if previous is None or now[0] - previous[0] <= 0:
            return 0.0
        others = (now[1] - previous[1]) - (now[2] - previous[2])
        return max(0.0, others / (now[0] - previous[0]))


class ThreadPolicy:
    """Chooses and sets the BLAS thread count per matrix product (see the module docstring)."""

    def __init__(self, library: BlasLibrary | None = None, cores: int | None = None, load_reader=None,
                 forced: int | None = None, clock=time.monotonic, adaptive: bool | None = None):
        self.library = library if library is not None else BlasLibrary()
        self.cores = cores if cores is not None else _usable_cores()
        self.load_reader = load_reader if load_reader is not None else ProcStatLoad()
        env_forced, env_adaptive = _from_env()
        self.forced = forced if forced is not None else env_forced
        self.adaptive = adaptive if adaptive is not None else env_adaptive
        self.clock = clock
        self.load = 0.0                 # smoothed cores busy with other processes
        self.sampled_at = -math.inf
        self.current = self.library.get_threads() if self.library.available else None
        self.sets = 0                   # set calls made (how often the choice changed)

    def busy_elsewhere(self) -> int:
        """Cores other processes keep busy, from a load sample at most SAMPLE_S old."""
        now = self.clock()
        if now - self.sampled_at >= SAMPLE_S:
            sample = self.load_reader()
            first = self.sampled_at == -math.inf
            self.load = sample if first else SMOOTHING * sample + (1 - SMOOTHING) * self.load
            self.sampled_at = now
        return int(self.load + (1 - BUSY_THRESHOLD))  # rounds at the threshold

    def threads_for(self, m: int, k: int, n: int, batch: int = 1) -> int:
        if self.forced is not None:
            return self.forced
        if 2 * m * k * n * batch < SMALL_FLOPS:
            return 1
        if not self.adaptive:
            return self.cores
        return max(1, min(self.cores, self.cores - self.busy_elsewhere()))

    def apply(self, m: int, k: int, n: int, batch: int = 1) -> int:
        """Choose the count for this product and hand it to the library if it changed; returns it."""
        threads = self.threads_for(m, k, n, batch)
        if threads != self.current:
            self.library.set_threads(threads)
            self.current = threads
            self.sets += 1
        return threads


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _from_env() -> tuple[int | None, bool]:
    """(forced count or None, adaptive) from OARLOCK_BLAS_THREADS: unset, a positive integer, or "auto"."""
    value = os.environ.get("OARLOCK_BLAS_THREADS", "").strip()
    if not value:
        return None, False
    if value == "auto":
        return None, True
    try:
        threads = int(value)
    except ValueError:
        threads = 0
    if threads < 1:
        raise ValueError(f"OARLOCK_BLAS_THREADS must be a positive integer or 'auto', got {value!r}")
    return threads, False


_policy: ThreadPolicy | None = None


def policy() -> ThreadPolicy:
    """The process's policy, built on first use (so OARLOCK_BLAS_THREADS is read then)."""
    global _policy
    if _policy is None:
        _policy = ThreadPolicy()
    return _policy


def set_policy(new: ThreadPolicy | None) -> ThreadPolicy | None:
    """Replace the process's policy (None: build a fresh one on next use); returns the previous one."""
    global _policy
    previous, _policy = _policy, new
    return previous


# -- the cpu device's matrix-product kernels ---------------------------------------------------------------

def _batch(shape) -> int:
    return math.prod(shape[:-2]) if len(shape) > 2 else 1


def _sides(x_shape, y_shape, transpose_x=False, transpose_y=False):
    """(m, k, n, batch) of a matmul with numpy's vector rules and Paddle's transposes."""
    if len(x_shape) >= 2:
        m, k = (x_shape[-1], x_shape[-2]) if transpose_x else (x_shape[-2], x_shape[-1])
    else:
        m, k = 1, x_shape[-1] if x_shape else 1
    if len(y_shape) >= 2:
        n = y_shape[-2] if transpose_y else y_shape[-1]
    else:
        n = 1
    return m, k, n, max(_batch(x_shape), _batch(y_shape))


def matmul(xp, x, y, transpose_x=False, transpose_y=False):
    policy().apply(*_sides(x.shape, y.shape, transpose_x, transpose_y))
    return generic("matmul")(xp, x, y, transpose_x=transpose_x, transpose_y=transpose_y)


def bmm(xp, x, y):
    policy().apply(*_sides(x.shape, y.shape))
    return generic("bmm")(xp, x, y)


def linear(xp, x, weight, bias=None):
    # x [..., in] @ weight [in, out]: the leading axes of x are rows of one GEMM, by MKL with the bias added inside
    # the product's pieces where it takes the operands (it chooses its own threads from the policy)
    if x.ndim >= 2 and weight.ndim == 2 and x.shape[-1] == weight.shape[0] and (
            bias is None or (bias.shape == weight.shape[1:] and x.dtype == bias.dtype)) and x.dtype == weight.dtype:
        out = _mkl().matmul_bias(x, weight, bias)
        if out is not None:
            return out
    rows = math.prod(x.shape[:-1]) if x.ndim > 1 else 1
    policy().apply(rows, weight.shape[0] if weight.ndim else 1, weight.shape[-1] if weight.ndim > 1 else 1)
    return generic("linear")(xp, x, weight, bias)


def linear_grad(xp, x, weight, g, need_x=True, need_weight=True, need_bias=True):
    # the fused backward's products (dx = g W^T, dW = x^T g) through the "cpu" matmul (MKL), as the two matmul ops
    # it stands in for would run them (a device with its own matmul gets the fused op only with this kernel)
    return generic("_linear_grad")(xp, x, weight, g, need_x=need_x, need_weight=need_weight, need_bias=need_bias)


_MKL_MODULE = None


def _mkl():
    """oarlock_cpu.mkl (imported on first use: it imports this module)."""
    global _MKL_MODULE
    if _MKL_MODULE is None:
        from oarlock_cpu import mkl
        _MKL_MODULE = mkl
    return _MKL_MODULE


KERNELS = {"matmul": matmul, "bmm": bmm, "linear": linear, "_linear_grad": linear_grad}
DTYPES = ("float32", "float64", "float16", "bfloat16")  # the half types multiply in float32 BLAS


def register(ops):
    register_all(ops, KERNELS, DTYPES)
