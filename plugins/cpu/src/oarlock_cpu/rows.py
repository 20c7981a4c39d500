"""The "cpu" device's fused RMSNorm / LayerNorm kernels over the last axis (oarlock_cpu._rows), forward and
backward, for float32 and float64.

They override, for device "cpu", the generic kernels of the ops plugin's layer_norm, rms_norm and their
shared backward `_normalize_grad` (a dozen numpy passes each) when the input is a C-contiguous float32 or
float64 array normalised over its trailing axes and weight / bias, when present, are contiguous arrays of
its dtype: each row is then read once for its statistics and once more, from cache, for the result. The
kernels take and return what the generic ones do:

    layer_norm(x, weight, bias, normalized_shape, epsilon) -> (out, mean, rstd)   mean, rstd: [rows, 1]
    rms_norm(input, weight, normalized_shape, eps) -> (out, rstd)
    _normalize_grad(x, weight, g, mean, rstd, view, stats, affine, fixed, bias) -> (dx, dweight, dbias)

Anything else (other layouts, batch_norm's and group_norm's plans, fixed statistics, mixed dtypes, empty
inputs, shapes that do not match, which the generic kernel reports) goes to the generic kernel.
"""

from __future__ import annotations

import math

import numpy as np

from oarlock_cpu.kernels import generic, register_all
from oarlock_cpu.parallel import sync_threads

try:
    from oarlock_cpu import _rows
except ImportError:  # never built: the generic kernels stay in charge
    _rows = None



def _rows_of(x, normalized_shape):
    """(rows, n) when x is a C-contiguous float array whose trailing dims are normalized_shape, else None."""
    k = len(normalized_shape)
    if (x.__class__ is not np.ndarray or x.dtype not in (np.float32, np.float64) or not x.flags.c_contiguous
            or k == 0 or x.ndim < k or list(x.shape[x.ndim - k:]) != list(normalized_shape) or x.size == 0):
        return None
    n = math.prod(normalized_shape)
    return x.size // n, n


def _affine_ok(a, x, n):
    """weight / bias usable as a flat [n] array of x's dtype (None is fine: no weight or no bias)."""
    return a is None or (a.__class__ is np.ndarray and a.dtype == x.dtype and a.size == n and a.flags.c_contiguous
                         and a.shape in ((n,), x.shape[x.ndim - a.ndim:]))


def _flat(a, n):
    return None if a is None else a.reshape(n)


def _rms_epsilon(eps, dtype):
    """rms_norm's eps=None: the machine epsilon of float64 for float64 input, of float32 otherwise (Paddle;
    the ops plugin's rule, restated because this plugin cannot import oarlock_ops)."""
    if eps is not None:
        return eps
    return 2.0 ** -52 if dtype == np.float64 else 2.0 ** -23


def layer_norm(xp, x, weight=None, bias=None, normalized_shape=(), epsilon=1e-05):
    shape = _rows_of(x, normalized_shape)
    if shape is None or not (_affine_ok(weight, x, shape[1]) and _affine_ok(bias, x, shape[1])):
        return generic("layer_norm")(xp, x, weight, bias, normalized_shape=normalized_shape, epsilon=epsilon)
    rows, n = shape
    out = np.empty_like(x)
    mean, rstd = np.empty((rows, 1), dtype=x.dtype), np.empty((rows, 1), dtype=x.dtype)
    sync_threads()
    _rows.layer_norm(x.reshape(rows, n), _flat(weight, n), _flat(bias, n), float(epsilon), out, mean, rstd)
    return out, mean, rstd


def rms_norm(xp, input, weight=None, normalized_shape=(), eps=None):
    shape = _rows_of(input, normalized_shape)
    if shape is None or not _affine_ok(weight, input, shape[1]):
        return generic("rms_norm")(xp, input, weight, normalized_shape=normalized_shape, eps=eps)
    rows, n = shape
    out = np.empty_like(input)
    rstd = np.empty((rows, 1), dtype=input.dtype)
    sync_threads()
    _rows.rms_norm(input.reshape(rows, n), _flat(weight, n), float(_rms_epsilon(eps, input.dtype)), out, rstd)
    return out, rstd


def normalize_grad(xp, x, weight, g, mean, rstd, view=(), stats=(), affine=(), fixed=False, bias=True):
    view, stats, affine = tuple(view), tuple(stats), tuple(affine)
    rows_plan = len(view) == 2 and stats == (1,) and affine == (1, view[1]) and not fixed
    shape = _rows_of(x, view[1:]) if rows_plan and x.size == math.prod(view) else None
    usable = (shape is not None and _affine_ok(weight, x, shape[1]) and g.__class__ is np.ndarray
              and g.dtype == x.dtype and g.shape == x.shape and g.flags.c_contiguous
              and all(s is None or (s.__class__ is np.ndarray and s.dtype == x.dtype and s.size == shape[0]
                                    and s.flags.c_contiguous) for s in (mean, rstd)) and rstd is not None)
    if not usable:
        return generic("_normalize_grad")(xp, x, weight, g, mean, rstd, view=view, stats=stats, affine=affine,
                                          fixed=fixed, bias=bias)
    rows, n = shape
    dx = np.empty_like(x)
    dweight = np.empty((n,), dtype=x.dtype)
    dbias = np.empty((n if bias else 0,), dtype=x.dtype)
    sync_threads()
    _rows.norm_grad(x.reshape(rows, n), _flat(weight, n), g.reshape(rows, n), mean, rstd, dx, dweight,
                    dbias if bias else None)
    return dx, dweight, dbias


KERNELS = {"layer_norm": layer_norm, "rms_norm": rms_norm, "_normalize_grad": normalize_grad}


def register(ops):
    """Register the row kernels for device "cpu" (float32, float64); nothing when the extension is missing."""
    if _rows is not None:
        register_all(ops, KERNELS)
