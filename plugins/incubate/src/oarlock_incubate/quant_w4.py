"""w4a8_linear and w4afp8_linear (oarlock.nn.quant; oarlock's names -- Paddle runs these GEMMs in FastDeploy):
x @ W of an int4 weight from weight_quantize(..., "w4a8" / "w4afp8") with the activations quantized per token:

- w4a8: int8, one scale per row (absmax / 127, halves away from zero), as llm_int8_linear's int8 part;
- w4afp8: float8 e4m3 in 1 x 128 blocks of each row (fp8_quant_blockwise's rule, float32 scales, not rounded to a
  power of two).

The products are accumulated in float32 and the result returned in x's dtype, plus bias. The weight takes no
gradient (inference)."""

from __future__ import annotations

import numpy as np

import oarlock
from oarlock_incubate import fp8_numerics as fp8
from oarlock_incubate.quant import _round_away, check, dequantized, host

FUNCTIONS = ("w4a8_linear", "w4afp8_linear")


def quantized_activations(algo: str, rows: np.ndarray) -> np.ndarray:
    """[R, K] float32 -> the values the GEMM sees after quantizing the activations (dequantized, float32)."""
    if algo == "w4a8":
        scale = np.abs(rows).max(axis=1, keepdims=True) / np.float32(127)
        return (_round_away(rows / np.where(scale == 0, np.float32(1), scale)) * scale).astype(np.float32)
    q, decode = fp8.quantize_rows(rows, pow2=False)
    return q.astype(np.float32) * fp8.expand_rows(decode, rows.shape[1])


def _linear(fn, algo, x, weight, weight_scale, bias, group_size):
    check(fn, algo, None, group_size)
    if weight_scale is None:
        raise ValueError(f"{fn}(): argument 'weight_scale' is None; accepted: the scale weight_quantize returned")
    w = dequantized(fn, weight, weight_scale, algo, group_size)                     # [k, n]
    xa = host(x, fn, "x").astype(np.float32)
    if xa.ndim == 0 or xa.shape[-1] != w.shape[0]:
        raise ValueError(f"{fn}(): argument 'x' has shape {list(xa.shape)}; accepted: [..., {w.shape[0]}] (the "
                         "weight's in_features)")
    rows = quantized_activations(algo, xa.reshape(-1, xa.shape[-1]))
    out = (rows @ w).reshape(list(xa.shape[:-1]) + [w.shape[1]])
    result = oarlock.to_tensor(out).astype(x.dtype)
    return result if bias is None else result + bias


def w4a8_linear(x, weight, weight_scale=None, bias=None, group_size=-1):
    """int4 weight times int8-quantized x (one scale per token), plus bias; in x's dtype."""
    return _linear("w4a8_linear", "w4a8", x, weight, weight_scale, bias, group_size)


def w4afp8_linear(x, weight, weight_scale=None, bias=None, group_size=-1):
    """int4 weight times float8-e4m3-quantized x (1 x 128 blocks per token), plus bias; in x's dtype."""
    return _linear("w4afp8_linear", "w4afp8", x, weight, weight_scale, bias, group_size)
