"""The "gpu" backend (alias "cuda") over CuPy: arrays, host copies, per-device generators, streams,
events and memory statistics.

CuPy is imported on first real use (a gpu place asked for, a gpu tensor made), never when the
plugin registers: `available()` imports it and asks CUDA for the device count, once, and reports
why the GPU cannot be used when it cannot ("cupy is not installed (...)", "cupy cannot reach a
GPU: <CUDA's error>"). Until then `xp` and `array_types` are not touched: the core reads them
only for tensors of this device.

- Arrays are made on device `index` (`with cupy.cuda.Device(index)`); a CuPy array of another GPU
  is copied over (peer copy). Python scalars become 0-d arrays by a fill kernel, not a host copy,
  so `x * 0.5` queues work without waiting for the GPU.
- Random numbers: one CounterGenerator (oarlock_cuda.rng) per device, state (seed, offset).
- Memory: CuPy's default memory pool, with the counting allocator of oarlock_cuda.memory installed
  so that max_memory_allocated is exact; empty_cache() frees the pool's cached blocks (and the
  pinned host pool's).
- Pinned host memory: `pin_memory(host_array)` copies a numpy array into page-locked memory from
  CuPy's pinned pool (faster, asynchronous-capable host-to-device copies). Device-to-host copies
  (`to_host`: Tensor.numpy(), item(), printing) use ordinary pageable memory unless
  OARLOCK_CUDA_PINNED_HOST_COPIES=1, when arrays of 1 MiB or more are copied into pinned buffers
  from that pool and returned as numpy arrays over them. Off by default: the pool keeps a block
  for every distinct size it has served, locked in RAM, until empty_cache().
"""

from __future__ import annotations

import os
import threading

import numpy as np

from oarlock.device import Backend, DeviceProperties, HostMemoryCounter

from oarlock_cuda.memory import CountingAllocator
from oarlock_cuda.rng import CounterGenerator, CupyEngine
from oarlock_cuda import copy_stream
from oarlock_cuda.streams import CudaEvent, CudaStream

INSTALL_HINT = "pip install 'oarlock-cuda[cuda12]' or 'oarlock-cuda[cuda13]', matching your CUDA driver"
PINNED_MIN_BYTES = 1 << 20
_SCALARS = (bool, int, float, complex, np.generic)


def probe_cupy() -> tuple[bool, str, int]:
    """(usable, why not, device count) for CuPy in this process: import it and ask CUDA for the devices."""
    try:
        import cupy
    except ModuleNotFoundError as exc:
        if exc.name == "cupy":
            return False, f"cupy is not installed ({INSTALL_HINT})", 0
        return False, f"cupy failed to import: {exc} ({INSTALL_HINT})", 0
    except Exception as exc:  # a broken install raises ImportError, OSError (missing libraries), ...
        return False, f"cupy failed to import: {type(exc).__name__}: {exc}", 0
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # CUDARuntimeError: no driver, driver too old, no device, CUDA_VISIBLE_DEVICES=""
        return False, f"cupy cannot reach a GPU: {exc}", 0
    if count <= 0:
        return False, "cupy cannot reach a GPU: CUDA reports no device", 0
    return True, "", count


class GPUBackend(Backend):
    type = "gpu"
    parent = None
    dlpack_device_type = 2  # kDLCUDA

    def __init__(self, seed: int = 0, pinned_host_copies: bool | None = None):
        self._seed = seed
        self._status: tuple[bool, str, int] | None = None
        self._cupy = None
        self._allocator: CountingAllocator | None = None
        self._generators: dict[int, CounterGenerator] = {}
        self._bound: dict = {}      # (kernel, device index) -> the kernel run with that device current
        self._lock = threading.RLock()
        # pin_memory's pinned arrays (host_memory_allocated): one pool for every device, as CuPy's pinned pool
        self.host_pool = HostMemoryCounter()
        self._copy_stream_set = None     # copy_stream.CopyStreams, made with CuPy on first use
        if pinned_host_copies is None:
            pinned_host_copies = os.environ.get("OARLOCK_CUDA_PINNED_HOST_COPIES", "") not in ("", "0")
        self.pinned_host_copies = pinned_host_copies

    # -- availability and the lazy CuPy import ---------------------------------------------------------
    def _probe(self) -> tuple[bool, str, int]:
        status = self._status
        if status is None:
            with self._lock:
                if self._status is None:
                    self._status = probe_cupy()
                status = self._status
        return status

    def available(self) -> tuple[bool, str]:
        usable, reason, _ = self._probe()
        return usable, reason

    def device_count(self) -> int:
        return self._probe()[2]

    def _module(self):
        """CuPy, imported and set up (the counting allocator) on first use; raises why it cannot be used."""
        cupy = self._cupy
        if cupy is not None:
            return cupy
        usable, reason, _ = self._probe()
        if not usable:
            raise RuntimeError(f"the gpu device cannot be used: {reason}")
        with self._lock:
            if self._cupy is None:
                import cupy
                self._allocator = _install_counting_allocator(cupy)
                self._cupy = cupy
        return self._cupy

    @property
    def xp(self):
        return self._module()

    @property
    def array_types(self) -> tuple:
        return (self._module().ndarray,)

    def set_current_device(self, index: int) -> None:
        self._module().cuda.Device(index).use()

    def bind_kernel(self, kernel, index: int):
        """CuPy runs kernels and allocates results on its current device: a kernel for a tensor on
        gpu:N runs with device N current, whatever set_device chose (one cached wrapper per kernel
        and device; switching only when needed)."""
        key = (kernel, index)
        bound = self._bound.get(key)
        if bound is None:
            runtime = self._module().cuda.runtime

            def bound(xp, *args, **kwargs):
                previous = runtime.getDevice()
                if previous == index:
                    return kernel(xp, *args, **kwargs)
                runtime.setDevice(index)
                try:
                    return kernel(xp, *args, **kwargs)
                finally:
                    runtime.setDevice(previous)

            self._bound[key] = bound
        return bound

    # -- arrays --------------------------------------------------------------------------------------------
    def asarray(self, data, dtype=None, index: int = 0):
        cupy = self._module()
        if dtype is not None:
            _check_dtype(np.dtype(dtype))
        with cupy.cuda.Device(index):
            if isinstance(data, cupy.ndarray):
                if data.device.id != index:
                    data = data.copy()  # ndarray.copy() makes the copy on the current device
                return data if dtype is None else data.astype(dtype, copy=False)
            if isinstance(data, _SCALARS):
                return cupy.full((), data, dtype=np.asarray(data).dtype if dtype is None else dtype)
            host = np.asarray(data, dtype=dtype)
            _check_dtype(host.dtype)
            return cupy.asarray(host)

    def to_host(self, array):
        cupy = self._module()
        if not isinstance(array, cupy.ndarray):
            return np.asarray(array)
        with array.device:
            if self.pinned_host_copies and array.nbytes >= PINNED_MIN_BYTES:
                import cupyx
                out = cupyx.empty_pinned(array.shape, array.dtype)
                cupy.ascontiguousarray(array).get(out=out)
                return out
            return array.get()

    def from_dlpack(self, obj):
        return self._module().from_dlpack(obj)

    def pin_memory(self, host) -> np.ndarray:
        """A copy of numpy array `host` in page-locked memory (CuPy's pinned pool): host-to-device copies from
        it run at full bus speed and may be asynchronous. Freed to the pool when the array is collected."""
        self._module()
        import cupyx
        host = np.asarray(host)
        out = cupyx.empty_pinned(host.shape, host.dtype)
        np.copyto(out, host)
        self.host_pool.track(out, out.nbytes)
        return out

    def copy_to_host_async(self, array, index: int = 0):
        """Into pinned memory on the device's copy stream (copy_stream.py)."""
        return copy_stream.to_host_async(self._copy_streams(), array, index, self.host_pool)

    def copy_to_device_async(self, host, index: int = 0):
        """From (pinned) host memory on the device's copy stream (copy_stream.py)."""
        return copy_stream.to_device_async(self._copy_streams(), host, index)

    def _copy_streams(self) -> copy_stream.CopyStreams:
        cupy = self._module()
        with self._lock:
            if self._copy_stream_set is None:
                self._copy_stream_set = copy_stream.CopyStreams(cupy)
        return self._copy_stream_set

    # -- random -------------------------------------------------------------------------------------------
    def generator(self, index: int = 0) -> CounterGenerator:
        gen = self._generators.get(index)
        if gen is None:
            with self._lock:
                gen = self._generators.get(index)
                if gen is None:
                    gen = self._generators[index] = CounterGenerator(self._seed, CupyEngine(self._module(), index))
        return gen

    def seed(self, seed: int) -> None:
        """Seed every device (no CuPy needed: generators made later start from this seed)."""
        self._seed = seed
        for gen in self._generators.values():
            gen.seed(seed)

    def get_rng_state(self, index: int = 0) -> dict:
        return self.generator(index).state

    def set_rng_state(self, state, index: int = 0) -> None:
        self.generator(index).state = state

    # -- memory -------------------------------------------------------------------------------------------
    def _on(self, index: int, read):
        cupy = self._module()
        with cupy.cuda.Device(index):
            return read(index)

    def memory_allocated(self, index: int = 0) -> int:
        return self._on(index, self._stats().used)

    def max_memory_allocated(self, index: int = 0) -> int:
        return self._on(index, self._stats().max_used)

    def reset_max_memory_allocated(self, index: int = 0) -> None:
        self._on(index, self._stats().reset_max_used)

    def memory_reserved(self, index: int = 0) -> int:
        return self._on(index, self._stats().total)

    def max_memory_reserved(self, index: int = 0) -> int:
        return self._on(index, self._stats().max_total)

    def reset_max_memory_reserved(self, index: int = 0) -> None:
        self._on(index, self._stats().reset_max_total)

    def _stats(self) -> CountingAllocator:
        self._module()
        return self._allocator

    def empty_cache(self) -> None:
        cupy = self._cupy
        if cupy is None:  # CuPy never loaded: nothing cached, and no reason to import it now
            return
        pool = cupy.get_default_memory_pool()
        for index in range(self.device_count()):
            with cupy.cuda.Device(index):
                pool.free_all_blocks()
        cupy.get_default_pinned_memory_pool().free_all_blocks()

    def device_properties(self, index: int = 0) -> DeviceProperties:
        props = self._module().cuda.runtime.getDeviceProperties(index)
        name = props["name"]
        return DeviceProperties(name.decode() if isinstance(name, bytes) else str(name), int(props["major"]),
                                int(props["minor"]), int(props["totalGlobalMem"]), int(props["multiProcessorCount"]))

    # -- streams and events ----------------------------------------------------------------------------------
    def synchronize(self, index: int = 0) -> None:
        self._module().cuda.Device(index).synchronize()

    def stream(self, index: int = 0, priority: int = 2) -> CudaStream:
        return CudaStream.create(self._module(), index, priority)

    def current_stream(self, index: int = 0) -> CudaStream:
        cupy = self._module()
        return CudaStream(cupy, cupy.cuda.get_current_stream(index), index)

    def set_stream(self, stream_base, index: int = 0) -> None:
        if not isinstance(stream_base, CudaStream):
            raise TypeError(f"set_stream(): a gpu stream must come from oarlock.device.Stream on a gpu device, "
                            f"got {stream_base!r}")
        with self._module().cuda.Device(index):
            stream_base.raw.use()

    def event(self, index: int = 0, enable_timing: bool = False, blocking: bool = False,
              interprocess: bool = False) -> CudaEvent:
        return CudaEvent(self._module(), index, enable_timing, blocking, interprocess)


def _check_dtype(dtype: np.dtype) -> None:
    if dtype.kind == "V":  # ml_dtypes' bfloat16 and float8 types
        raise TypeError(f"the gpu device (CuPy) has no {dtype} arrays; use float16 or float32 on gpu, or keep "
                        f"{dtype} tensors on the cpu")


def _install_counting_allocator(cupy) -> CountingAllocator:
    """Route CuPy's allocations through a CountingAllocator over its default pool, unless a program has
    already installed an allocator of its own (left in place: its arrays are not counted)."""
    pool = cupy.get_default_memory_pool()
    allocator = CountingAllocator(pool)
    if getattr(cupy.cuda.get_allocator(), "__self__", None) is pool:
        cupy.cuda.set_allocator(allocator.malloc)
    return allocator
