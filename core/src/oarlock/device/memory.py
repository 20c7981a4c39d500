"""Memory statistics of any device (Paddle's paddle.device memory functions): each asks the backend of the
place it is given, or of the current device."""

from __future__ import annotations

from oarlock.device.backend import DeviceProperties
from oarlock.device.places import _place_of, _registry


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


def host_memory_allocated(device=None) -> int:
    """Bytes of `device`'s host pool in use now (a GPU's pinned host memory; the cpu's separate host pool):
    tensors moved there by offloading count here and not in memory_allocated."""
    place = _place_of(device, "host_memory_allocated(): device")
    return place.backend.host_memory_allocated(place.index)


def max_host_memory_allocated(device=None) -> int:
    """Peak of host_memory_allocated since start or the last reset_max_host_memory_allocated."""
    place = _place_of(device, "max_host_memory_allocated(): device")
    return place.backend.max_host_memory_allocated(place.index)


def reset_max_host_memory_allocated(device=None) -> None:
    place = _place_of(device, "reset_max_host_memory_allocated(): device")
    place.backend.reset_max_host_memory_allocated(place.index)


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


def get_device_properties(device=None) -> DeviceProperties:
    place = _place_of(device, "get_device_properties(): device")
    return place.backend.device_properties(place.index)
