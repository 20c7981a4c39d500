"""The three kernels "acme_npu" implements itself; every other op runs its parent's ("cpu") kernel.

A kernel has the signature of the kernel it overrides: fn(xp, *arrays, **attributes), where `xp` is
the device's array module (numpy here, since acme_npu inherits the CPU backend's) and the arguments
follow the op's signature (see `oarlock.matmul`, `oarlock.nn.functional.relu` and
`oarlock.nn.functional.softmax`). It returns an array of the device. Each one counts its calls in
CALLS, so a test can see that the device's kernels, not the parent's, ran.
"""

from __future__ import annotations

from collections import Counter

CALLS: Counter = Counter()


def _compute_dtype(xp, dtype):
    """float32 for the narrow floats (float16, bfloat16), else the dtype itself."""
    dtype = xp.dtype(dtype)
    return xp.dtype(xp.float32) if dtype.kind in "fV" and dtype.itemsize < 4 else dtype


def matmul(xp, x, y, transpose_x=False, transpose_y=False):
    """oarlock.matmul on acme_npu: numpy's matmul rules, the transposes applied first."""
    CALLS["matmul"] += 1
    if x.ndim == 0 or y.ndim == 0:
        raise ValueError(f"x and y must have at least one dimension, got shapes {list(x.shape)} and "
                         f"{list(y.shape)}")
    if transpose_x and x.ndim > 1:
        x = xp.swapaxes(x, -1, -2)
    if transpose_y and y.ndim > 1:
        y = xp.swapaxes(y, -1, -2)
    work = _compute_dtype(xp, x.dtype)
    out = xp.matmul(x.astype(work, copy=False), y.astype(work, copy=False))
    return out.astype(x.dtype, copy=False)


def relu(xp, x):
    """max(x, 0); integer dtypes stay integer, NaN stays NaN."""
    CALLS["relu"] += 1
    return xp.maximum(x, xp.zeros((), dtype=x.dtype))


def softmax(xp, x, axis=-1, dtype=None):
    """exp(x - max) / sum(exp(x - max)) along `axis`; `dtype` casts x first (a numpy dtype here)."""
    CALLS["softmax"] += 1
    out_dtype = x.dtype if dtype is None else xp.dtype(dtype)
    if x.ndim and not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis {axis} is out of range for a {x.ndim}-D input")
    if x.size == 0:
        return xp.empty(x.shape, dtype=out_dtype)
    work = x.astype(_compute_dtype(xp, out_dtype), copy=False)
    if work.ndim == 0:
        work, axis = work.reshape(1), 0
    exp = xp.exp(work - xp.max(work, axis=axis, keepdims=True))
    return (exp / xp.sum(exp, axis=axis, keepdims=True)).reshape(x.shape).astype(out_dtype, copy=False)
