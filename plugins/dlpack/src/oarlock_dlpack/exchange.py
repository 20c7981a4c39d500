"""to_dlpack / from_dlpack as paddle.utils.dlpack has them, over oarlock's backends.

Host tensors: to_dlpack makes the capsule itself (capsule.export), so every dtype goes; from_dlpack lets
numpy read the protocol where it can (streams, versions, read-only flags) and reads the capsule itself where
numpy cannot (bfloat16, float8, a bare capsule). Device tensors (CuPy's "gpu"): the backend whose DLPack
device type matches reads them (Backend.from_dlpack), and CuPy writes them."""

from __future__ import annotations

import enum

import numpy as np
from oarlock import Tensor
from oarlock.plugin_api import Place, array_of, default_registry, wrap

from oarlock_dlpack import capsule as _capsule


class DLDeviceType(enum.IntEnum):
    """DLPack's device codes (Paddle's paddle.utils.dlpack.DLDeviceType)."""

    kDLCPU = 1
    kDLCUDA = 2
    kDLCUDAHost = 3
    kDLOpenCL = 4
    kDLVulkan = 7
    kDLMetal = 8
    kDLVPI = 9
    kDLROCM = 10
    kDLExtDev = 12
    kDLOneAPI = 14


_HOST = (DLDeviceType.kDLCPU, DLDeviceType.kDLCUDAHost)


def to_dlpack(x):
    """A DLPack capsule ("dltensor") sharing `x`'s memory: a consumer (torch.from_dlpack, cupy.from_dlpack,
    oarlock.utils.dlpack.from_dlpack) sees and makes writes in place."""
    if not isinstance(x, Tensor):
        raise TypeError(f"oarlock.utils.dlpack.to_dlpack(): argument 'x' must be an oarlock.Tensor, got "
                        f"{type(x).__name__}")
    array = array_of(x)
    if isinstance(array, np.ndarray):
        return _capsule.export(array)
    if hasattr(array, "toDlpack"):    # CuPy
        return array.toDlpack()
    return array.__dlpack__()


def from_dlpack(dlpack):
    """A Tensor sharing memory with `dlpack`: an object with __dlpack__/__dlpack_device__ (a numpy, torch or
    CuPy array), a DLPack capsule (consumed), or a numpy array of any dtype (ml_dtypes' bfloat16 too)."""
    if isinstance(dlpack, Tensor):
        return dlpack
    if isinstance(dlpack, np.ndarray):   # the CPU backend's own array type: shared as it is
        return wrap(dlpack, _place(DLDeviceType.kDLCPU, 0))
    if hasattr(dlpack, "__dlpack__"):
        device_type, device_id = dlpack.__dlpack_device__()
        if device_type in _HOST:
            try:
                array = np.from_dlpack(dlpack)
            except (BufferError, RuntimeError, TypeError):   # numpy refuses bfloat16/float8: read the capsule
                array = _capsule.import_(dlpack.__dlpack__())
            return wrap(array, _place(DLDeviceType.kDLCPU, 0))
        return _from_device(dlpack, device_type, device_id)
    if type(dlpack).__name__ != "PyCapsule":
        raise TypeError(f"oarlock.utils.dlpack.from_dlpack(): argument 'dlpack' must be a DLPack capsule or an "
                        f"object with __dlpack__ (numpy, torch, CuPy arrays), got {type(dlpack).__name__}")
    device_type, device_id = _capsule.capsule_device(dlpack)
    if device_type in _HOST:
        return wrap(_capsule.import_(dlpack), _place(DLDeviceType.kDLCPU, 0))
    return _from_device(dlpack, device_type, device_id)


def _backend_for(device_type: int):
    for backend in default_registry().backends.values():
        if backend.dlpack_device_type == device_type:
            return backend
    raise ValueError(f"oarlock.utils.dlpack.from_dlpack(): no installed oarlock backend takes DLPack device type "
                     f"{device_type} ({_name(device_type)}); install the plugin of that device (oarlock-cuda for "
                     f"kDLCUDA)")


def _place(device_type: int, device_id: int) -> Place:
    backend = _backend_for(device_type)
    return default_registry().parse_place(Place(backend.type, device_id))


def _from_device(obj, device_type: int, device_id: int) -> Tensor:
    backend = _backend_for(device_type)
    return wrap(backend.from_dlpack(obj), _place(device_type, device_id))


def _name(device_type: int) -> str:
    try:
        return DLDeviceType(device_type).name
    except ValueError:
        return "unknown"
