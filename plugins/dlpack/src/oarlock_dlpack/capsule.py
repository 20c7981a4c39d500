"""DLPack capsules made and read with ctypes, for host arrays of any dtype oarlock has.

numpy exchanges DLPack only for integer, float and complex dtypes: it refuses the bfloat16 and float8 arrays
(ml_dtypes) that oarlock's CPU tensors use. These two functions carry them (and every other dtype) through
the legacy "dltensor" capsule of the DLPack spec (dlpack.h, DLManagedTensor), without copying:

- export(array) -> capsule: the capsule owns a DLManagedTensor pointing into `array`, which stays alive until
  the consumer calls the tensor's deleter (or the capsule is dropped unused).
- import_(capsule) -> ndarray: a numpy array over the producer's memory; the producer's deleter runs when
  that array (and every view of it) is gone. The capsule is renamed "used_dltensor", as the spec asks.
"""

from __future__ import annotations

import ctypes
import weakref

import ml_dtypes
import numpy as np

KDL_CPU = 1
NAME, USED_NAME = b"dltensor", b"used_dltensor"

# DLDataTypeCode: kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLComplex 5, kDLBool 6, and DLPack 1.1's
# float8 codes (kDLFloat8_e4m3fn 10, kDLFloat8_e5m2 12)
_CODES = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}
_SPECIAL = {np.dtype(ml_dtypes.bfloat16): 4, np.dtype(ml_dtypes.float8_e4m3fn): 10,
            np.dtype(ml_dtypes.float8_e5m2): 12}
_FROM_SPECIAL = {(code, dtype.itemsize * 8): dtype for dtype, code in _SPECIAL.items()}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]

_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]

# the destructor sees the capsule while it is being freed: as a raw pointer (a py_object would revive it)
_raw_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", _api))
_raw_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer", _api))

# exported tensors alive in some consumer: DLManagedTensor address -> (struct, shape, strides, array)
_LIVE: dict[int, tuple] = {}


def dtype_code(dtype: np.dtype) -> tuple[int, int]:
    """(DLDataTypeCode, bits) of a numpy dtype; refuses one DLPack cannot describe."""
    dtype = np.dtype(dtype)
    if dtype in _SPECIAL:
        return _SPECIAL[dtype], dtype.itemsize * 8
    if dtype.kind in _CODES and dtype.isnative:
        return _CODES[dtype.kind], dtype.itemsize * 8
    raise BufferError(f"DLPack cannot carry dtype {dtype}")


def numpy_dtype(code: int, bits: int, lanes: int) -> np.dtype:
    if lanes != 1:
        raise BufferError(f"DLPack tensor with {lanes} lanes per element: only 1 is supported")
    if (code, bits) in _FROM_SPECIAL:
        return _FROM_SPECIAL[(code, bits)]
    kind = {0: "i", 1: "u", 2: "f", 5: "c", 6: "b"}.get(code)
    if kind is None or (kind == "b" and bits != 8):
        raise BufferError(f"DLPack dtype code {code} with {bits} bits has no numpy dtype here")
    return np.dtype("?" if kind == "b" else f"{kind}{bits // 8}")


@DELETER
def _delete_exported(managed):
    _LIVE.pop(ctypes.addressof(managed.contents), None)


@ctypes.PYFUNCTYPE(None, ctypes.c_void_p)
def _capsule_destructor(capsule):
    # dropped without a consumer: release the tensor ourselves (a consumer renames it "used_dltensor")
    if _raw_is_valid(capsule, NAME):
        _LIVE.pop(_raw_get_pointer(capsule, NAME), None)


def export(array: np.ndarray):
    """A "dltensor" capsule over host `array` (any dtype DLPack can describe), sharing its memory."""
    code, bits = dtype_code(array.dtype)
    if not array.flags.writeable:   # a legacy capsule cannot say "read-only", and consumers may write
        raise BufferError("DLPack: cannot export a read-only array (its consumer could write to it); copy it first")
    itemsize = array.dtype.itemsize
    if any(s % itemsize for s in array.strides):
        raise BufferError(f"DLPack needs strides in whole elements, got {array.strides} for itemsize {itemsize}")
    ndim = array.ndim
    shape = (ctypes.c_int64 * max(ndim, 1))(*array.shape)
    strides = (ctypes.c_int64 * max(ndim, 1))(*[s // itemsize for s in array.strides])
    managed = DLManagedTensor()
    t = managed.dl_tensor
    t.data = array.ctypes.data if array.size else None
    t.device = DLDevice(KDL_CPU, 0)
    t.ndim, t.dtype, t.byte_offset = ndim, DLDataType(code, bits, 1), 0
    t.shape, t.strides = shape, strides
    managed.deleter = _delete_exported
    address = ctypes.addressof(managed)
    _LIVE[address] = (managed, shape, strides, array)
    return _api.PyCapsule_New(address, NAME, ctypes.cast(_capsule_destructor, ctypes.c_void_p))


def capsule_device(capsule) -> tuple[int, int]:
    """(device type, device id) of an unused "dltensor" capsule."""
    t = _managed(capsule).dl_tensor
    return t.device.device_type, t.device.device_id


def _managed(capsule) -> DLManagedTensor:
    if not _api.PyCapsule_IsValid(capsule, NAME):
        name = _api.PyCapsule_GetName(capsule) if type(capsule).__name__ == "PyCapsule" else None
        raise ValueError(f"from_dlpack(): expected an unused DLPack capsule named 'dltensor', got "
                         f"{type(capsule).__name__}{f' named {name!r}' if name else ''} (a capsule is consumed once)")
    return DLManagedTensor.from_address(_api.PyCapsule_GetPointer(capsule, NAME))


def import_(capsule) -> np.ndarray:
    """A numpy array sharing the memory of a host "dltensor" capsule; consumes the capsule."""
    managed = _managed(capsule)
    t = managed.dl_tensor
    if t.device.device_type != KDL_CPU:
        raise BufferError(f"from_dlpack(): this capsule is on DLPack device type {t.device.device_type}; "
                          f"host arrays are device type {KDL_CPU}")
    dtype = numpy_dtype(t.dtype.code, t.dtype.bits, t.dtype.lanes)
    shape = tuple(t.shape[i] for i in range(t.ndim))
    if t.strides:
        strides = tuple(t.strides[i] for i in range(t.ndim))
    else:   # NULL strides: compact row-major
        strides = tuple(int(np.prod(shape[i + 1:], dtype=np.int64)) for i in range(t.ndim))
    # the bytes the array may touch: from the lowest to the highest element (negative strides included)
    low = sum(min(0, s * (n - 1)) for s, n in zip(strides, shape) if n > 0)
    high = sum(max(0, s * (n - 1)) for s, n in zip(strides, shape) if n > 0)
    span = 0 if 0 in shape else (high - low + 1) * dtype.itemsize
    _api.PyCapsule_SetName(capsule, USED_NAME)
    address = ctypes.addressof(managed)
    deleter = managed.deleter
    base = (t.data or 0) + t.byte_offset + low * dtype.itemsize
    buffer = (ctypes.c_char * max(span, 1)).from_address(base) if span else bytearray(1)
    weakref.finalize(buffer, _release, deleter, address) if span else _release(deleter, address)
    return np.ndarray(shape, dtype=dtype, buffer=buffer, offset=-low * dtype.itemsize,
                      strides=tuple(s * dtype.itemsize for s in strides))


def _release(deleter, address):
    if deleter:
        deleter(ctypes.cast(address, ctypes.POINTER(DLManagedTensor)))
