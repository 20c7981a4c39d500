"""Paddle 3.2's fused FP8 helpers of MoE training (paddle.incubate.nn.functional): fused_act_dequant,
fused_stack_transpose_quant, fused_weighted_swiglu_act_quant and fused_swiglu_weighted_bwd.

They compute in float32 and return Paddle's dtypes (bfloat16 activations and gradients, float8_e4m3fn with float32
decode scales). The quantizing ones use fp8_numerics (the scale rule of fp8_quant_blockwise):
- fused_weighted_swiglu_act_quant: 1 x 128 blocks of each row of silu(x1) * x2 * prob, decode scales
  [rows, ceil(cols/2 / 128)], power-of-two scales only when using_pow2_scaling (Paddle's default False);
- fused_stack_transpose_quant: the [M, K] inputs stacked to [E*M, K] (transpose=False) or each transposed and
  stacked to [E*K, M] (transpose=True), quantized in 128 x 128 tiles with power-of-two scales, decode scales
  [rows/128, cols/128] (Paddle's example: one [2048, 128] input -> out [128, 2048], scale [1, 16]).
- fused_transpose_split_quant (MoE dispatch of the weight gradient's input): the rows of x [M, K] split by
  tokens_per_expert, each part quantized in 128 x 1 blocks along its tokens and returned transposed: outs[i]
  [K, t_i], scales[i] [ceil(t_i/128), K] (Paddle's example: x [384, 512], three experts of 128 -> outs [512, 128],
  scales [1, 512]); power-of-two scales only with pow_2_scales.
fused_act_dequant(x, x_scale) = x * x_scale per 1 x 128 block ([M, ceil(N/128)] scales), in bfloat16."""

from __future__ import annotations

import numpy as np

import oarlock
from oarlock_incubate import fp8_numerics as fp8
from oarlock_incubate.fp8_args import dtype_name, fp8_tensor, host_float32

FUNCTIONS = ("fused_act_dequant", "fused_stack_transpose_quant", "fused_weighted_swiglu_act_quant",
             "fused_swiglu_weighted_bwd", "fused_transpose_split_quant")


def _bf16(a: np.ndarray) -> oarlock.Tensor:
    return oarlock.to_tensor(np.asarray(a, np.float32)).astype("bfloat16")


def _silu(a):
    return a / (np.float32(1) + np.exp(-a))


def _halves(fn, x32, arg="x"):
    if x32.ndim == 0 or x32.shape[-1] % 2:
        raise ValueError(f"{fn}(): argument '{arg}' has shape {list(x32.shape)}; accepted: a last axis of even "
                         "length (the gate half, then the value half)")
    half = x32.shape[-1] // 2
    return x32[..., :half], x32[..., half:]


def _rows_prob(fn, prob, rows_shape, arg):
    """prob of shape rows_shape (or rows_shape + [1]) -> float32 [*rows_shape, 1] for broadcasting."""
    p = host_float32(prob, fn, arg, ndim=None)
    if p.size != int(np.prod(rows_shape, dtype=np.int64)) or list(p.shape[:len(rows_shape)]) != list(rows_shape):
        raise ValueError(f"{fn}(): argument '{arg}' has shape {list(p.shape)}; accepted: {list(rows_shape)} (or "
                         "with a trailing 1): one value per row")
    return p.reshape(list(rows_shape) + [1])


def fused_act_dequant(x, x_scale):
    """x (float8 [M, N]) * x_scale (float32 [M, ceil(N/128)], one per 1 x 128 block) -> bfloat16 [M, N]."""
    fn = "fused_act_dequant"
    if isinstance(x, oarlock.Tensor) and dtype_name(x) != "float8_e4m3fn":
        raise TypeError(f"{fn}(): argument 'x' has dtype {x.dtype}; accepted: float8_e4m3fn")
    x32 = host_float32(x, fn, "x")
    s = host_float32(x_scale, fn, "x_scale")
    want = [x32.shape[0], fp8.blocks(x32.shape[1])]
    if list(s.shape) != want:
        raise ValueError(f"{fn}(): argument 'x_scale' has shape {list(s.shape)}; accepted: {want}")
    return _bf16(x32 * fp8.expand_rows(s, x32.shape[1]))


def fused_stack_transpose_quant(x, transpose=True):
    """Stack the [M, K] tensors of the list x (each transposed first when transpose) and quantize the stack in
    128 x 128 tiles: (float8 [E*M, K] or [E*K, M], float32 decode scales per tile)."""
    fn = "fused_stack_transpose_quant"
    if not isinstance(x, (list, tuple)) or not x:
        raise TypeError(f"{fn}(): argument 'x' must be a non-empty list or tuple of Tensors; got "
                        f"{type(x).__name__}")
    parts = [host_float32(t, fn, f"x[{i}]") for i, t in enumerate(x)]
    if any(p.shape != parts[0].shape for p in parts):
        raise ValueError(f"{fn}(): the tensors of 'x' differ in shape ({[list(p.shape) for p in parts]}); "
                         "accepted: one shape")
    stacked = np.concatenate([p.T if transpose else p for p in parts], axis=0)
    q, scale = fp8.quantize_tiles(stacked, pow2=True)
    return fp8_tensor(q), oarlock.to_tensor(scale)


def fused_weighted_swiglu_act_quant(x, prob=None, using_pow2_scaling=False, name=None):
    """silu(x1) * x2 (* prob per row) of x [..., cols] = [x1 | x2], quantized in 1 x 128 blocks:
    (float8 [rows, cols/2], float32 decode scales [rows, ceil(cols/2 / 128)]), rows the product of x's leading
    sizes."""
    fn = "fused_weighted_swiglu_act_quant"
    x32 = host_float32(x, fn, "x", ndim=None)
    gate, value = _halves(fn, x32)
    act = _silu(gate) * value
    if prob is not None:
        act = act * _rows_prob(fn, prob, x32.shape[:-1], "prob")
    q, scale = fp8.quantize_rows(act.reshape(-1, act.shape[-1]), pow2=using_pow2_scaling)
    return fp8_tensor(q), oarlock.to_tensor(scale)


def fused_swiglu_weighted_bwd(o1, do2_s, unzipped_probs, name=None):
    """Backward of o2_s = silu(x1) * x2 * prob with o1 = [x1 | x2]: (do1 bfloat16 [..., 2I], probs_grad float32
    of unzipped_probs' shape, o2_s bfloat16 [..., I]) where do1 = [do2 * x2 * silu'(x1) | do2 * silu(x1)],
    do2 = do2_s * prob, probs_grad = sum(do2_s * silu(x1) * x2) over the last axis."""
    fn = "fused_swiglu_weighted_bwd"
    o = host_float32(o1, fn, "o1", ndim=None)
    gate, value = _halves(fn, o, "o1")
    g = host_float32(do2_s, fn, "do2_s", ndim=None)
    if list(g.shape) != list(gate.shape):
        raise ValueError(f"{fn}(): argument 'do2_s' has shape {list(g.shape)}; accepted: {list(gate.shape)} "
                         "(o1's with the last size halved)")
    p = _rows_prob(fn, unzipped_probs, o.shape[:-1], "unzipped_probs")
    sig = np.float32(1) / (np.float32(1) + np.exp(-gate))
    silu = gate * sig
    o2 = silu * value
    do2 = g * p
    dgate = do2 * value * sig * (np.float32(1) + gate * (np.float32(1) - sig))
    do1 = np.concatenate([dgate, do2 * silu], axis=-1)
    probs_grad = (g * o2).sum(axis=-1, dtype=np.float32).reshape(unzipped_probs.shape)
    return _bf16(do1), oarlock.to_tensor(probs_grad.astype(np.float32)), _bf16(o2 * p)


def fused_transpose_split_quant(x, input_scales, tokens_per_expert, pow_2_scales=False):
    """([float8 [K, t_i]], [float32 decode scales [ceil(t_i/128), K]]) of x [M, K] split into experts' rows by
    tokens_per_expert (summing to M), each quantized in 128-token blocks of every column and transposed.
    input_scales must be None (the dequantization of an already-quantized x is not implemented)."""
    fn = "fused_transpose_split_quant"
    if input_scales is not None:
        raise NotImplementedError(f"{fn}(): argument 'input_scales' is a {type(input_scales).__name__}: an "
                                  "already-quantized x is not implemented; accepted: None")
    x32 = host_float32(x, fn, "x")
    counts = [int(t) for t in tokens_per_expert]
    if any(t < 0 for t in counts) or sum(counts) != x32.shape[0]:
        raise ValueError(f"{fn}(): argument 'tokens_per_expert' = {counts} (sum {sum(counts)}); accepted: "
                         f"counts >= 0 summing to x's {x32.shape[0]} rows")
    if 0 in x32.shape:
        return [], []
    outs, scales = [], []
    for part in np.split(x32, np.cumsum(counts)[:-1]):
        q, decode = fp8.quantize_cols(part, pow2=bool(pow_2_scales))
        outs.append(fp8_tensor(q.T))
        scales.append(oarlock.to_tensor(decode))
    return outs, scales
