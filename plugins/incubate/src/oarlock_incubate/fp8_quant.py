"""paddle.incubate.nn.functional.fp8_quant_blockwise: blockwise float8 quantization of a 2-D tensor
(DeepSeek-V3's recipe: 1 x 128 blocks for activations and gradients, 128 x 128 tiles for weights).

For x [M, K] each block's scale is `448 / max|block|` (fp8_numerics.scale_of: power of two by default, 1 for an
all-zero block, epsilon as a floor of the maximum), the output is `cast_e4m3(x * scale)` and what is returned is
the *decode* scale 1 / scale, so that x ~ out * decode_scale. Layouts (Paddle's Fp8QuantBlockwiseInferMeta):

| quant_method | output_scale_transpose=True | False |
|---|---|---|
| "1x128" | scale [ceil(K/128), M] | [M, ceil(K/128)] |
| "128x128" | scale [ceil(K/128), ceil(M/128)] | [ceil(M/128), ceil(K/128)] |

input_transpose=True also returns the quantization of x.T ([K, M]): for "1x128" its own 1 x 128 blocks along M
(scale_t [ceil(M/128), K], or [K, ceil(M/128)]), for "128x128" the same tiles transposed (scale_t the scale
transposed). Returns (out, scale); with input_transpose (out, scale, out_t, scale_t); with also
return_transpose_only (out_t, scale_t) -- Paddle's tuples.

Edge cases as Paddle's kernels: NaN is ignored by the block maximum and quantizes to NaN; an inf makes its block's
scale 0, so that block's decode scale is inf, its finite values quantize to 0 and the inf to NaN. Paddle's CUDA
kernel needs K % 128 == 0, and M % 128 == 0 except for 1x128 without transpose; here ragged last blocks are
quantized over the elements they hold (the layouts above with ceil), a generalisation. Only output_type "e4m3"
exists in Paddle; oarlock also takes "e5m2" (max 57344), which the FP8 training recipes use for gradients.

The work is fp8_ops.fp8_quant_op: numpy on the CPU, kernels/fp8.cu on device "gpu". The gpu device has no float8
arrays, so there the float8 outputs are their uint8 codes (fp8_gemm_blockwise takes them as e4m3)."""

from __future__ import annotations

import numpy as np

import oarlock
from oarlock_incubate import fp8_numerics as fp8
from oarlock_incubate import fp8_ops
from oarlock_incubate.fp8_args import dtype_name, fp8_tensor

FUNCTIONS = ("fp8_quant_blockwise",)
INPUT_DTYPES = ("bfloat16", "float16", "float32")
METHODS = ("1x128", "128x128")


def fp8_quant_blockwise(x, epsilon=0.0, input_transpose=False, output_scale_transpose=True,
                        return_transpose_only=False, using_pow2_scale=True, quant_method="1x128",
                        output_type="e4m3", name=None):
    """Blockwise float8 quantization of x [M, K] (Paddle 3.2's signature and return tuples; see the module
    docstring for the scale layouts)."""
    fn = "fp8_quant_blockwise"
    if quant_method not in METHODS:
        raise ValueError(f"{fn}(): argument 'quant_method' = {quant_method!r}; accepted: "
                         f"{', '.join(map(repr, METHODS))}")
    fp8.check_format(fn, output_type)
    if not isinstance(epsilon, (int, float)) or not np.isfinite(epsilon) or epsilon < 0:
        raise ValueError(f"{fn}(): argument 'epsilon' = {epsilon!r}; accepted: a finite number >= 0")
    if return_transpose_only and not input_transpose:
        raise ValueError(f"{fn}(): argument 'return_transpose_only' = True needs input_transpose=True "
                         "(there is no transposed output otherwise)")
    if not isinstance(x, oarlock.Tensor):
        raise TypeError(f"{fn}(): argument 'x' must be a Tensor; got {type(x).__name__}")
    if dtype_name(x) not in INPUT_DTYPES:
        raise TypeError(f"{fn}(): argument 'x' has dtype {x.dtype}; accepted: {', '.join(INPUT_DTYPES)}")
    if x.ndim != 2 or 0 in x.shape:
        raise ValueError(f"{fn}(): argument 'x' has shape {list(x.shape)}; accepted: a 2-D tensor with no "
                         "zero-size axis")
    codes, scale = fp8_ops.quant(x, quant_method, float(epsilon), bool(using_pow2_scale), output_type)
    outs = (float8_of(codes, output_type), _layout(scale, output_scale_transpose))
    if not input_transpose:
        return outs
    if quant_method == "1x128":
        codes_t, scale_t = fp8_ops.quant(oarlock.transpose(x, [1, 0]), quant_method, float(epsilon),
                                         bool(using_pow2_scale), output_type)
    else:                                             # the same tiles, read transposed
        codes_t, scale_t = oarlock.transpose(codes, [1, 0]), oarlock.transpose(scale, [1, 0])
    trans = (float8_of(codes_t, output_type), _layout(scale_t, output_scale_transpose))
    return trans if return_transpose_only else outs + trans


def _layout(scale, transpose):
    return oarlock.transpose(scale, [1, 0]).contiguous() if transpose else scale


def float8_of(codes, fmt: str):
    """The float8 tensor of uint8 codes; on a device without float8 arrays (gpu) the codes themselves."""
    if codes.place.is_cpu_place():
        return fp8_tensor(codes.numpy().view(fp8.FORMATS[fmt]))
    return codes
