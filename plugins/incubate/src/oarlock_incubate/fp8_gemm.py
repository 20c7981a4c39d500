"""paddle.incubate.nn.functional.fp8_gemm_blockwise: out [M, N] = a [M, K] @ b [N, K].T of blockwise-scaled
float8 operands, accumulated in float32 (cuBLASLt's block-scaled FP8 GEMM, as Paddle calls it).

Scales are the decode scales fp8_quant_blockwise returns with output_scale_transpose=True, so its outputs feed this
directly: a's scale is [ceil(K/128), M] when is_a_1d_scaled (1 x 128 blocks of each row) and
[ceil(K/128), ceil(M/128)] otherwise (128 x 128 tiles); b's likewise with N.

The emulation follows the tensor-core algorithm with use_split_accumulator (DeepSeek-V3's "promotion"): for each
128-wide slice of K the float8 products are summed in float32 (they are exact there: an e4m3 x e4m3 product has
at most 8 significant bits), the partial sum is multiplied by the slice's two decode scales and added to a float32
accumulator; the result is rounded once to out_dtype. Block scaling needs that promotion, so
use_split_accumulator=False computes the same. accumulate=True adds the product to `out` (which must then be
given); bias must be None, as in Paddle 3.2 (its Python wrapper asserts it).

The work is fp8_ops.fp8_gemm_op: numpy on the CPU; on device "gpu" (where a and b are uint8 codes of e4m3, the
gpu device having no float8 arrays) kernels/fp8_tc.cu's fp8_gemm_tc on the tensor cores (mma.sync m16n8k32,
the per-128-K partial sums promoted in float32 registers) from compute capability 8.9 on, kernels/fp8.cu's
fp8_gemm_rows (CUDA cores, the same algorithm) below.

Error bound against the float64 product of the dequantized operands: |err| <= gamma * sum_k |a_k b_k| + the final
rounding, gamma = (128 + K/128) * 2^-24 (float32 sums of at most 128 terms, then K/128 promotions). The tensor
cores' partial sums are not float32's in k order (DeepSeek-V3 reports about 14 bits of accumulation on Hopper:
the reason for the 128-wide promotion); bench/fp8_gpu_check.py measures that error on a GPU."""

from __future__ import annotations

import numpy as np

import oarlock
from oarlock_incubate import fp8_numerics as fp8
from oarlock_incubate import fp8_ops
from oarlock_incubate.fp8_args import dtype_name, host_float32

FUNCTIONS = ("fp8_gemm_blockwise",)
OUT_DTYPES = ("bfloat16", "float16", "float32")
OPERAND_DTYPES = ("float8_e4m3fn", "float8_e5m2")


def _operand(t, fn, arg):
    """(uint8 codes Tensor, float8 format) of a float8 operand (on gpu: its uint8 codes, taken as e4m3)."""
    if not isinstance(t, oarlock.Tensor):
        raise TypeError(f"{fn}(): argument '{arg}' must be a Tensor; got {type(t).__name__}")
    name = dtype_name(t)
    if t.ndim != 2:
        raise ValueError(f"{fn}(): argument '{arg}' has shape {list(t.shape)}; accepted: a 2-D tensor")
    if name == "uint8" and not t.place.is_cpu_place():
        return t, "e4m3"
    if name not in OPERAND_DTYPES:
        raise TypeError(f"{fn}(): argument '{arg}' has dtype {t.dtype}; accepted: {', '.join(OPERAND_DTYPES)}")
    return oarlock.to_tensor(t.numpy().view(np.uint8)), "e4m3" if name == "float8_e4m3fn" else "e5m2"


def _scale(t, fn, arg, rows, k, one_d, place):
    s = host_float32(t, fn, arg)
    want = [fp8.blocks(k), rows if one_d else fp8.blocks(rows)]
    if list(s.shape) != want:
        kind = "1-D (1 x 128) scaled" if one_d else "2-D (128 x 128) scaled"
        raise ValueError(f"{fn}(): argument '{arg}' has shape {list(s.shape)}; accepted for a {kind} operand: "
                         f"{want}")
    return oarlock.to_tensor(fp8.expand_scale(s, rows, k, one_d), place=place)


def fp8_gemm_blockwise(a, a_decode_scale, b, b_decode_scale, out_dtype, out=None, bias=None, accumulate=False,
                       use_split_accumulator=True, is_a_1d_scaled=True, is_b_1d_scaled=True):
    """a [M, K] @ b [N, K].T of blockwise-scaled float8 tensors -> [M, N] in out_dtype (Paddle 3.2's signature;
    see the module docstring)."""
    fn = "fp8_gemm_blockwise"
    if bias is not None:
        raise ValueError(f"{fn}(): argument 'bias' is a {type(bias).__name__}; accepted: None (Paddle 3.2's "
                         "blockwise FP8 GEMM has no bias)")
    dtype = str(out_dtype).split(".")[-1]
    if dtype not in OUT_DTYPES:
        raise ValueError(f"{fn}(): argument 'out_dtype' = {out_dtype!r}; accepted: {', '.join(OUT_DTYPES)}")
    (ca, a_fmt), (cb, b_fmt) = _operand(a, fn, "a"), _operand(b, fn, "b")
    (m, k), (n, k_b) = list(ca.shape), list(cb.shape)
    if k != k_b:
        raise ValueError(f"{fn}(): a {[m, k]} and b {[n, k_b]} differ in K (b is [N, K]); accepted: the same "
                         "last size")
    if out is not None and list(out.shape) != [m, n]:
        raise ValueError(f"{fn}(): argument 'out' has shape {list(out.shape)}; accepted: [{m}, {n}]")
    if accumulate and out is None:
        raise ValueError(f"{fn}(): accumulate=True needs the tensor to add to in argument 'out'")
    product = fp8_ops.gemm(ca, _scale(a_decode_scale, fn, "a_decode_scale", m, k, is_a_1d_scaled, ca.place), cb,
                           _scale(b_decode_scale, fn, "b_decode_scale", n, k, is_b_1d_scaled, ca.place), a_fmt, b_fmt)
    if accumulate:
        product = product + out.astype("float32")
    result = product.astype(dtype)
    if out is None:
        return result
    out.copy_(result.astype(out.dtype))
    return out
