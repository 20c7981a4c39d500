"""numpy functions the "cpu" backend runs faster: its `Backend.array_functions`, which kernels generic over xp
reach through `oarlock.plugin_api.xp_function(numpy, name)`.

numpy computes float32 exp2 with libm's scalar exp2f (about 3.6 ns an element here) and float32 exp at about the
same speed; the vectorised C loops of oarlock_cpu._kernels take 1.4-1.6 ns, within 1 ulp (tests/test_cpu_kernels.py).
Attention's softmax and the FlashMask kernel spend most of their non-GEMM time there. float64 and every other
dtype go to numpy's own function, so each drop-in accepts and returns exactly what numpy's does. `exp2_rows` (not a
numpy name) fuses the FlashMask backward's subtraction of each row's log-sum-exp with exp2 (and can sum the rows):
one pass, not two.
OARLOCK_CPU_FASTMATH=0 turns them off (numpy's own everywhere: for comparisons and benchmarks).
"""

from __future__ import annotations

import os

import numpy as np

from oarlock_cpu.parallel import sync_threads

try:
    from oarlock_cpu import _kernels
except ImportError:  # never built: numpy serves every call
    _kernels = None

_F32 = np.dtype(np.float32)


def _drop_in(fast, plain):
    def fn(x, out=None):
        if x.__class__ is np.ndarray and x.dtype == _F32 and (out is None or (out.__class__ is np.ndarray
                                                                               and out.dtype == _F32)):
            sync_threads()   # a large call runs on the free cores
            return fast(x) if out is None else fast(x, out=out)
        return plain(x) if out is None else plain(x, out=out)
    fn.__name__ = plain.__name__
    fn.__doc__ = f"numpy.{plain.__name__}(x, out=None), float32 by oarlock_cpu's vectorised loop."
    return fn


def _is_f32(x):
    return x.__class__ is np.ndarray and x.dtype == _F32


def exp2_rows(x, bias=None, sums=None):
    """x [A, R, N] <- 2^(x - bias) in place (bias [A, R, 1] or None) and sums [A, R, 1] <- each row's sum of the
    results (None: not wanted); returns x. float32 in one pass by oarlock_cpu._kernels.exp2_rows (the same bits
    as exp2(x - bias)); other dtypes by numpy's passes."""
    if _is_f32(x) and x.ndim == 3 and x.strides[2] == 4 and all(c is None or _is_f32(c) for c in (bias, sums)):
        _kernels.exp2_rows(x, bias, sums)
        return x
    if bias is not None:
        np.subtract(x, bias, out=x)
    np.exp2(x, out=x)
    if sums is not None:
        np.sum(x, axis=-1, keepdims=True, out=sums)
    return x


def _rows_f32(x):
    return x.__class__ is np.ndarray and x.dtype == _F32 and x.ndim == 2 and x.flags.c_contiguous and x.size


def softmax_rows(x):
    """Softmax of each row of a 2-D float32 C-contiguous array as a new array, in one C pass per row (split over
    the free cores); None for any other input (the caller computes it). Not a numpy name: the ops plugin's
    cross-entropy asks for it."""
    if not _rows_f32(x):
        return None
    out = np.empty_like(x)
    sync_threads()
    _kernels.softmax_rows(x, out)
    return out


def logsumexp_rows(x):
    """log(sum(exp(row))) of each row of a 2-D float32 C-contiguous array, shape [rows], reading each row twice
    (max, then the sum of exponentials, not stored); None for any other input (the caller computes it)."""
    if not _rows_f32(x):
        return None
    out = np.empty(x.shape[0], dtype=_F32)
    sync_threads()
    _kernels.logsumexp_rows(x, out)
    return out


def hard_label_cross_entropy_rows(rows, index, ignore_index):
    """Softmax cross-entropy of each row of 2-D float32 C-contiguous logits against class indices (int64/int32 [rows]),
    one C call: (loss [rows] float32 with 0 on ignored rows, their sum in float64, the count of rows not ignored,
    None), or (None, None, None, the first label out of range) for the caller to report; None for any other input.
    Not a numpy name: the ops plugin's cross-entropy asks for it."""
    if not _rows_f32(rows):
        return None
    loss = np.empty(rows.shape[0], dtype=_F32)
    sync_threads()
    found = _kernels.xent_rows(rows, index, ignore_index, loss)
    if found is None:
        return None
    total, valid, bad = found
    return (None, None, None, bad) if bad is not None else (loss, total, valid, None)


def hard_label_cross_entropy_grad_rows(rows, index, ignore_index, coef, mean):
    """Its backward, a new array: (softmax(row) - onehot(label)) * coef per row, 0 on ignored rows; coef a float for
    every row (mean=True: divided by Paddle's 'mean' divisor first) or float32 [rows]; None for any other input."""
    if not _rows_f32(rows):
        return None
    out = np.empty_like(rows)
    sync_threads()
    return out if _kernels.xent_grad_rows(rows, index, ignore_index, coef, mean, out) else None


FUNCTIONS = {} if _kernels is None or os.environ.get("OARLOCK_CPU_FASTMATH") == "0" else {
    "exp": _drop_in(_kernels.exp, np.exp),
    "exp2": _drop_in(_kernels.exp2, np.exp2),
}
if FUNCTIONS and hasattr(_kernels, "exp2_rows"):   # an extension built before exp2_rows existed lacks it
    FUNCTIONS["exp2_rows"] = exp2_rows   # attention's softmax step (oarlock-flashmask)
if FUNCTIONS and hasattr(_kernels, "logsumexp_rows"):
    FUNCTIONS["softmax_rows"] = softmax_rows        # cross-entropy's forward and backward (oarlock-ops)
    FUNCTIONS["logsumexp_rows"] = logsumexp_rows
if FUNCTIONS and hasattr(_kernels, "xent_rows"):
    FUNCTIONS["hard_label_cross_entropy_rows"] = hard_label_cross_entropy_rows   # cross-entropy (oarlock-ops)
    FUNCTIONS["hard_label_cross_entropy_grad_rows"] = hard_label_cross_entropy_grad_rows
