"""`paddle.finfo` / `paddle.iinfo`: the numeric limits of a floating or integer dtype, with Paddle 3.2's
fields (finfo: min, max, eps, resolution, smallest_normal, tiny, bits, dtype; iinfo: min, max, bits, dtype),
read from numpy's (and ml_dtypes' for bfloat16) own tables. complex dtypes give their component's limits."""

from __future__ import annotations

import numpy as np

import oarlock

_FINFO = ("float16", "bfloat16", "float32", "float64")
_COMPLEX_PART = {"complex64": "float32", "complex128": "float64"}
_IINFO = ("int8", "int16", "int32", "int64", "uint8")


def _dtype_name(dtype, what, accepted):
    try:
        name = oarlock.dtypes.convert_dtype(dtype).name
    except (TypeError, ValueError) as err:
        raise TypeError(f"oarlock.{what}(): dtype must be one of {', '.join(accepted)}, got {dtype!r} ({err})") \
            from None
    return name


class finfo:  # noqa: N801  (Paddle's spelling)
    """finfo(dtype): the limits of a floating dtype (bfloat16, float16, float32, float64; complex64 and
    complex128 give their float component's)."""

    def __init__(self, dtype):
        name = _dtype_name(dtype, "finfo", _FINFO + tuple(_COMPLEX_PART))
        name = _COMPLEX_PART.get(name, name)
        if name not in _FINFO:
            raise ValueError(f"oarlock.finfo(): dtype must be one of {', '.join(_FINFO + tuple(_COMPLEX_PART))}, "
                             f"got {name}")
        info = np.finfo(oarlock.dtypes.convert_dtype(name).np)
        self.min, self.max, self.eps = float(info.min), float(info.max), float(info.eps)
        self.resolution = 10.0 ** -int(info.precision)   # numpy's definition, exact (not rounded to the dtype)
        self.smallest_normal = self.tiny = float(info.smallest_normal)
        self.bits, self.dtype = int(info.bits), name

    def __repr__(self):
        return (f"paddle.finfo(min={self.min:g}, max={self.max:g}, eps={self.eps:g}, resolution={self.resolution:g}, "
                f"smallest_normal={self.smallest_normal:g}, tiny={self.tiny:g}, bits={self.bits}, dtype={self.dtype})")


class iinfo:  # noqa: N801  (Paddle's spelling)
    """iinfo(dtype): the limits of an integer dtype (int8, int16, int32, int64, uint8)."""

    def __init__(self, dtype):
        name = _dtype_name(dtype, "iinfo", _IINFO)
        if name not in _IINFO:
            raise ValueError(f"oarlock.iinfo(): dtype must be one of {', '.join(_IINFO)}, got {name}")
        info = np.iinfo(name)
        self.min, self.max, self.bits, self.dtype = int(info.min), int(info.max), int(info.bits), name

    def __repr__(self):
        return f"paddle.iinfo(min={self.min}, max={self.max}, bits={self.bits}, dtype={self.dtype})"
