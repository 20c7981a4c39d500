"""Devices: Place objects, device-string parsing, the backend interface, the default device,
streams and events, and memory statistics.

A backend (registered by a plugin) supplies one device type: its array module
`xp`, host copies, random generators, streams and memory statistics. The core
knows only the interface below; "cpu", "gpu" and every custom device come from
plugins. "cuda" is an alias of "gpu", and a CUDA-like device names "gpu" as
its parent so kernel lookup can fall back to the GPU kernels.

Streams and events (`Stream`, `Event`, `current_stream`, `set_stream`,
`stream_guard`) are generic: they delegate to the place's backend. A backend
without asynchronous queues (cpu) inherits `HostStream`/`HostEvent`, which
are trivially synchronous, so code written for a GPU runs unchanged on the
CPU. `oarlock.device.cuda` holds Paddle's `paddle.device.cuda` names.
"""

from __future__ import annotations

import contextlib
import re
import sys
import threading
import time

__all__ = [
    "Place", "Backend", "set_device", "get_device", "CPUPlace", "CUDAPlace", "CustomPlace",
    "get_all_device_type", "get_all_custom_device_type", "get_available_custom_device", "get_available_device",
    "is_compiled_with_custom_device", "is_compiled_with_cuda", "device_count", "device_guard",
    "memory_allocated", "max_memory_allocated", "reset_max_memory_allocated", "memory_reserved",
    "max_memory_reserved", "reset_max_memory_reserved", "empty_cache", "synchronize", "get_device_properties",
    "DeviceProperties", "Stream", "Event", "current_stream", "set_stream", "stream_guard", "HostStream",
    "HostEvent", "cuda",
]

_DEVICE_ALIASES = {"cuda": "gpu"}
_BUILTIN_TYPES = ("cpu", "gpu")


class Place:
    """A device type and index, e.g. Place(cpu) or Place(gpu:0). Interned: compare with `is`."""

    __slots__ = ("type", "index", "backend", "_str")
    _interned: dict[tuple[str, int], "Place"] = {}

    def __new__(cls, type: str, index: int = 0):
        key = (type, index)
        place = cls._interned.get(key)
        if place is None:
            place = object.__new__(cls)
            place.type, place.index = type, index
            place.backend = None  # bound lazily by the registry
            place._str = type if type == "cpu" else f"{type}:{index}"
            cls._interned[key] = place
        return place

    def __repr__(self):
        return f"Place({self._str})"

    def __str__(self):
        return self._str

    def __eq__(self, other):
        if isinstance(other, str):
            try:
                other = _registry().parse_place(other)
            except ValueError:
                return False
        return self is other

    __hash__ = object.__hash__  # interned, like DType: identity hashing keeps dispatch lookups in C

    def __reduce__(self):
        return (Place, (self.type, self.index))

    def is_cpu_place(self):
        return self.type == "cpu"

    def is_gpu_place(self):
        return self.type == "gpu"

    def is_custom_place(self):
        return self.type not in _BUILTIN_TYPES

    def get_device_id(self):
        return self.index

    def get_device_type(self):
        return self.type


def CPUPlace() -> Place:
    return Place("cpu", 0)


def CUDAPlace(index: int = 0) -> Place:
    return Place("gpu", index)


def CustomPlace(device_type: str, index: int = 0) -> Place:
    return Place(device_type, index)


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


_PLACE_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?::(\d+))?$")


def split_device_string(text: str) -> tuple[str, int | None]:
    """'gpu:1' -> ('gpu', 1), 'cuda' -> ('gpu', None); raise on malformed text."""
    match = _PLACE_RE.match(text.strip())
    if match is None:
        raise ValueError(f"device {text!r} is malformed; expected 'cpu', 'gpu', 'gpu:N', 'cuda:N' or 'type:N'")
    name, index = match.group(1).lower(), match.group(2)
    return _DEVICE_ALIASES.get(name, name), None if index is None else int(index)


def _registry():
    from oarlock.registry import default_registry
    return default_registry()


_default_place: Place | None = None


def set_device(device) -> Place:
    """Make `device` ("cpu", "gpu:1", "cuda:0", "name:N" or a Place) the default for new tensors; on a device
    with several indices, it also becomes the backend's current device (where kernels run)."""
    global _default_place
    place = _registry().parse_place(device, what="set_device(): device")
    place.backend.set_current_device(place.index)
    _default_place = place
    return place


def get_device() -> str:
    """The default device as a string, e.g. 'cpu' or 'gpu:0'."""
    return str(default_place())


def default_place() -> Place:
    global _default_place
    if _default_place is None:
        _default_place = _registry().parse_place("cpu")
    return _default_place


@contextlib.contextmanager
def device_guard(device):
    """`with device_guard("gpu:1"):` makes `device` the default inside the block and restores the previous
    default after it."""
    previous = default_place()
    set_device(device)
    try:
        yield
    finally:
        set_device(previous)


def get_all_device_type() -> list[str]:
    return sorted(_registry().backends)


def get_all_custom_device_type() -> list[str]:
    return sorted(t for t in _registry().backends if t not in _BUILTIN_TYPES)


def get_available_custom_device() -> list[str]:
    reg = _registry()
    return [f"{t}:{i}" for t in get_all_custom_device_type() for i in range(reg.backends[t].device_count())]


def get_available_device() -> list[str]:
    """Every usable non-cpu device, e.g. ['gpu:0', 'gpu:1', 'npu:0'] (Paddle's get_available_device)."""
    reg = _registry()
    gpus = [f"gpu:{i}" for i in range(reg.backends["gpu"].device_count())] if "gpu" in reg.backends else []
    return gpus + get_available_custom_device()


def is_compiled_with_custom_device(device_type: str) -> bool:
    return device_type in get_all_custom_device_type()


def is_compiled_with_cuda() -> bool:
    """Whether a plugin provides the "gpu" device type (oarlock-cuda installed); it may still have no GPU to
    reach: see device_count("gpu") and oarlock.device.cuda.device_count()."""
    return "gpu" in _registry().backends


def device_count(device_type: str | None = None) -> int:
    """How many devices of `device_type` ("gpu", "cuda", a custom type) can be used; 0 for a type no plugin
    provides. None: the gpu count when oarlock-cuda is installed, else that of the first custom type."""
    backends = _registry().backends
    if device_type is None:
        custom = get_all_custom_device_type()
        device_type = "gpu" if "gpu" in backends or not custom else custom[0]
    if not isinstance(device_type, str):
        raise TypeError(f"device_count(): device_type must be a str such as 'gpu' or a custom device type, "
                        f"got {type(device_type).__name__} {device_type!r}")
    backend = backends.get(_DEVICE_ALIASES.get(device_type, device_type))
    return 0 if backend is None else backend.device_count()


def _place_of(device, what):
    return default_place() if device is None else _registry().parse_place(device, what=what)


# -- memory ------------------------------------------------------------------------------------------

def memory_allocated(device=None) -> int:
    """Bytes of tensor memory allocated now on `device` (default: the current device)."""
    place = _place_of(device, "memory_allocated(): device")
    return place.backend.memory_allocated(place.index)


def max_memory_allocated(device=None) -> int:
    """Peak bytes allocated on `device` since start or the last reset."""
    place = _place_of(device, "max_memory_allocated(): device")
    return place.backend.max_memory_allocated(place.index)


def reset_max_memory_allocated(device=None) -> None:
    place = _place_of(device, "reset_max_memory_allocated(): device")
    place.backend.reset_max_memory_allocated(place.index)


def memory_reserved(device=None) -> int:
    """Bytes the allocator of `device` holds, in use or cached for reuse (cpu: the bytes allocated)."""
    place = _place_of(device, "memory_reserved(): device")
    return place.backend.memory_reserved(place.index)


def max_memory_reserved(device=None) -> int:
    place = _place_of(device, "max_memory_reserved(): device")
    return place.backend.max_memory_reserved(place.index)


def reset_max_memory_reserved(device=None) -> None:
    place = _place_of(device, "reset_max_memory_reserved(): device")
    place.backend.reset_max_memory_reserved(place.index)


def empty_cache() -> None:
    """Give the memory that device allocators cache but no tensor uses back to the system, on every device
    (a GPU's memory pool; nothing on the cpu)."""
    for backend in _registry().backends.values():
        backend.empty_cache()


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


def get_device_properties(device=None) -> DeviceProperties:
    place = _place_of(device, "get_device_properties(): device")
    return place.backend.device_properties(place.index)


# -- streams and events --------------------------------------------------------------------------------

def synchronize(device=None) -> None:
    """Wait until all work queued on `device` (default: the current device) is done."""
    place = _place_of(device, "synchronize(): device")
    place.backend.synchronize(place.index)


class Stream:
    """A queue of work on one device (Paddle's paddle.device.Stream).

    Stream(device=None, priority=2): a new stream on `device` (default: the current device); priority 1 is
    high, 2 low. Work is queued on the current stream: make this one current with `with stream:`,
    `with oarlock.device.stream_guard(stream):` or set_stream(stream). On a device without asynchronous
    queues (cpu) every stream is already complete, so the same code runs there.
    """

    def __init__(self, device=None, priority: int = 2, stream_base=None):
        self.device = _place_of(device, "Stream(): device")
        if stream_base is None:
            if priority not in (1, 2) or isinstance(priority, bool):
                raise ValueError(f"Stream(): priority must be 1 (high) or 2 (low), got {priority!r}")
            stream_base = self.device.backend.stream(self.device.index, priority)
        self.stream_base = stream_base
        self._guards = []

    def synchronize(self) -> None:
        """Wait until all work queued on this stream is done."""
        self.stream_base.synchronize()

    def query(self) -> bool:
        """Whether all work queued on this stream is done."""
        return bool(self.stream_base.query())

    def wait_event(self, event: "Event") -> None:
        """Make work queued on this stream from now on wait until `event` completes."""
        if not isinstance(event, Event):
            raise TypeError(f"Stream.wait_event(): expected an Event, got {type(event).__name__}")
        if event.device.backend is self.device.backend:
            self.stream_base.wait_event(event.event_base)
        else:  # another backend's event: wait on the host, before anything more is queued here
            event.synchronize()

    def wait_stream(self, stream: "Stream") -> None:
        """Make work queued on this stream from now on wait until the work queued on `stream` so far is done."""
        if not isinstance(stream, Stream):
            raise TypeError(f"Stream.wait_stream(): expected a Stream, got {type(stream).__name__}")
        if stream.device.backend is self.device.backend:
            self.stream_base.wait_stream(stream.stream_base)
        else:
            stream.synchronize()

    def record_event(self, event: "Event | None" = None) -> "Event":
        """Record `event` (a new one if None) on this stream and return it."""
        if event is None:
            event = Event(self.device)
        event.record(self)
        return event

    @property
    def _as_parameter_(self):
        # ctypes: the raw stream handle (0, the null stream, for a synchronous device)
        import ctypes
        return ctypes.c_void_p(getattr(self.stream_base, "ptr", 0))

    def __enter__(self):
        guard = stream_guard(self)
        guard.__enter__()
        self._guards.append(guard)
        return self

    def __exit__(self, *exc):
        self._guards.pop().__exit__(*exc)

    def __eq__(self, other):
        if not isinstance(other, Stream):
            return NotImplemented
        return self.device is other.device and _same_base(self.stream_base, other.stream_base)

    def __hash__(self):
        return hash((self.device, getattr(self.stream_base, "ptr", id(self.stream_base))))

    def __repr__(self):
        return f"Stream(device={self.device}, {self.stream_base!r})"


def _same_base(a, b) -> bool:
    if a is b:
        return True
    ptr_a, ptr_b = getattr(a, "ptr", None), getattr(b, "ptr", None)
    return ptr_a is not None and ptr_a == ptr_b


class Event:
    """A point in a stream's work (Paddle's paddle.device.Event): record() it on a stream, then query(),
    synchronize(), make another stream wait_event() for it, or time two events with elapsed_time() (both
    created with enable_timing=True). On the cpu an event is complete when recorded."""

    def __init__(self, device=None, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.device = _place_of(device, "Event(): device")
        self.enable_timing = bool(enable_timing)
        self.event_base = self.device.backend.event(self.device.index, bool(enable_timing), bool(blocking),
                                                    bool(interprocess))

    def record(self, stream: Stream | None = None) -> None:
        """Record this event on `stream` (default: the current stream of the event's device)."""
        if stream is None:
            stream = current_stream(self.device)
        elif not isinstance(stream, Stream):
            raise TypeError(f"Event.record(): expected a Stream or None, got {type(stream).__name__}")
        if stream.device is not self.device:
            raise ValueError(f"Event.record(): the event belongs to {self.device} but the stream to "
                             f"{stream.device}; create the event on the stream's device")
        self.event_base.record(stream.stream_base)

    def query(self) -> bool:
        """Whether the work recorded before this event is done (True for an event never recorded)."""
        return bool(self.event_base.query())

    def synchronize(self) -> None:
        """Wait until the work recorded before this event is done."""
        self.event_base.synchronize()

    def elapsed_time(self, end_event: "Event") -> float:
        """Milliseconds between this event and `end_event` (both recorded, both with enable_timing=True)."""
        if not isinstance(end_event, Event):
            raise TypeError(f"Event.elapsed_time(): expected an Event, got {type(end_event).__name__}")
        if end_event.device.backend is not self.device.backend:
            raise ValueError(f"Event.elapsed_time(): the events belong to different device types "
                             f"({self.device} and {end_event.device})")
        return float(self.event_base.elapsed_time(end_event.event_base))

    def __repr__(self):
        return f"Event(device={self.device}, {self.event_base!r})"


def current_stream(device=None) -> Stream:
    """The stream work on `device` (default: the current device) is queued on now."""
    place = _place_of(device, "current_stream(): device")
    return Stream(place, stream_base=place.backend.current_stream(place.index))


def set_stream(stream: Stream) -> Stream:
    """Make `stream` the current stream of its device; returns the stream that was current."""
    if not isinstance(stream, Stream):
        raise TypeError(f"set_stream(): expected a Stream, got {type(stream).__name__}")
    place = stream.device
    previous = current_stream(place)
    place.backend.set_stream(stream.stream_base, place.index)
    return previous


class stream_guard:  # noqa: N801 - Paddle's name
    """`with stream_guard(stream):` queues the work in the block on `stream` (None: changes nothing). When
    the stream's device is not the current device, the block also runs with it as the current device."""

    def __init__(self, stream: Stream | None = None):
        if stream is not None and not isinstance(stream, Stream):
            raise TypeError(f"stream_guard(): expected a Stream or None, got {type(stream).__name__}")
        self.stream = stream
        self._previous_place = self._previous_stream = None

    def __enter__(self):
        if self.stream is None:
            return None
        place = self.stream.device
        if default_place() is not place:
            self._previous_place = default_place()
            set_device(place)
        self._previous_stream = set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc):
        if self.stream is None:
            return
        set_stream(self._previous_stream)
        if self._previous_place is not None:
            set_device(self._previous_place)
            self._previous_place = None


# Paddle's paddle.device.cuda namespace, a module of its own so `import oarlock.device.cuda` works too.
from oarlock import device_cuda as cuda  # noqa: E402

sys.modules.setdefault(__name__ + ".cuda", cuda)
