"""Paddle's Tensor queries and small helpers that model code calls, as Python over the public API:
top-level `is_tensor`, `numel`, `rank`, `shape`, `is_empty`, `tolist`, `broadcast_shape`,
`is_floating_point`, `is_integer`, `create_parameter`, and the Tensor methods and properties `mT`, `value`,
`contiguous`, `is_contiguous`, `element_size`, `numel`, `data_ptr`, `ndimension`, `strides`/`get_strides`,
`t_`, plus Paddle's private `_md5sum`, `_numel`, `_is_initialized`, `_inplace_version`, `_place_str`,
`_copy_to` (allowed by registry.PADDLE_PRIVATE_NAMES). Results follow Paddle 3.2 (numel and shape are int64
tensors, rank an int32 tensor; strides count elements)."""

from __future__ import annotations

import hashlib
import math

import numpy as np

import oarlock
from oarlock.plugin_api import array_of


def _tensor(x, fn):
    if not isinstance(x, oarlock.Tensor):
        raise TypeError(f"oarlock.{fn}(): x must be an oarlock.Tensor, got {type(x).__name__}")
    return x


def is_tensor(x) -> bool:
    """Whether x is an oarlock.Tensor (a Parameter is one)."""
    return isinstance(x, oarlock.Tensor)


def numel(x, name=None):
    """The number of elements of x, as a 0-d int64 tensor."""
    return oarlock.to_tensor(math.prod(_tensor(x, "numel").shape), dtype="int64")


def rank(input):
    """The number of dimensions of input, as a 0-d int32 tensor."""
    return oarlock.to_tensor(_tensor(input, "rank").ndim, dtype="int32")


def shape(input):
    """The shape of input, as a 1-d int64 tensor."""
    return oarlock.to_tensor(_tensor(input, "shape").shape, dtype="int64")


def is_empty(x, name=None):
    """Whether x has no element, as a 0-d bool tensor."""
    return oarlock.to_tensor(math.prod(_tensor(x, "is_empty").shape) == 0, dtype="bool")


def tolist(x):
    """x's values as nested Python lists (x.tolist())."""
    return _tensor(x, "tolist").tolist()


def broadcast_shape(x_shape, y_shape):
    """The shape two shapes broadcast to (a list), or a ValueError naming both."""
    try:
        return list(np.broadcast_shapes(tuple(x_shape), tuple(y_shape)))
    except ValueError:
        raise ValueError(f"oarlock.broadcast_shape(): shapes {list(x_shape)} and {list(y_shape)} do not "
                         f"broadcast") from None


def is_floating_point(x) -> bool:
    """Whether x's dtype is a floating dtype (float16, bfloat16, float32, float64, float8)."""
    return _tensor(x, "is_floating_point").dtype.is_floating_point


def is_integer(x) -> bool:
    """Whether x's dtype is an integer dtype (bool is not)."""
    return _tensor(x, "is_integer").dtype.is_integer


def create_parameter(shape, dtype, name=None, attr=None, is_bias=False, default_initializer=None):
    """A new trainable parameter of `shape` and `dtype`, initialised by attr.initializer, else
    default_initializer, else zeros for a bias and Xavier-uniform for a weight (Paddle's defaults)."""
    if not isinstance(shape, (list, tuple)):
        raise TypeError(f"oarlock.create_parameter(): shape must be a list or tuple of ints, got "
                        f"{type(shape).__name__}")
    if name is not None and attr is None:
        attr = oarlock.nn.ParamAttr(name=name)
    return oarlock.nn.Layer().create_parameter(list(shape), attr=attr, dtype=dtype, is_bias=is_bias,
                                               default_initializer=default_initializer)


# -- Tensor methods and properties ----------------------------------------------------------------------

def _mT(self):  # noqa: N802
    """The tensor with its last two axes swapped (batched matrix transpose)."""
    if self.ndim < 2:
        raise ValueError(f"Tensor.mT: needs at least 2 dimensions, the tensor has shape {self.shape}")
    return oarlock.transpose(self, [*range(self.ndim - 2), self.ndim - 1, self.ndim - 2])


def value(self):
    """The tensor itself (Paddle 3.2's dygraph `x.value()` is x)."""
    return self


def is_contiguous(self) -> bool:
    """Whether the tensor's elements are laid out densely in row-major order."""
    return bool(array_of(self).flags["C_CONTIGUOUS"])


def contiguous(self):
    """self if it is contiguous, else a contiguous copy (the copy is differentiable)."""
    return self if is_contiguous(self) else self.clone()


def element_size(self) -> int:
    """The size of one element in bytes."""
    return self.dtype.itemsize


def tensor_numel(self):
    """The number of elements, as a 0-d int64 tensor (as paddle.numel)."""
    return numel(self)


def data_ptr(self) -> int:
    """The address of the first element of the tensor's storage."""
    array = array_of(self)
    return int(array.__array_interface__["data"][0]) if isinstance(array, np.ndarray) else int(array.data.ptr)


def ndimension(self) -> int:
    """The number of dimensions (as Tensor.dim())."""
    return self.ndim


def get_strides(self) -> list:
    """The step between consecutive elements along each axis, in elements."""
    array = array_of(self)
    return [s // array.itemsize for s in array.strides]


def t_(self):
    """Transpose a tensor of at most 2 dimensions in place (its shape becomes the reverse); returns it."""
    if self.ndim > 2:
        raise ValueError(f"Tensor.t_(): the tensor must have at most 2 dimensions, got shape {self.shape}")
    return self if self.ndim < 2 else self.transpose_([1, 0])


def _md5sum(self) -> str:
    """The MD5 hex digest of the tensor's bytes in row-major order (Paddle's debugging checksum)."""
    return hashlib.md5(np.ascontiguousarray(self.numpy()).tobytes()).hexdigest()


def _numel(self) -> int:
    """The number of elements, as a Python int."""
    return math.prod(self.shape)


def _is_initialized(self) -> bool:
    """True: every oarlock tensor holds storage."""
    return True


def _inplace_version(self) -> int:
    """The in-place version counter (as Tensor.inplace_version)."""
    return self.inplace_version


def _copy_to(self, place, blocking=True):
    """A copy of the tensor on `place` (a Place or a device string)."""
    out = self.to(place)
    return out.clone() if out is self else out


# Paddle 3.2's dtype-conversion methods (x.float(), x.long(), x.bfloat16(), ...): each is x.astype(dtype)
CONVERSIONS = {"float": "float32", "half": "float16", "double": "float64", "int": "int32", "long": "int64",
               "short": "int16", "char": "int8", "byte": "uint8", "bool": "bool", "cfloat": "complex64",
               "cdouble": "complex128", **{name: name for name in (
                   "bfloat16", "float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
                   "complex64", "complex128")}}


def _conversion(method, dtype):
    def convert(self):
        return self.astype(dtype)
    convert.__name__ = method
    convert.__doc__ = f"The tensor as {dtype} (x.astype('{dtype}'); differentiable between float dtypes)."
    return convert


def is_same_shape(self, y) -> bool:
    """Whether y has the same shape."""
    return self.shape == y.shape


def _always(answer, what):
    def query(self) -> bool:
        return answer
    query.__doc__ = f"{answer}: {what}"
    return query


def _data(self):
    """The tensor's values without its graph (x.data is a detached tensor sharing the storage)."""
    return self.detach()


def _set_data(self, value):
    self.set_value(value)


def _apply_checked(self, fn, where):
    if not self.stop_gradient:
        raise RuntimeError(f"Tensor.{where}(): cannot apply a function to a tensor that requires gradient "
                           f"(stop_gradient=False)")
    if not callable(fn):
        raise TypeError(f"Tensor.{where}(): func must be callable, got {type(fn).__name__}")
    with oarlock.no_grad():
        return fn(self)


def apply(self, func):
    """func(self) under no_grad, for a tensor that requires no gradient."""
    return _apply_checked(self, func, "apply")


def apply_(self, func):
    """self set to func(self) under no_grad; returns self."""
    self.set_value(_apply_checked(self, func, "apply_"))
    return self


def _type(self):
    """Paddle's tensor kind: VarType.DENSE_TENSOR (every oarlock tensor is dense)."""
    from oarlock_compat.framework_extras import VarType
    return VarType.DENSE_TENSOR


TOP = {"is_tensor": is_tensor, "numel": numel, "rank": rank, "shape": shape, "is_empty": is_empty,
       "tolist": tolist, "broadcast_shape": broadcast_shape, "is_floating_point": is_floating_point,
       "is_integer": is_integer, "create_parameter": create_parameter}
METHODS = {"value": value, "contiguous": contiguous, "is_contiguous": is_contiguous, "element_size": element_size,
           "numel": tensor_numel, "data_ptr": data_ptr, "ndimension": ndimension, "get_strides": get_strides,
           "t_": t_, "is_floating_point": is_floating_point, "is_integer": is_integer, "is_empty": is_empty,
           "_md5sum": _md5sum, "_numel": _numel, "_is_initialized": _is_initialized,
           "_inplace_version": _inplace_version, "_copy_to": _copy_to,
           "is_same_shape": is_same_shape,
           "is_dense": _always(True, "oarlock tensors are dense"), "is_dist": _always(False, "not a distributed "
           "tensor"), "is_sparse": _always(False, "oarlock has no sparse tensors"),
           "is_sparse_coo": _always(False, "oarlock has no sparse tensors"),
           "is_sparse_csr": _always(False, "oarlock has no sparse tensors"),
           "is_selected_rows": _always(False, "oarlock has no SelectedRows"),
           **{method: _conversion(method, dtype) for method, dtype in CONVERSIONS.items()},
           "apply": apply, "apply_": apply_,
           "data": property(_data, _set_data, doc=_data.__doc__), "type": property(_type, doc=_type.__doc__),
           "mT": property(_mT, doc=_mT.__doc__), "strides": property(get_strides, doc=get_strides.__doc__),
           "_place_str": property(lambda self: repr(self.place), doc="repr of the tensor's place")}
