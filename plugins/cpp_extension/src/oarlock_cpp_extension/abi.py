"""The Python side of the C ABI in csrc/oarlock_op_abi.cc: its structs, the dtype and device codes of
include/paddle/ext/tensor.h, and the calls that pass arrays to a compiled kernel and wrap what it returns.

Nothing is copied either way: an input's pointer is its array's (a non-contiguous array is made contiguous
first: the C++ Tensor has no strides), and an output array is a view of the memory the library allocated,
which it frees when that array is garbage-collected (a finalizer releases the storage handle)."""

from __future__ import annotations

import ctypes
import weakref

import ml_dtypes
import numpy as np


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("shape", ctypes.POINTER(ctypes.c_int64)), ("ndim", ctypes.c_int32),
                ("dtype", ctypes.c_int32), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                ("input_index", ctypes.c_int32)]


class Attr(ctypes.Structure):
    _fields_ = [("i", ctypes.c_int64), ("f", ctypes.c_double), ("s", ctypes.c_char_p),
                ("ints", ctypes.POINTER(ctypes.c_int64)), ("floats", ctypes.POINTER(ctypes.c_double)),
                ("strings", ctypes.POINTER(ctypes.c_char_p)), ("length", ctypes.c_int64)]


# paddle::DataType codes <-> numpy dtypes (ml_dtypes supplies bfloat16)
DTYPES = {1: np.dtype(np.bool_), 2: np.dtype(np.int8), 3: np.dtype(np.uint8), 4: np.dtype(np.int16),
          5: np.dtype(np.int32), 6: np.dtype(np.int64), 7: np.dtype(np.float16),
          8: np.dtype(ml_dtypes.bfloat16), 9: np.dtype(np.float32), 10: np.dtype(np.float64),
          11: np.dtype(np.complex64), 12: np.dtype(np.complex128)}
CODES = {dtype: code for code, dtype in DTYPES.items()}
CPU, GPU = 1, 2   # paddle::AllocationType


def bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    """Declare the ABI's signatures on a loaded library."""
    lib.oarlock_last_error.restype = ctypes.c_char_p
    lib.oarlock_op_count.restype = ctypes.c_int
    lib.oarlock_built_with_cuda.restype = ctypes.c_int
    lib.oarlock_op_describe.restype = ctypes.c_char_p
    lib.oarlock_op_describe.argtypes = [ctypes.c_int]
    lib.oarlock_op_run.restype = ctypes.c_void_p
    lib.oarlock_op_run.argtypes = [ctypes.c_int, ctypes.POINTER(Tensor), ctypes.POINTER(ctypes.c_int32),
                                   ctypes.c_int, ctypes.POINTER(Attr), ctypes.c_int]
    lib.oarlock_result_count.restype = ctypes.c_int
    lib.oarlock_result_count.argtypes = [ctypes.c_void_p]
    lib.oarlock_result_get.restype = ctypes.c_void_p
    lib.oarlock_result_get.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(Tensor)]
    lib.oarlock_result_free.argtypes = [ctypes.c_void_p]
    lib.oarlock_storage_release.argtypes = [ctypes.c_void_p]
    return lib


def describe(lib: ctypes.CDLL) -> list[dict]:
    """Every op the library declared: {"name", "level", "kernel", "inputs", "outputs", "attrs", "inplace"}."""
    metas = []
    for index in range(lib.oarlock_op_count()):
        meta = {"index": index}
        for line in lib.oarlock_op_describe(index).decode().splitlines():
            key, *values = line.split("\t")
            meta[key] = values
        meta["name"], meta["level"], meta["kernel"] = meta["name"][0], int(meta["level"][0]), meta["kernel"] == ["1"]
        pairs = meta["inplace"]
        meta["inplace"] = dict(zip(pairs[::2], pairs[1::2]))
        metas.append(meta)
    return metas


def _device_of(array, xp) -> tuple[int, int, int]:
    """(data pointer, device type code, device id) of a numpy or CuPy array."""
    if isinstance(array, np.ndarray):
        return array.ctypes.data, CPU, 0
    return array.data.ptr, GPU, array.device.id


def run(lib, index: int, op: str, groups: list, attrs: list, xp):
    """Run op `index` of `lib` on `groups` (one list of arrays per declared input; [] for a None optional
    input) with `attrs` (Attr structs, kept alive by the caller); returns the output arrays."""
    flat = [xp.ascontiguousarray(a) for group in groups for a in group]
    descs = (Tensor * max(len(flat), 1))()
    shapes = []
    for desc, array in zip(descs, flat):
        code = CODES.get(array.dtype)
        if code is None:
            raise TypeError(f"{op}(): a custom C++ operator cannot take dtype {array.dtype}; it takes "
                            f"{', '.join(str(d) for d in DTYPES.values())}")
        shape = (ctypes.c_int64 * max(array.ndim, 1))(*array.shape)
        shapes.append(shape)
        desc.data, desc.device_type, desc.device_id = _device_of(array, xp)
        desc.shape, desc.ndim, desc.dtype = shape, array.ndim, code
    counts = (ctypes.c_int32 * max(len(groups), 1))(*[len(g) for g in groups])
    attr_array = (Attr * max(len(attrs), 1))(*attrs)
    handle = lib.oarlock_op_run(index, descs, counts, len(groups), attr_array, len(attrs))
    if not handle:
        raise RuntimeError(f"{op}(): the C++ kernel failed: {lib.oarlock_last_error().decode(errors='replace')}")
    try:
        return [_output(lib, handle, i, flat, op, xp) for i in range(lib.oarlock_result_count(handle))]
    finally:
        lib.oarlock_result_free(handle)


def _output(lib, handle, i: int, inputs: list, op: str, xp):
    desc = Tensor()
    storage = lib.oarlock_result_get(handle, i, ctypes.byref(desc))
    shape = tuple(desc.shape[k] for k in range(desc.ndim))
    if desc.input_index >= 0:   # an input returned as is or written in place: that very array
        source = inputs[desc.input_index]
        return source if source.shape == shape else source.reshape(shape)
    if not storage:
        raise RuntimeError(f"{op}(): the C++ kernel returned output {i} without memory (an undefined "
                           f"paddle::Tensor); allocate it with paddle::empty or mutable_data")
    dtype = DTYPES[desc.dtype]
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    release = lib.oarlock_storage_release
    if desc.device_type == CPU:
        buffer = (ctypes.c_char * max(nbytes, 1)).from_address(desc.data)
        weakref.finalize(buffer, release, storage)
        return np.frombuffer(buffer, dtype=dtype, count=nbytes // dtype.itemsize).reshape(shape)
    return _gpu_output(xp, desc, shape, dtype, nbytes, release, storage)


def _gpu_output(xp, desc, shape, dtype, nbytes, release, storage):
    """A CuPy array over device memory the library allocated (freed with the array's last reference)."""
    import cupy   # only reached when a CUDA-built library returns a GPU tensor
    owner = _Owner(release, storage)
    memory = cupy.cuda.UnownedMemory(desc.data, max(nbytes, 1), owner, desc.device_id)
    return cupy.ndarray(shape, dtype=dtype, memptr=cupy.cuda.MemoryPointer(memory, 0))


class _Owner:
    """Releases a storage handle when garbage-collected."""

    def __init__(self, release, storage):
        self._finalizer = weakref.finalize(self, release, storage)
