"""paddle.incubate.nn.functional.fused_rms_norm and fused_layer_norm (Paddle 3.2's signatures and the tuples its
dygraph API really returns, checked against Paddle's CPU kernels):

- x is normalised over the axes from begin_norm_axis on (flattened to [rows, cols]); norm_weight and norm_bias
  have cols numbers.
- With `residual`: h = x + bias + residual (fused_rms_norm) or x + bias + residual_alpha * residual
  (fused_layer_norm), bias being optional; h is normalised and returned as residual_out. Without residual,
  bias is ignored (Paddle's kernels add it only on the residual path), h = x and residual_out is an empty
  Tensor of shape [0].
- fused_rms_norm -> (out, residual_out), out = h / sqrt(mean(h^2) + epsilon) * norm_weight (+ norm_bias).
- fused_layer_norm -> (out, residual_out, mean [rows] float32, invvar [rows] float32: 1/sqrt(var + epsilon),
  which Paddle names "variance"); with norm_weight and norm_bias both None, out is h itself (the fused add).
- quant_scale <= 0 means no quantisation. A positive quant_scale asks for int8 output; Paddle's CPU kernel
  refuses it ("NOT supported quant int8") and so do these functions.
Half-precision inputs compute in float32 and round once. Written with differentiable ops: x, norm_weight,
norm_bias, bias and residual all get gradients."""

from __future__ import annotations

import oarlock

FUNCTIONS = ("fused_rms_norm", "fused_layer_norm")
_HALF = ("float16", "bfloat16")


def _prepare(fn, x, norm_weight, norm_bias, begin_norm_axis, quant_scale, bias, residual):
    """Check the arguments; return (h, cols) with h = x (+ bias + residual handled by the caller)."""
    if not isinstance(x, oarlock.Tensor):
        raise TypeError(f"{fn}(): argument 'x' must be a Tensor; got {type(x).__name__}")
    rank = x.ndim
    axis = begin_norm_axis + rank if begin_norm_axis < 0 else begin_norm_axis
    if not 0 <= axis < rank:
        raise ValueError(f"{fn}(): argument 'begin_norm_axis' = {begin_norm_axis}; accepted: an axis in "
                         f"[{-rank}, {rank}) of x with shape {list(x.shape)}")
    if quant_scale > 0:
        raise NotImplementedError(f"{fn}(): argument 'quant_scale' = {quant_scale} asks for int8 output; accepted: "
                                  "quant_scale <= 0 (no quantisation), as Paddle's CPU kernel ('NOT supported "
                                  "quant int8')")
    cols = 1
    for n in x.shape[axis:]:
        cols *= n
    for arg, t in (("norm_weight", norm_weight), ("norm_bias", norm_bias), ("bias", bias)):
        if t is not None and (not isinstance(t, oarlock.Tensor) or t.size != cols):
            got = list(t.shape) if isinstance(t, oarlock.Tensor) else type(t).__name__
            raise ValueError(f"{fn}(): argument '{arg}' = {got}; accepted: None or a Tensor of the normalised size "
                             f"{cols} (x {list(x.shape)} from axis {axis})")
    if residual is not None and (not isinstance(residual, oarlock.Tensor) or residual.shape != x.shape):
        got = list(residual.shape) if isinstance(residual, oarlock.Tensor) else type(residual).__name__
        raise ValueError(f"{fn}(): argument 'residual' = {got}; accepted: None or a Tensor of x's shape "
                         f"{list(x.shape)}")
    return axis, cols


def _work(t):
    return t.astype("float32") if t is not None and str(t.dtype).split(".")[-1] in _HALF else t


def _fused_input(x, bias, residual, alpha, cols):
    """(h as [rows, cols] in the compute dtype, residual_out in x's dtype)."""
    rows = x.size // cols if cols else 0
    if residual is None:
        return _work(x).reshape([rows, cols]), oarlock.empty([0], dtype=x.dtype)
    h = _work(x) + (_work(residual) if alpha == 1.0 else _work(residual) * alpha)
    h = h.reshape([rows, cols])
    if bias is not None:
        h = h + _work(bias).reshape([cols])
    return h, h.reshape(x.shape).astype(x.dtype)


def _affine(y, weight, bias, cols):
    if weight is not None:
        y = y * _work(weight).reshape([cols])
    if bias is not None:
        y = y + _work(bias).reshape([cols])
    return y


def fused_rms_norm(x, norm_weight, norm_bias, epsilon, begin_norm_axis=1, bias=None, residual=None,
                   quant_scale=-1, quant_round_type=0, quant_max_bound=0, quant_min_bound=0):
    """(out, residual_out): RMS normalisation of x (+ bias + residual) over the axes from begin_norm_axis."""
    _, cols = _prepare("fused_rms_norm", x, norm_weight, norm_bias, begin_norm_axis, quant_scale, bias, residual)
    h, residual_out = _fused_input(x, bias, residual, 1.0, cols)
    y = h * oarlock.rsqrt((h * h).mean(axis=-1, keepdim=True) + float(epsilon))
    out = _affine(y, norm_weight, norm_bias, cols).reshape(x.shape).astype(x.dtype)
    return out, residual_out


def fused_layer_norm(x, norm_weight, norm_bias, epsilon, residual_alpha=1.0, begin_norm_axis=1, bias=None,
                     residual=None, quant_scale=-1, quant_round_type=0, quant_max_bound=0, quant_min_bound=0):
    """(out, residual_out, mean, invvar): layer normalisation of x (+ bias + residual_alpha * residual)."""
    _, cols = _prepare("fused_layer_norm", x, norm_weight, norm_bias, begin_norm_axis, quant_scale, bias, residual)
    h, residual_out = _fused_input(x, bias, residual, float(residual_alpha), cols)
    mean = h.mean(axis=-1, keepdim=True)
    centred = h - mean
    invvar = oarlock.rsqrt((centred * centred).mean(axis=-1, keepdim=True) + float(epsilon))
    if norm_weight is None and norm_bias is None:
        out = h
    else:
        out = _affine(centred * invvar, norm_weight, norm_bias, cols)
    out = out.reshape(x.shape).astype(x.dtype)
    return out, residual_out, mean.reshape([-1]).astype("float32"), invvar.reshape([-1]).astype("float32")
