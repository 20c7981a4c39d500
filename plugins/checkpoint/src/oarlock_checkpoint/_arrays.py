"""Host arrays for the formats: Tensors and numpy arrays to little-endian bytes and back, and dtype
names that do not depend on numpy's or oarlock's internals (oarlock's names: "bfloat16")."""

from __future__ import annotations

import sys

import numpy as np

import oarlock
from oarlock import Tensor
from oarlock.dtypes import all_dtypes

OARLOCK_NAME = {dt.np: dt.name for dt in all_dtypes}   # numpy dtype -> oarlock dtype name
NUMPY_DTYPE = {dt.name: dt.np for dt in all_dtypes}    # oarlock dtype name -> numpy dtype
_BIG_ENDIAN_HOST = sys.byteorder == "big"


def host_array(value) -> np.ndarray:
    """A C-contiguous, native-byte-order numpy array with the values of a Tensor or numpy array."""
    array = value.numpy() if isinstance(value, Tensor) else np.asarray(value)
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    # not np.ascontiguousarray: it turns 0-d arrays into 1-d ones
    return array if array.flags.c_contiguous else array.copy(order="C")


def little_endian_bytes(array: np.ndarray) -> bytes:
    """The raw data in little-endian order, as both formats store it."""
    if _BIG_ENDIAN_HOST and array.dtype.itemsize > 1:
        array = array.byteswap()
    return array.tobytes()


def from_little_endian(buffer, dtype: np.dtype, shape) -> np.ndarray:
    """A native array over `buffer` (bytes or a writable uint8 array) holding little-endian data."""
    array = np.frombuffer(buffer, dtype=dtype).reshape(shape)
    if _BIG_ENDIAN_HOST and dtype.itemsize > 1:
        array = array.byteswap()
    return array


def cpu_tensor(array: np.ndarray, name: str | None = None) -> Tensor:
    """A cpu Tensor (a copy) with the dtype of `array`, as Paddle loads tensors: stop_gradient=True."""
    tensor = oarlock.to_tensor(array, place="cpu")
    if name is not None:
        tensor.name = name
    return tensor
