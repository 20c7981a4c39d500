"""paddle.nn.quant's weight-only and LLM.int8 quantization: weight_quantize, weight_dequantize,
weight_only_linear, llm_int8_linear (Paddle 3.2's signatures).

A weight x [k, n] (in_features, out_features) is quantized per output channel: scale[j] = max_i |x[i, j]| / qmax
(qmax 127 for int8, 7 for int4), q = round(x / scale) with halves rounded away from zero (as Paddle's kernel),
stored transposed as [n, k] int8; int4 packs two values per byte along n ([ceil(n/2), k]: the even row in the
low nibble, the odd row in the high one). "llm.int8" gives Paddle's own CPU result exactly (float32 scales).
Paddle's weight-only kernels also interleave the rows for a CUDA architecture (`arch` 70...90); oarlock's CPU
kernels read the plain layout, so arch must be None here (a given arch is refused with a clear error).
group_size 64 or 128 (Paddle's group-wise mode) gives one scale per group of `group_size` input rows and output
channel: scale [ceil(k / group_size), n], as Paddle's group_wise_scale.

"w4a8" and "w4afp8" are int4 weights for GEMMs whose activations are int8 or float8 (quant_w4.py). Paddle's
weight_quantize for these two algos is a *pure permutation*: it takes weights already quantized offline (an int8
tensor holding int4 values in [-8, 7]) and only reorders and packs them into the layout its GEMM reads -- no
rounding, no scale (its CPU kernel leaves the scale unset). oarlock does the same for an int8 input: the values
are packed into weight_only_int4's layout [ceil(n/2), k] unchanged (weight_dequantize with the returned unit
scales gives the input back exactly); for a floating input it quantizes first (int4 per channel or group, as
weight_only_int4; float32 scales). Paddle's arch-specific interleave for its CUDA GEMMs is not reproduced.

weight_only_linear(x, w, bias, scale) = x @ dequantize(w) + bias. llm_int8_linear follows LLM.int8(): the input
features whose magnitude reaches `threshold` anywhere in x are multiplied in floating point with the
dequantized weight, the others are quantized per row (absmax / 127, rounded half away from zero) and multiplied
in integers with the int8 weight, then rescaled by the row and channel scales; the two parts are summed."""

from __future__ import annotations

import numpy as np

import oarlock

FUNCTIONS = ("weight_quantize", "weight_dequantize", "weight_only_linear", "llm_int8_linear")
_ALGOS = {"weight_only_int8": 127, "weight_only_int4": 7, "llm.int8": 127, "w4a8": 7, "w4afp8": 7}
INT4_ALGOS = ("weight_only_int4", "w4a8", "w4afp8")
GROUP_SIZES = (-1, 64, 128)


def _round_away(a):
    return np.sign(a) * np.floor(np.abs(a) + 0.5)


def check(fn, algo, arch, group_size):
    if algo not in _ALGOS:
        raise ValueError(f"{fn}(): argument 'algo' = {algo!r}; accepted: {', '.join(map(repr, _ALGOS))}")
    if arch is not None:
        raise NotImplementedError(f"{fn}(): argument 'arch' = {arch!r}: the row interleave of CUDA architectures "
                                  "is not implemented; accepted: None (the plain layout oarlock's kernels read)")
    if isinstance(group_size, bool) or group_size not in GROUP_SIZES:
        raise ValueError(f"{fn}(): argument 'group_size' = {group_size!r}; accepted: -1 (one scale per output "
                         "channel), 64 or 128 (one per group of that many input rows)")
    if algo == "llm.int8" and group_size != -1:
        raise ValueError(f"{fn}(): argument 'group_size' = {group_size!r} with algo 'llm.int8'; accepted: -1 "
                         "(LLM.int8() scales each output channel)")


def host(t, fn, arg):
    if not isinstance(t, oarlock.Tensor):
        raise TypeError(f"{fn}(): argument '{arg}' must be a Tensor; got {type(t).__name__}")
    return t.numpy()


def _groups(k, group_size):
    return 1 if group_size == -1 else -(-k // group_size)


def _expand_groups(scale, k, group_size):
    """scale [n] or [groups, n] -> [k, n]."""
    scale = scale.reshape(-1, scale.shape[-1])
    return np.repeat(scale, k if group_size == -1 else group_size, axis=0)[:k]


def _pack_int4(q):
    """int4 values [n, k] -> two per byte along n: [ceil(n/2), k] (the even row in the low nibble)."""
    if q.shape[0] % 2:
        q = np.concatenate([q, np.zeros_like(q[:1])])
    return ((q[0::2] & 0x0F) | (q[1::2] << 4)).astype(np.int8)


def weight_quantize(x, algo="weight_only_int8", arch=None, group_size=-1):
    """(q int8 [n, k] (int4 algos: [ceil(n/2), k]), scale [n] or [ceil(k/group_size), n]) of the weight x [k, n];
    for "w4a8" / "w4afp8" of an int8 x: the pure permutation, unit scales (see the module docstring)."""
    check("weight_quantize", algo, arch, group_size)
    w = host(x, "weight_quantize", "x")
    if w.ndim != 2:
        raise ValueError(f"weight_quantize(): argument 'x' has shape {list(w.shape)}; accepted: 2-D [k, n]")
    k, n = w.shape
    scale_shape = [n] if group_size == -1 else [_groups(k, group_size), n]
    if w.dtype == np.int8:
        if algo not in ("w4a8", "w4afp8"):
            raise TypeError(f"weight_quantize(): argument 'x' is int8 with algo {algo!r}; accepted: a floating "
                            "weight (an int8 weight, already quantized, only with 'w4a8' or 'w4afp8')")
        if w.size and (w.min() < -8 or w.max() > 7):
            raise ValueError(f"weight_quantize(): argument 'x' holds values in [{w.min()}, {w.max()}]; accepted "
                             f"for an int8 weight with algo {algo!r}: int4 values in [-8, 7]")
        return (oarlock.to_tensor(_pack_int4(np.ascontiguousarray(w.T))),
                oarlock.to_tensor(np.ones(scale_shape, np.float32)))
    w32 = w.astype(np.float32)
    qmax = _ALGOS[algo]
    groups, size = _groups(k, group_size), (k if group_size == -1 else group_size)
    padded = np.pad(np.abs(w32), ((0, groups * size - k), (0, 0)))
    scale = padded.reshape(groups, size, n).max(axis=1) / np.float32(qmax)          # [groups, n]
    safe = np.where(scale == 0, np.float32(1), scale)
    q = np.clip(_round_away(w32 / _expand_groups(safe, k, group_size)), -qmax, qmax).astype(np.int8).T   # [n, k]
    if algo in INT4_ALGOS:
        q = _pack_int4(q)
    scale_dtype = "float32" if algo in ("llm.int8", "w4a8", "w4afp8") else x.dtype
    return oarlock.to_tensor(q), oarlock.to_tensor(scale.reshape(scale_shape)).astype(scale_dtype)


def dequantized(fn, q, scale, algo, group_size=-1):
    """float32 [k, n] of weight_quantize's (q, scale)."""
    qa = host(q, fn, "x" if fn == "weight_dequantize" else "weight").astype(np.int8)
    if algo in INT4_ALGOS:
        low = (qa << 4).astype(np.int8) >> 4          # sign-extend the low nibble
        high = qa >> 4
        qa = np.stack([low, high], axis=1).reshape(-1, qa.shape[1])
    sa = host(scale, fn, "scale" if fn == "weight_dequantize" else "weight_scale").astype(np.float32)
    k = qa.shape[1]
    groups = _groups(k, group_size)
    if sa.ndim != (1 if group_size == -1 else 2) or (group_size != -1 and sa.shape[0] != groups):
        raise ValueError(f"{fn}(): the scale has shape {list(sa.shape)}; accepted with group_size={group_size}: "
                         + ("[n]" if group_size == -1 else f"[{groups}, n]"))
    return qa[:sa.shape[-1]].T.astype(np.float32) * _expand_groups(sa, k, group_size)      # [k, n]


def weight_dequantize(x, scale, algo="weight_only_int8", out_dtype="float16", group_size=-1):
    """The weight [k, n] of weight_quantize's (x, scale), in out_dtype."""
    check("weight_dequantize", algo, None, group_size)
    return oarlock.to_tensor(dequantized("weight_dequantize", x, scale, algo, group_size)).astype(out_dtype)


def weight_only_linear(x, weight, bias=None, weight_scale=None, weight_dtype="int8", arch=None, group_size=-1):
    """x @ dequantize(weight, weight_scale) + bias, in x's dtype (the weight takes no gradient)."""
    algo = {"int8": "weight_only_int8", "int4": "weight_only_int4"}.get(str(weight_dtype).split(".")[-1])
    if algo is None:
        raise ValueError(f"weight_only_linear(): argument 'weight_dtype' = {weight_dtype!r}; accepted: 'int8', 'int4'")
    check("weight_only_linear", algo, arch, group_size)
    if weight_scale is None:
        raise ValueError("weight_only_linear(): argument 'weight_scale' is None; accepted: the scale weight_quantize "
                         "returned")
    w = oarlock.to_tensor(dequantized("weight_only_linear", weight, weight_scale, algo, group_size)).astype(x.dtype)
    out = oarlock.matmul(x, w)
    return out if bias is None else out + bias


def llm_int8_linear(x, weight, bias=None, weight_scale=None, threshold=6.0):
    """LLM.int8() matmul of x [..., k] with weight_quantize(..., 'llm.int8')'s weight [n, k] (see the module
    docstring), plus bias; in x's dtype."""
    if weight_scale is None:
        raise ValueError("llm_int8_linear(): argument 'weight_scale' is None; accepted: the scale weight_quantize "
                         "returned")
    xa = host(x, "llm_int8_linear", "x").astype(np.float32)
    qw = host(weight, "llm_int8_linear", "weight").astype(np.int32)              # [n, k]
    sw = host(weight_scale, "llm_int8_linear", "weight_scale").astype(np.float32)
    if xa.shape[-1] != qw.shape[1]:
        raise ValueError(f"llm_int8_linear(): x's last size {xa.shape[-1]} differs from weight's in_features "
                         f"{qw.shape[1]} (weight {list(qw.shape)})")
    flat = xa.reshape(-1, xa.shape[-1])
    outlier = np.abs(flat).max(axis=0) >= threshold                                 # per input feature
    dense = flat[:, outlier] @ (qw[:, outlier].astype(np.float32) * sw[:, None]).T
    rest = flat[:, ~outlier]
    row_scale = np.abs(rest).max(axis=1, keepdims=True) / 127 if rest.size else np.zeros([flat.shape[0], 1])
    qx = _round_away(rest / np.where(row_scale == 0, 1.0, row_scale)).astype(np.int32)
    quantized = (qx @ qw[:, ~outlier].T).astype(np.float32) * row_scale * sw[None, :]
    out = (dense + quantized).reshape(list(xa.shape[:-1]) + [qw.shape[0]])
    result = oarlock.to_tensor(out).astype(x.dtype)
    return result if bias is None else result + bias
