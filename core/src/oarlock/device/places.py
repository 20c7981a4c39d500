"""Places: Place objects and device-string parsing, the default device, and which devices exist.

A Place is a device type and an index ("cpu", "gpu:1", "npu:0"), interned so that places compare with
`is`. "cuda" is an alias of "gpu". The device types themselves come from plugins (a Backend each, see
oarlock.device.backend); `_registry()` is the registry that holds them.
"""

from __future__ import annotations

import contextlib
import re

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
            # setdefault, not a store: two threads making the first Place of a key at once must both
            # get the one kept (places compare with `is`)
            place = cls._interned.setdefault(key, place)
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


def is_compiled_with_xpu() -> bool:
    """Whether a plugin provides the "xpu" device type."""
    return "xpu" in _registry().backends


def is_compiled_with_rocm() -> bool:
    """False: no oarlock device plugin is built on ROCm (Paddle's question about its own build)."""
    return False


def is_compiled_with_ipu() -> bool:
    """False: no oarlock device plugin targets Graphcore IPUs."""
    return False


def is_compiled_with_cinn() -> bool:
    """False: oarlock has no CINN compiler (code runs eagerly)."""
    return False


def is_compiled_with_distribute() -> bool:
    """Whether a plugin provides a collective-communication backend (oarlock.distributed can run)."""
    return bool(_registry().comms)


def get_cudnn_version() -> int | None:
    """None: oarlock's GPU plugin does not use cuDNN (Paddle answers None without a cuDNN build too)."""
    return None


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
