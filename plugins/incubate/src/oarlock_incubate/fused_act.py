"""paddle.incubate.nn.functional.fused_bias_act and fused_dropout_add (Paddle 3.2).

fused_bias_act(x, bias=None, ..., act_method="gelu"): the activation of x + bias (bias [cols], added over the
last axis before the activation), as Paddle's GPU kernel (fusion/gpu/fused_bias_act_kernel.cu and its
infer-meta) defines it: "gelu" (the exact, erf form: Paddle's fast tanh form only under FLAGS_use_fast_math),
"relu", and the gated "swiglu" = silu(a) * b and "geglu" = gelu(a) * b, where a and b are the two halves of the
last axis (which must be even; the output has half as many columns). The quantisation inputs
(dequant_scales, shift, smooth, compute_dtype other than "default", quant_scale > 0) serve int8 inference
kernels; they are refused here with a clear error. Differentiable (Paddle's op has no backward; the gradient
here is autograd's).

fused_dropout_add(x, y, p=0.5, training=True, mode="upscale_in_train"): Paddle 3.2 falls back to
dropout(x, p, training, mode) + y (its fused kernel is disabled for precision), and so does this function;
p = 0 is x + y."""

from __future__ import annotations

import oarlock
import oarlock.nn.functional as F

FUNCTIONS = ("fused_bias_act", "fused_dropout_add")
_ACTS = ("gelu", "relu", "swiglu", "geglu")


def fused_bias_act(x, bias=None, dequant_scales=None, shift=None, smooth=None, act_method="gelu",
                   compute_dtype="default", quant_scale=-1, quant_round_type=0, quant_max_bound=0,
                   quant_min_bound=0):
    """act(x + bias); swiglu / geglu gate the first half of the last axis by the second."""
    if not isinstance(x, oarlock.Tensor):
        raise TypeError(f"fused_bias_act(): argument 'x' must be a Tensor; got {type(x).__name__}")
    if act_method not in _ACTS:
        raise ValueError(f"fused_bias_act(): argument 'act_method' = {act_method!r}; accepted: one of {_ACTS}")
    for arg, value in (("dequant_scales", dequant_scales), ("shift", shift), ("smooth", smooth)):
        if value is not None:
            raise NotImplementedError(f"fused_bias_act(): argument '{arg}' serves Paddle's int8 inference kernel; "
                                      "accepted: None")
    if compute_dtype != "default" or quant_scale > 0:
        raise NotImplementedError(f"fused_bias_act(): compute_dtype={compute_dtype!r}, quant_scale={quant_scale} "
                                  "ask for Paddle's quantised kernel; accepted: compute_dtype='default' and "
                                  "quant_scale <= 0")
    if x.ndim < 2:
        raise ValueError(f"fused_bias_act(): argument 'x' has shape {list(x.shape)}; accepted: at least 2-D")
    cols = x.shape[-1]
    if bias is not None:
        if not isinstance(bias, oarlock.Tensor) or list(bias.shape) != [cols]:
            got = list(bias.shape) if isinstance(bias, oarlock.Tensor) else type(bias).__name__
            raise ValueError(f"fused_bias_act(): argument 'bias' = {got}; accepted: None or [{cols}]")
        x = x + bias
    if act_method == "relu":
        return F.relu(x)
    if act_method == "gelu":
        return F.gelu(x)
    if cols % 2:
        raise ValueError(f"fused_bias_act(): act_method={act_method!r} needs an even last axis; got x of shape "
                         f"{list(x.shape)}")
    a, b = oarlock.chunk(x, 2, axis=-1)
    return (F.silu(a) if act_method == "swiglu" else F.gelu(a)) * b


def fused_dropout_add(x, y, p=0.5, training=True, mode="upscale_in_train", name=None):
    """dropout(x, p, training, mode) + y."""
    if not isinstance(p, (int, float)) or isinstance(p, bool) or not 0 <= p <= 1:
        raise ValueError(f"fused_dropout_add(): argument 'p' = {p!r}; accepted: a number in [0, 1]")
    if mode not in ("upscale_in_train", "downscale_in_infer"):
        raise ValueError(f"fused_dropout_add(): argument 'mode' = {mode!r}; accepted: 'upscale_in_train' or "
                         "'downscale_in_infer'")
    if p == 0:
        return x + y
    return F.dropout(x, p=float(p), training=training, mode=mode) + y
