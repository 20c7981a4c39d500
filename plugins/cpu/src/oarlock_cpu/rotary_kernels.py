"""The "cpu" device's rotary position embedding (fused_rotary_embedding) for float32 and float64: one C pass
(oarlock_cpu._rows.rotary) that reads each row of x once, the rows split over the free cores, where numpy takes
four passes and a gather of the swapped halves. It gives the generic kernel's bits (same products, same sums).

It overrides, for device "cpu", the ops plugin's kernel of

    fused_rotary_embedding(x, cos, sin, *, transpose=False) -> x * cos + rotate_half(x) * sin

for x [B, T, H, D] whose rows are contiguous (a split of a fused qkv projection is fine) and per-position tables
of x's dtype shaped [1, T, 1, D] (or [T, D] broadcast the same way); anything else goes to the generic kernel,
which also reports shapes that do not fit.
"""

from __future__ import annotations

import numpy as np

from oarlock_cpu.kernels import generic, register_all
from oarlock_cpu.parallel import sync_threads

try:
    from oarlock_cpu import _rows
except ImportError:  # never built: the generic kernels stay in charge
    _rows = None


def _position_table(t, x):
    """t as a C-contiguous [T, D] array when it is x's dtype and broadcasts to x [B, T, H, D] as [1, T, 1, D],
    else None."""
    if t.__class__ is not np.ndarray or t.dtype != x.dtype or t.ndim > 4:
        return None
    shape = (1,) * (4 - t.ndim) + t.shape
    if shape != (1, x.shape[1], 1, x.shape[3]):
        return None
    return np.ascontiguousarray(t.reshape(x.shape[1], x.shape[3]))


def fused_rotary_embedding(xp, x, cos, sin, *, transpose=False):
    ok = (x.__class__ is np.ndarray and x.ndim == 4 and x.dtype in (np.float32, np.float64) and x.size
          and x.shape[3] % 2 == 0 and x.strides[3] == x.itemsize)
    c = _position_table(cos, x) if ok else None
    s = _position_table(sin, x) if c is not None else None
    if s is None:
        return generic("fused_rotary_embedding")(xp, x, cos, sin, transpose=transpose)
    out = np.empty(x.shape, dtype=x.dtype)
    sync_threads()
    _rows.rotary(x, c, s, out, bool(transpose))
    return out


KERNELS = {"fused_rotary_embedding": fused_rotary_embedding}


def register(ops):
    """Register the rotary kernel for device "cpu" (float32, float64); nothing when the extension lacks it."""
    if _rows is not None and hasattr(_rows, "rotary"):
        register_all(ops, KERNELS)
