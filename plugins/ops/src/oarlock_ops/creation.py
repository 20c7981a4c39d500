"""Creation ops: to_tensor, zeros/ones/full/empty (and *_like), eye, arange, linspace, random."""

from __future__ import annotations

import numpy as np

from oarlock import dtypes as D


def _data_to_host(value):
    """to_tensor's data as something numpy takes: Tensors become host arrays, lists stay lists."""
    from oarlock import Tensor
    if isinstance(value, Tensor):
        return value.numpy()
    if isinstance(value, (list, tuple)) and any(isinstance(v, Tensor) for v in value):
        return [_data_to_host(v) for v in value]
    return value


def _default_dtype_for(data):
    """Paddle's rule: Python floats -> default float, ints -> int64, bools -> bool; arrays keep theirs."""
    if isinstance(data, np.ndarray) or isinstance(data, np.generic):
        return None
    probe = np.asarray(data)
    if probe.dtype.kind == "f":
        return D.get_default_dtype().np
    if probe.dtype.kind == "c":
        return D.default_for_kind("complex").np
    if probe.dtype.kind in "iu":
        return np.dtype(np.int64)
    if probe.dtype.kind == "b":
        return np.dtype(np.bool_)
    raise TypeError(f"cannot make a tensor from {type(data).__name__} data (numpy sees dtype {probe.dtype})")


def register(ops):
    ops.define("to_tensor(data: Any, dtype: DType|None = None, place: Place|None = None, "
               "stop_gradient: bool = True) -> Tensor",
               public=["oarlock.to_tensor"], aliases={"device": "place"},
               doc="Make a tensor from Python data, a numpy array or a Tensor (copied).")

    @ops.kernel("to_tensor")
    def to_tensor(xp, data, dtype=None):
        data = _data_to_host(data)
        if dtype is None:
            dtype = _default_dtype_for(data)
        return xp.array(data, dtype=dtype, copy=True)

    for name in ("zeros_like", "ones_like"):
        ops.define(f"{name}(x: Tensor, dtype: DType|None = None) -> Tensor", public=[name],
                   aliases={"input": "x"})
    ops.kernel("zeros_like")(lambda xp, x, dtype=None: xp.zeros_like(x, dtype=dtype))
    ops.kernel("ones_like")(lambda xp, x, dtype=None: xp.ones_like(x, dtype=dtype))

    for name in ("zeros", "ones"):
        ops.define(f"{name}(shape: Shape, dtype: DType|None = None, place: Place|None = None, "
                   f"requires_grad: bool = False) -> Tensor", public=[name], varargs="shape",
                   aliases={"size": "shape", "device": "place"})
    ops.kernel("zeros")(lambda xp, shape, dtype=None, requires_grad=None: xp.zeros(shape, dtype=dtype or D.get_default_dtype().np))
    ops.kernel("ones")(lambda xp, shape, dtype=None, requires_grad=None: xp.ones(shape, dtype=dtype or D.get_default_dtype().np))
