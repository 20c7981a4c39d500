"""paddle.nn.quant's weight-only and LLM.int8 quantization: weight_quantize, weight_dequantize,
weight_only_linear, llm_int8_linear (Paddle 3.2's signatures).

A weight x [k, n] (in_features, out_features) is quantized per output channel: scale[j] = max_i |x[i, j]| / qmax
(qmax 127 for int8, 7 for int4), q = round(x / scale) with halves rounded away from zero (as Paddle's kernel),
stored transposed as [n, k] int8; int4 packs two values per byte along n ([ceil(n/2), k]: the even row in the
low nibble, the odd row in the high one). "llm.int8" gives Paddle's own CPU result exactly (float32 scales).
Paddle's weight-only kernels also interleave the rows for a CUDA architecture (`arch` 70...90); oarlock's CPU
kernels read the plain layout, so arch must be None here (a given arch is refused with a clear error).
Group-wise scales (group_size 64 / 128) are not supported yet (refused likewise).

weight_only_linear(x, w, bias, scale) = x @ dequantize(w) + bias. llm_int8_linear follows LLM.int8(): the input
features whose magnitude reaches `threshold` anywhere in x are multiplied in floating point with the
dequantized weight, the others are quantized per row (absmax / 127, rounded half away from zero) and multiplied
in integers with the int8 weight, then rescaled by the row and channel scales; the two parts are summed."""

from __future__ import annotations

import numpy as np

import oarlock

FUNCTIONS = ("weight_quantize", "weight_dequantize", "weight_only_linear", "llm_int8_linear")
_ALGOS = {"weight_only_int8": 127, "weight_only_int4": 7, "llm.int8": 127}


def _round_away(a):
    return np.sign(a) * np.floor(np.abs(a) + 0.5)


def _check(fn, algo, arch, group_size):
    if algo not in _ALGOS:
        raise ValueError(f"{fn}(): argument 'algo' = {algo!r}; accepted: {', '.join(map(repr, _ALGOS))}")
    if arch is not None:
        raise NotImplementedError(f"{fn}(): argument 'arch' = {arch!r}: the row interleave of CUDA architectures "
                                  "is not implemented; accepted: None (the plain layout oarlock's kernels read)")
    if group_size != -1:
        raise NotImplementedError(f"{fn}(): argument 'group_size' = {group_size!r}: group-wise scales are not "
                                  "implemented; accepted: -1 (one scale per output channel)")


def _host(t, fn, arg):
    if not isinstance(t, oarlock.Tensor):
        raise TypeError(f"{fn}(): argument '{arg}' must be a Tensor; got {type(t).__name__}")
    return t.numpy()


def weight_quantize(x, algo="weight_only_int8", arch=None, group_size=-1):
    """(q int8 [n, k] (int4: [ceil(n/2), k]), scale [n]) of the weight x [k, n]; see the module docstring."""
    _check("weight_quantize", algo, arch, group_size)
    w = _host(x, "weight_quantize", "x")
    if w.ndim != 2:
        raise ValueError(f"weight_quantize(): argument 'x' has shape {list(w.shape)}; accepted: 2-D [k, n]")
    w32 = w.astype(np.float32)
    qmax = _ALGOS[algo]
    scale = np.abs(w32).max(axis=0) / qmax
    safe = np.where(scale == 0, 1.0, scale)
    q = np.clip(_round_away(w32 / safe), -qmax, qmax).astype(np.int8).T          # [n, k]
    if algo == "weight_only_int4":
        if q.shape[0] % 2:
            q = np.concatenate([q, np.zeros_like(q[:1])])
        q = ((q[0::2] & 0x0F) | (q[1::2] << 4)).astype(np.int8)
    scale_dtype = "float32" if algo == "llm.int8" else x.dtype
    return oarlock.to_tensor(q), oarlock.to_tensor(scale).astype(scale_dtype)


def _dequantized(fn, q, scale, algo, n=None):
    qa = _host(q, fn, "x" if fn == "weight_dequantize" else "weight").astype(np.int8)
    if algo == "weight_only_int4":
        low = (qa << 4).astype(np.int8) >> 4          # sign-extend the low nibble
        high = qa >> 4
        qa = np.stack([low, high], axis=1).reshape(-1, qa.shape[1])
    sa = _host(scale, fn, "scale" if fn == "weight_dequantize" else "weight_scale").astype(np.float32)
    qa = qa[:sa.shape[0]]
    return (qa.astype(np.float32) * sa[:, None]).T                               # [k, n]


def weight_dequantize(x, scale, algo="weight_only_int8", out_dtype="float16", group_size=-1):
    """The weight [k, n] of weight_quantize's (x, scale), in out_dtype."""
    _check("weight_dequantize", algo, None, group_size)
    return oarlock.to_tensor(_dequantized("weight_dequantize", x, scale, algo)).astype(out_dtype)


def weight_only_linear(x, weight, bias=None, weight_scale=None, weight_dtype="int8", arch=None, group_size=-1):
    """x @ dequantize(weight, weight_scale) + bias, in x's dtype (the weight takes no gradient)."""
    algo = {"int8": "weight_only_int8", "int4": "weight_only_int4"}.get(str(weight_dtype).split(".")[-1])
    if algo is None:
        raise ValueError(f"weight_only_linear(): argument 'weight_dtype' = {weight_dtype!r}; accepted: 'int8', 'int4'")
    _check("weight_only_linear", algo, arch, group_size)
    if weight_scale is None:
        raise ValueError("weight_only_linear(): argument 'weight_scale' is None; accepted: the scale weight_quantize "
                         "returned")
    w = oarlock.to_tensor(_dequantized("weight_only_linear", weight, weight_scale, algo)).astype(x.dtype)
    out = oarlock.matmul(x, w)
    return out if bias is None else out + bias


def llm_int8_linear(x, weight, bias=None, weight_scale=None, threshold=6.0):
    """LLM.int8() matmul of x [..., k] with weight_quantize(..., 'llm.int8')'s weight [n, k] (see the module
    docstring), plus bias; in x's dtype."""
    if weight_scale is None:
        raise ValueError("llm_int8_linear(): argument 'weight_scale' is None; accepted: the scale weight_quantize "
                         "returned")
    xa = _host(x, "llm_int8_linear", "x").astype(np.float32)
    qw = _host(weight, "llm_int8_linear", "weight").astype(np.int32)              # [n, k]
    sw = _host(weight_scale, "llm_int8_linear", "weight_scale").astype(np.float32)
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
