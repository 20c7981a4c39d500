"""Devices: Place objects, device-string parsing, the backend interface, and the default device.

A backend (registered by a plugin) supplies one device type: its array module
`xp`, host copies, random generators and memory statistics. The core knows
only the interface below; "cpu", "gpu" and every custom device come from
plugins. "cuda" is an alias of "gpu", and a CUDA-like device names "gpu" as
its parent so kernel lookup can fall back to the GPU kernels.
"""

from __future__ import annotations

import re

__all__ = [
    "Place", "Backend", "set_device", "get_device", "CPUPlace", "CUDAPlace", "CustomPlace",
    "get_all_device_type", "get_all_custom_device_type", "get_available_custom_device",
    "is_compiled_with_custom_device", "is_compiled_with_cuda", "device_count",
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
    concrete array classes it holds).
    """

    type: str = ""
    parent: str | None = None
    xp = None
    array_types: tuple = ()

    def device_count(self) -> int:
        return 1

    def asarray(self, data, dtype=None, index: int = 0):
        """Place host data (numpy array or nested lists) on device `index`."""
        raise NotImplementedError

    def to_host(self, array):
        """Copy an array of this backend to a numpy array."""
        raise NotImplementedError

    def generator(self, index: int = 0):
        """The random generator of device `index` (numpy.random.Generator-like)."""
        raise NotImplementedError

    def seed(self, seed: int) -> None:
        raise NotImplementedError

    def get_rng_state(self, index: int = 0):
        raise NotImplementedError

    def set_rng_state(self, state, index: int = 0) -> None:
        raise NotImplementedError

    def memory_allocated(self, index: int = 0) -> int:
        return 0

    def max_memory_allocated(self, index: int = 0) -> int:
        return 0

    def reset_max_memory_allocated(self, index: int = 0) -> None:
        pass

    def synchronize(self, index: int = 0) -> None:
        pass


_PLACE_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?::(\d+))?$")


def split_device_string(text: str) -> tuple[str, int | None]:
    """'gpu:1' -> ('gpu', 1), 'cuda' -> ('gpu', None); raise on malformed text."""
    match = _PLACE_RE.match(text.strip())
    if match is None:
        raise ValueError(f"device {text!r} is malformed; expected 'cpu', 'gpu', 'gpu:N', 'cuda:N' or 'type:N'")
    name, index = match.group(1).lower(), match.group(2)
    return _DEVICE_ALIASES.get(name, name), None if index is None else int(index)


def _registry():
    from oarlock._registry import default_registry
    return default_registry()


_default_place: Place | None = None


def set_device(device) -> Place:
    """Make `device` ("cpu", "gpu:1", "cuda:0", "name:N" or a Place) the default for new tensors."""
    global _default_place
    _default_place = _registry().parse_place(device, what="set_device(): device")
    return _default_place


def get_device() -> str:
    """The default device as a string, e.g. 'cpu' or 'gpu:0'."""
    return str(default_place())


def default_place() -> Place:
    global _default_place
    if _default_place is None:
        _default_place = _registry().parse_place("cpu")
    return _default_place


def get_all_device_type() -> list[str]:
    return sorted(_registry().backends)


def get_all_custom_device_type() -> list[str]:
    return sorted(t for t in _registry().backends if t not in _BUILTIN_TYPES)


def get_available_custom_device() -> list[str]:
    reg = _registry()
    return [f"{t}:{i}" for t in get_all_custom_device_type() for i in range(reg.backends[t].device_count())]


def is_compiled_with_custom_device(device_type: str) -> bool:
    return device_type in get_all_custom_device_type()


def is_compiled_with_cuda() -> bool:
    return "gpu" in _registry().backends


def device_count(device_type: str = "gpu") -> int:
    backend = _registry().backends.get(_DEVICE_ALIASES.get(device_type, device_type))
    return 0 if backend is None else backend.device_count()


def _place_of(device, what):
    return default_place() if device is None else _registry().parse_place(device, what=what)


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


def synchronize(device=None) -> None:
    place = _place_of(device, "synchronize(): device")
    place.backend.synchronize(place.index)
