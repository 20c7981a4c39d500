"""oarlock.device.cuda: Paddle's paddle.device.cuda names over the "gpu" device type.

Each function takes `device` as None (the current device when it is a GPU, else gpu:0), an int index,
"gpu:N"/"cuda:N" or a Place; a device of another type is refused. The "gpu" type comes from the
oarlock-cuda plugin: without it, or without a GPU it can reach, device_count() is 0, empty_cache()
does nothing, and every other call raises an error that says why the GPU cannot be used.
"""

from __future__ import annotations

from oarlock.device.places import _registry, default_place
from oarlock.device.streams import Event as _Event
from oarlock.device.streams import Stream as _Stream
from oarlock.device.streams import stream_guard

__all__ = [
    "Stream", "Event", "current_stream", "synchronize", "stream_guard", "device_count", "empty_cache",
    "memory_allocated", "max_memory_allocated", "reset_max_memory_allocated", "memory_reserved",
    "max_memory_reserved", "reset_max_memory_reserved", "get_device_properties", "get_device_name",
    "get_device_capability",
]


def _is_gpu(place) -> bool:
    """Whether `place` is a gpu or a CUDA-like device derived from "gpu"."""
    return "gpu" in _registry().parent_chain(place.type)


def _gpu_place(device, what: str):
    if device is None:
        current = default_place()
        device = current if _is_gpu(current) else "gpu:0"
    elif isinstance(device, int) and not isinstance(device, bool):
        device = f"gpu:{device}"
    place = _registry().parse_place(device, what=what)
    if not _is_gpu(place):
        raise ValueError(f"{what}: oarlock.device.cuda works on gpu devices (None, an int, 'gpu:N', 'cuda:N' or "
                         f"CUDAPlace), got {place}; oarlock.device.{what.split('(')[0]} takes any device")
    return place


class Stream(_Stream):
    """A CUDA stream: Stream(device=None, priority=2), see oarlock.device.Stream."""

    def __init__(self, device=None, priority: int = 2, stream_base=None):
        super().__init__(_gpu_place(device, "Stream(): device"), priority, stream_base)


class Event(_Event):
    """A CUDA event on the current GPU: Event(enable_timing=False, blocking=False, interprocess=False)."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        super().__init__(_gpu_place(None, "Event(): device"), enable_timing, blocking, interprocess)


def current_stream(device=None) -> Stream:
    place = _gpu_place(device, "current_stream(): device")
    return Stream(place, stream_base=place.backend.current_stream(place.index))


def synchronize(device=None) -> None:
    place = _gpu_place(device, "synchronize(): device")
    place.backend.synchronize(place.index)


def device_count() -> int:
    """How many GPUs can be used (0 without oarlock-cuda, cupy or a reachable GPU)."""
    backend = _registry().backends.get("gpu")
    return 0 if backend is None else backend.device_count()


def empty_cache() -> None:
    """Give the GPU memory cached by the memory pool (unused by any tensor) back to the driver."""
    backend = _registry().backends.get("gpu")
    if backend is not None:
        backend.empty_cache()


def memory_allocated(device=None) -> int:
    """Bytes of GPU memory that tensors (and any other CuPy arrays) use now on `device`."""
    place = _gpu_place(device, "memory_allocated(): device")
    return place.backend.memory_allocated(place.index)


def max_memory_allocated(device=None) -> int:
    """Peak of memory_allocated since the process started or the last reset_max_memory_allocated."""
    place = _gpu_place(device, "max_memory_allocated(): device")
    return place.backend.max_memory_allocated(place.index)


def reset_max_memory_allocated(device=None) -> None:
    place = _gpu_place(device, "reset_max_memory_allocated(): device")
    place.backend.reset_max_memory_allocated(place.index)


def memory_reserved(device=None) -> int:
    """Bytes the memory pool holds on `device`: in use plus cached for reuse."""
    place = _gpu_place(device, "memory_reserved(): device")
    return place.backend.memory_reserved(place.index)


def max_memory_reserved(device=None) -> int:
    place = _gpu_place(device, "max_memory_reserved(): device")
    return place.backend.max_memory_reserved(place.index)


def reset_max_memory_reserved(device=None) -> None:
    place = _gpu_place(device, "reset_max_memory_reserved(): device")
    place.backend.reset_max_memory_reserved(place.index)


def get_device_properties(device=None):
    """name, major, minor, total_memory (bytes) and multi_processor_count of a GPU."""
    place = _gpu_place(device, "get_device_properties(): device")
    return place.backend.device_properties(place.index)


def get_device_name(device=None) -> str:
    return get_device_properties(device).name


def get_device_capability(device=None) -> tuple[int, int]:
    properties = get_device_properties(device)
    return properties.major, properties.minor
