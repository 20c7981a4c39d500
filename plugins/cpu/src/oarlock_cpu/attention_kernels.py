"""The "cpu" device's fused scaled-dot-product attention, forward and backward, over oarlock_cpu._gemm's C
kernels (_attention.c: MKL's GEMMs and the row passes per (batch, key head), shared by the cores).

They serve scaled_dot_product_attention and its internal backward op for float32 and float64 4-D inputs
without a mask or dropout (the causal flag, grouped-query heads and strided views such as a split of a fused
qkv projection included), with the generic kernel's inputs and outputs: (out, probabilities [B, Hk, G, Sq, Sk],
keep placeholder) and (dq, dk, dv). Everything else (masks, dropout, 3-D inputs, other dtypes, no MKL) runs
the generic kernel of oarlock-ops, which also raises the errors for bad input. The probabilities are the
generic kernel's to float rounding (its softmax shifts by a bound, this one by the row's max).
"""

from __future__ import annotations

import math

import numpy as np

from oarlock_cpu import blas, mkl
from oarlock_cpu.kernels import generic, register_all

_FN = "scaled_dot_product_attention"
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _threads(query, key):
    """Every usable core (the BLAS policy's count for a large product) unless the work is small."""
    b, sq, h, d = query.shape
    return blas.policy().threads_for(sq, d, key.shape[1], b * h)


def _fused(*arrays) -> bool:
    return all(a.__class__ is np.ndarray and a.ndim == 4 and a.dtype == arrays[0].dtype for a in arrays) \
        and arrays[0].dtype in _FLOATS


def sdpa(xp, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, training=True, scale=None, *,
         generator):
    if attn_mask is None and (dropout_p == 0.0 or not training) and _fused(query, key, value):
        d = query.shape[-1]
        scale_ = scale if scale is not None else (1.0 / math.sqrt(d) if d else 1.0)
        result = mkl._gemm.attention_forward(query, key, value, scale_, bool(is_causal), _threads(query, key))
        if result is not None:
            return result[0], result[1], xp.ones((), dtype=bool)
    return generic(_FN)(xp, query, key, value, attn_mask, dropout_p, is_causal, training, scale,
                        generator=generator)


def sdpa_backward(xp, grad, query, key, value, out, probs, keep, dropout_p=0.0, scale=None, is_causal=False):
    if dropout_p == 0.0 and _fused(grad, query, key, value, out) and probs.__class__ is np.ndarray:
        d = query.shape[-1]
        scale_ = scale if scale is not None else (1.0 / math.sqrt(d) if d else 1.0)
        result = mkl._gemm.attention_backward(grad, query, key, value, out, probs, scale_, bool(is_causal),
                                              _threads(query, key))
        if result is not None:
            return result
    return generic(f"_{_FN}_grad")(xp, grad, query, key, value, out, probs, keep, dropout_p, scale, is_causal)


def register(ops):
    """Register the fused attention kernels for device "cpu" (float32, float64) when MKL is loaded."""
    if mkl.LIBRARY is not None:
        register_all(ops, {_FN: sdpa, f"_{_FN}_grad": sdpa_backward}, ("float32", "float64"))
