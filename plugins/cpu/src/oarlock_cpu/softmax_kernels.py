"""The "cpu" device's softmax over the last axis, forward and backward, for float32: one C pass over each row
from cache (oarlock_cpu._kernels.softmax_rows / softmax_grad_rows), rows split over the free cores, where numpy
takes five passes over the whole array (three for the backward). Attention's scores are the usual caller.

They override, for device "cpu" and float32, the ops plugin's kernels of softmax, softmax_compat (the same
kernel) and the internal softmax_grad, taking and returning what those do:

    softmax(x, axis=-1, dtype=None) -> y          softmax_grad(y, g, axis) -> y * (g - sum(g * y, axis))

for a C-contiguous input reduced over its last axis with no dtype change; anything else (another axis,
softmax_compat's axis=None rule, dtype=, 0-d or empty inputs, mixed dtypes) goes to the generic kernel.
"""

from __future__ import annotations

import numpy as np

from oarlock_cpu.kernels import generic, register_all
from oarlock_cpu.parallel import sync_threads

try:
    from oarlock_cpu import _kernels
except ImportError:  # never built: the generic kernels stay in charge
    _kernels = None

_F32 = np.dtype(np.float32)


def _last_axis_rows(x, axis):
    """x as [rows, n] when it is a non-empty C-contiguous float32 array and axis is its last, else None."""
    if (x.__class__ is not np.ndarray or x.dtype != _F32 or x.ndim == 0 or x.size == 0 or axis is None
            or not x.flags.c_contiguous or axis not in (-1, x.ndim - 1)):
        return None
    return x.reshape(-1, x.shape[-1])


def _softmax_for(op):
    def softmax(xp, x, axis=-1, dtype=None):
        rows = _last_axis_rows(x, axis) if dtype is None or np.dtype(dtype) == _F32 else None
        if rows is None:
            return generic(op)(xp, x, axis=axis, dtype=dtype)
        out = np.empty(x.shape, dtype=_F32)
        sync_threads()
        _kernels.softmax_rows(rows, out.reshape(rows.shape))
        return out
    softmax.__name__ = op
    return softmax


def softmax_grad(xp, y, g, axis):
    rows = _last_axis_rows(y, axis)
    if rows is None or g.__class__ is not np.ndarray or g.dtype != _F32 or g.shape != y.shape \
            or not g.flags.c_contiguous:
        return generic("softmax_grad")(xp, y, g, axis)
    out = np.empty(y.shape, dtype=_F32)
    sync_threads()
    _kernels.softmax_grad_rows(rows, g.reshape(rows.shape), out.reshape(rows.shape))
    return out


KERNELS = {"softmax": _softmax_for("softmax"), "softmax_compat": _softmax_for("softmax_compat"),
           "softmax_grad": softmax_grad}


def register(ops):
    """Register the softmax kernels for device "cpu" (float32); nothing when the extension lacks them."""
    if _kernels is not None and hasattr(_kernels, "softmax_rows"):
        register_all(ops, KERNELS, dtypes=("float32",))
