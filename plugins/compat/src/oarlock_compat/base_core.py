"""The names of `paddle.base.core` (also `paddle.framework.core`) that dygraph model code touches:
`core.eager.Tensor` (the Tensor class), `core.DataType` (the dtype enumeration, whose members are the
dtypes themselves, as `paddle.float32 == core.DataType.FLOAT32` in Paddle 3.2), the places and the
`is_compiled_with_*` queries, answered from the device plugins that are installed."""

from __future__ import annotations

import oarlock
from oarlock_compat.places import CUDAPinnedPlace, XPUPlace

# DataType member -> dtype name
_DATA_TYPES = {"BOOL": "bool", "UINT8": "uint8", "INT8": "int8", "INT16": "int16", "INT32": "int32",
               "INT64": "int64", "FLOAT16": "float16", "BFLOAT16": "bfloat16", "FLOAT32": "float32",
               "FLOAT64": "float64", "COMPLEX64": "complex64", "COMPLEX128": "complex128",
               "FLOAT8_E4M3FN": "float8_e4m3fn", "FLOAT8_E5M2": "float8_e5m2"}

DataType = type("DataType", (), {
    "__doc__": "Paddle's dtype enumeration (core.DataType.FLOAT32 ...): each member is the oarlock dtype.",
    **{member: oarlock.dtypes.convert_dtype(name) for member, name in _DATA_TYPES.items()}})


is_compiled_with_cuda = oarlock.device.is_compiled_with_cuda
is_compiled_with_xpu = oarlock.device.is_compiled_with_xpu
is_compiled_with_rocm = oarlock.device.is_compiled_with_rocm
is_compiled_with_custom_device = oarlock.device.is_compiled_with_custom_device
is_compiled_with_distribute = oarlock.device.is_compiled_with_distribute


# name -> object, for both core namespaces; the places are functions returning interned places
NAMES = {"DataType": DataType, "is_compiled_with_cuda": is_compiled_with_cuda,
         "is_compiled_with_xpu": is_compiled_with_xpu, "is_compiled_with_rocm": is_compiled_with_rocm,
         "is_compiled_with_custom_device": is_compiled_with_custom_device,
         "is_compiled_with_distribute": is_compiled_with_distribute,
         "CPUPlace": oarlock.CPUPlace, "CUDAPlace": oarlock.CUDAPlace, "CUDAPinnedPlace": CUDAPinnedPlace,
         "XPUPlace": XPUPlace, "CustomPlace": oarlock.CustomPlace, "Place": oarlock.Place}
