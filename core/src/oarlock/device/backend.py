"""The backend interface: what a device plugin supplies (Backend), the synchronous stream and event a
device without asynchronous queues uses (HostStream, HostEvent), a copy that is already done
(CompletedTransfer), and DeviceProperties.

A backend (registered by a plugin) supplies one device type: its array module `xp`, host copies, random
generators, streams and memory statistics. The core knows only this interface; "cpu", "gpu" and every
custom device come from plugins. A CUDA-like device names "gpu" as its parent so kernel lookup can fall
back to the GPU kernels.
"""

from __future__ import annotations

import threading
import time
import weakref

class Backend:
    """What a device plugin supplies. Subclass it and register an instance.

    Attributes: `type` (device type name), `parent` (device type whose kernels
    this one may reuse, or None), `xp` (array module), `array_types` (the
    concrete array classes it holds). The core reads `xp` and `array_types`
    only for tensors of this device, so a backend may make them lazy
    properties that import its array library on first use.

    A backend must implement asarray, to_host and the random methods; every
    other method has a default that describes a device with one synchronous
    queue (HostStream/HostEvent), no caching allocator and nothing to
    configure, so a CPU-like device overrides only what it has.
    """

    type: str = ""
    parent: str | None = None
    xp = None
    array_types: tuple = ()
    dlpack_device_type: int | None = None  # DLPack's device code (kDLCPU = 1, kDLCUDA = 2); None: no DLPack import
    # Faster drop-ins for functions of `xp`, by name ({"exp": fn}): same calling convention and results (within
    # an ulp or two) for every input xp's own accepts. Kernels generic over xp reach them through
    # plugin_api.xp_function(xp, name), so one kernel serves every backend and runs each one's best version.
    array_functions: dict = {}

    def available(self) -> tuple[bool, str]:
        """(True, "") when the device can be used, else (False, why not): shown when a place of this
        type is asked for and device_count() is 0. Compute it once; it is called on error paths."""
        return True, ""

    def device_count(self) -> int:
        return 1

    def set_current_device(self, index: int) -> None:
        """Make device `index` the one new arrays and kernels go to (called by set_device)."""

    def bind_kernel(self, kernel, index: int):
        """The callable the dispatcher runs for `kernel` on device `index`. A backend whose array
        library has a "current device" (CuPy) returns a wrapper that runs the kernel there; the
        dispatcher caches what this returns in its fast path, so the default costs nothing."""
        return kernel

    def asarray(self, data, dtype=None, index: int = 0):
        """Place host data (numpy array or nested lists) on device `index`."""
        raise NotImplementedError

    def to_host(self, array):
        """Copy an array of this backend to a numpy array."""
        raise NotImplementedError

    def from_dlpack(self, obj):
        """An array of this backend sharing memory with a DLPack-capable object (or capsule) whose device
        type is `dlpack_device_type`; `oarlock.from_dlpack` picks the backend by that code."""
        raise NotImplementedError(f"device type {self.type!r} does not import DLPack objects")

    def pin_memory(self, host):
        """A copy of the numpy array `host` in page-locked host memory (a backend whose device copies
        from pinned memory faster, such as "gpu", implements it; `Tensor.pin_memory` asks the "gpu" backend)."""
        raise NotImplementedError(f"device type {self.type!r} has no pinned host memory")

    def copy_to_host_async(self, array, index: int = 0):
        """Start copying device array `array` into this device's host pool (what `pin_memory` hands out).
        Returns a transfer: `done()` says whether the copy has finished, `wait()` returns the host array once
        it has. `array` must stay unmodified until then; the transfer keeps it alive. A GPU copies on a copy
        stream ordered after the work already queued; this default copies now (CompletedTransfer)."""
        return CompletedTransfer(self.pin_memory(self.to_host(array)))

    def copy_to_device_async(self, host, index: int = 0):
        """Start copying host-pool array `host` to a new array on device `index`; a transfer as above, whose
        `wait()` returns the device array, ready for the work queued after the wait. This default copies now."""
        array = self.asarray(host, None, index)
        return CompletedTransfer(array.copy() if array is host else array)

    def generator(self, index: int = 0):
        """The random generator of device `index` (numpy.random.Generator-like)."""
        raise NotImplementedError

    def seed(self, seed: int) -> None:
        raise NotImplementedError

    def get_rng_state(self, index: int = 0):
        raise NotImplementedError

    def set_rng_state(self, state, index: int = 0) -> None:
        raise NotImplementedError

    # -- memory ----------------------------------------------------------------------------------
    def memory_allocated(self, index: int = 0) -> int:
        return 0

    def max_memory_allocated(self, index: int = 0) -> int:
        return 0

    def reset_max_memory_allocated(self, index: int = 0) -> None:
        pass

    # the HostMemoryCounter of the device's host pool (what its `pin_memory` hands out), None without one
    host_pool = None

    def host_memory_allocated(self, index: int = 0) -> int:
        """Bytes of host memory in use from this device's host pool (`pin_memory`'s copies; a GPU's pinned
        memory); 0 for a device without one."""
        return 0 if self.host_pool is None else self.host_pool.current

    def max_host_memory_allocated(self, index: int = 0) -> int:
        return 0 if self.host_pool is None else self.host_pool.peak

    def reset_max_host_memory_allocated(self, index: int = 0) -> None:
        if self.host_pool is not None:
            self.host_pool.reset_peak()

    def memory_reserved(self, index: int = 0) -> int:
        """Bytes held by the device's allocator (in use or cached); without a cache, the bytes allocated."""
        return self.memory_allocated(index)

    def max_memory_reserved(self, index: int = 0) -> int:
        return self.max_memory_allocated(index)

    def reset_max_memory_reserved(self, index: int = 0) -> None:
        self.reset_max_memory_allocated(index)

    def empty_cache(self) -> None:
        """Give cached, unused memory of every device of this type back to the system (no-op without a cache)."""

    def device_properties(self, index: int = 0) -> "DeviceProperties":
        raise NotImplementedError(f"device type {self.type!r} reports no device properties")

    # -- streams and events: by default one synchronous queue ---------------------------------------
    def synchronize(self, index: int = 0) -> None:
        pass

    def stream(self, index: int = 0, priority: int = 2):
        """A new stream of device `index` (priority 1: high, 2: low). The object has synchronize(),
        query(), wait_event(event_base) and wait_stream(stream_base)."""
        return HostStream(self.type, index, priority)

    def current_stream(self, index: int = 0):
        """The stream that work on device `index` is queued on now (per thread)."""
        current = _host_current_streams()
        stream = current.get((self.type, index))
        return stream if stream is not None else _default_host_stream(self.type, index)

    def set_stream(self, stream_base, index: int = 0) -> None:
        """Make `stream_base` (made by this backend's stream()) the current stream of device `index`."""
        _host_current_streams()[(self.type, index)] = stream_base

    def event(self, index: int = 0, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        """A new event of device `index`. The object has record(stream_base), synchronize(), query() and
        elapsed_time(end_event_base) in milliseconds."""
        return HostEvent(self.type, index, enable_timing)


class CompletedTransfer:
    """A copy that has finished (Backend.copy_to_host_async's default): done() is True, wait() its result."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def done(self) -> bool:
        return True

    def wait(self):
        return self.value


class HostMemoryCounter:
    """The bytes of a device's host pool (what its `pin_memory` handed out) that are still alive, and their
    peak, for Backend.host_memory_allocated: `track(obj, nbytes)` counts `nbytes` until `obj` is collected.
    Thread-safe; process-wide, like the device counters."""

    def __init__(self):
        self._lock = threading.Lock()
        self.current = 0
        self.peak = 0

    def track(self, obj, nbytes: int) -> None:
        with self._lock:
            self.current += nbytes
            self.peak = max(self.peak, self.current)
        weakref.finalize(obj, self._release, nbytes)

    def _release(self, nbytes: int) -> None:
        with self._lock:
            self.current -= nbytes

    def reset_peak(self) -> None:
        with self._lock:
            self.peak = self.current


class HostStream:
    """The stream of a device that runs work when it is called (cpu): everything queued on it is done
    already, so synchronize() and the waits return at once and query() is True."""

    __slots__ = ("device_type", "index", "priority")

    def __init__(self, device_type: str, index: int = 0, priority: int = 2):
        self.device_type, self.index, self.priority = device_type, index, priority

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def wait_event(self, event_base) -> None:
        pass

    def wait_stream(self, stream_base) -> None:
        pass

    def __repr__(self):
        return f"HostStream({self.device_type}:{self.index})"


class HostEvent:
    """The event of a synchronous device: recording stamps the host clock, and it is complete at once."""

    __slots__ = ("device_type", "index", "enable_timing", "recorded_at")

    def __init__(self, device_type: str, index: int = 0, enable_timing: bool = False):
        self.device_type, self.index, self.enable_timing = device_type, index, enable_timing
        self.recorded_at = None

    def record(self, stream_base) -> None:
        self.recorded_at = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def elapsed_time(self, end) -> float:
        _check_timing(self, end)
        return (end.recorded_at - self.recorded_at) * 1000.0

    def __repr__(self):
        return f"HostEvent({self.device_type}:{self.index})"


def _check_timing(start, end) -> None:
    # The same rule as CUDA's cudaEventElapsedTime, so code that times itself on the CPU also runs on a GPU.
    if not (start.enable_timing and end.enable_timing):
        raise ValueError("Event.elapsed_time(): both events must be created with enable_timing=True")
    if start.recorded_at is None or end.recorded_at is None:
        raise ValueError("Event.elapsed_time(): both events must be recorded first (Event.record())")


_default_host_streams: dict[tuple[str, int], HostStream] = {}
_host_streams_local = threading.local()


def _default_host_stream(device_type: str, index: int) -> HostStream:
    stream = _default_host_streams.get((device_type, index))
    if stream is None:
        stream = _default_host_streams.setdefault((device_type, index), HostStream(device_type, index))
    return stream


def _host_current_streams() -> dict:
    current = getattr(_host_streams_local, "streams", None)
    if current is None:
        current = _host_streams_local.streams = {}
    return current


class DeviceProperties:
    """What get_device_properties() reports: name, compute capability (major, minor), total memory in
    bytes and the number of multiprocessors."""

    __slots__ = ("name", "major", "minor", "total_memory", "multi_processor_count")

    def __init__(self, name: str, major: int, minor: int, total_memory: int, multi_processor_count: int):
        self.name, self.major, self.minor = name, major, minor
        self.total_memory, self.multi_processor_count = total_memory, multi_processor_count

    def __repr__(self):
        return (f"DeviceProperties(name={self.name!r}, major={self.major}, minor={self.minor}, "
                f"total_memory={self.total_memory // (1 << 20)}MB, "
                f"multi_processor_count={self.multi_processor_count})")
