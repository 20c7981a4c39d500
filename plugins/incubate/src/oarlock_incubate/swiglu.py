"""paddle.incubate.nn.functional.swiglu: silu(x) * y, or with y omitted the two halves of x's last axis."""

from __future__ import annotations

import oarlock
import oarlock.nn.functional as F

FUNCTIONS = ("swiglu",)


def swiglu(x, y=None, name=None):
    """silu(x) * y (Paddle 3.2's swiglu). With y None, x's last axis is split in two halves (x, y); its
    length must then be even. x and y must have the same shape."""
    if not isinstance(x, oarlock.Tensor):
        raise TypeError(f"swiglu(): argument 'x' must be a Tensor; got {type(x).__name__}")
    if y is None:
        if x.ndim == 0 or x.shape[-1] % 2:
            raise ValueError(f"swiglu(): argument 'x' of shape {list(x.shape)} with y=None; accepted: a last "
                             "axis of even length (it is split into x and y)")
        x, y = oarlock.chunk(x, 2, axis=-1)
    elif not isinstance(y, oarlock.Tensor):
        raise TypeError(f"swiglu(): argument 'y' must be a Tensor or None; got {type(y).__name__}")
    elif list(x.shape) != list(y.shape):
        raise ValueError(f"swiglu(): arguments 'x' {list(x.shape)} and 'y' {list(y.shape)} differ in shape; "
                         "accepted: the same shape")
    return F.silu(x) * y
