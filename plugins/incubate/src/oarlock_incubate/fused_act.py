"""paddle.incubate.nn.functional.fused_bias_act and fused_dropout_add (Paddle 3.2).

fused_bias_act(x, bias=None, ..., act_method="gelu"): the activation of x + bias (bias [cols], added over the
last axis before the activation), as Paddle's GPU kernel (fusion/gpu/fused_bias_act_kernel.cu and its
infer-meta) defines it: "gelu" (the exact, erf form: Paddle's fast tanh form only under FLAGS_use_fast_math),
"relu", and the gated "swiglu" = silu(a) * b and "geglu" = gelu(a) * b, where a and b are the two halves of the
last axis (which must be even; the output has half as many columns). The quantisation inputs
(dequant_scales, shift, smooth, compute_dtype other than "default", quant_scale > 0) serve int8 inference
kernels; they are refused here with a clear error. It is one op (fused_bias_act_op, internal) whose generic
kernel computes in float32 for 16-bit inputs (gelu through the ops plugin's generic gelu kernel) and whose
"gpu" kernel is in oarlock-cuda (kernels/bias_act.cu). Differentiable (Paddle's op has no backward): the rule
writes act' with differentiable ops, so higher orders work too.

fused_dropout_add(x, y, p=0.5, training=True, mode="upscale_in_train"): Paddle 3.2 falls back to
dropout(x, p, training, mode) + y (its fused kernel is disabled for precision), and so does this function;
p = 0 is x + y."""

from __future__ import annotations

import math

import numpy as np

import oarlock
import oarlock.nn.functional as F

FUNCTIONS = ("fused_bias_act", "fused_dropout_add")
OP = "fused_bias_act_op"
_ACTS = ("gelu", "relu", "swiglu", "geglu")
_SQRT_HALF = math.sqrt(0.5)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_op = None


def _gelu_array(xp, h):
    """The ops plugin's generic gelu kernel (exact erf form), looked up when first needed."""
    from oarlock.registry import default_registry
    found = default_registry().kernels.get(("gelu", None, None))
    if found is None:
        raise NotImplementedError("fused_bias_act(act_method='gelu' or 'geglu') needs the generic gelu kernel of "
                                  "oarlock-ops, which is not installed")
    return found[0](xp, h)


def bias_act_kernel(xp, x, bias=None, act_method="gelu"):
    """Generic kernel of fused_bias_act_op."""
    work = np.float32 if x.dtype.itemsize < 4 else x.dtype
    h = x.astype(work) if bias is None else x.astype(work) + bias.astype(work)
    if act_method == "relu":
        out = xp.maximum(h, 0)
    elif act_method == "gelu":
        out = _gelu_array(xp, h)
    else:
        half = h.shape[-1] // 2
        a, b = h[..., :half], h[..., half:]
        gate = a / (1 + xp.exp(-a)) if act_method == "swiglu" else _gelu_array(xp, a)
        out = gate * b
    return out.astype(x.dtype, copy=False)


def _gelu_slope(a):
    """d gelu / da = Phi(a) + a phi(a)."""
    return 0.5 * (1.0 + oarlock.erf(a * _SQRT_HALF)) + a * oarlock.exp(-0.5 * a * a) * _INV_SQRT_2PI


def _bias_act_grad(ctx, g):
    x, bias = ctx.saved
    act = ctx.attrs.get("act_method", "gelu")
    h = x if bias is None else x + bias
    if act == "relu":
        dh = g * (h > 0).astype(g.dtype)
    elif act == "gelu":
        dh = g * _gelu_slope(h)
    else:
        a, b = oarlock.chunk(h, 2, axis=-1)
        if act == "swiglu":
            sig = F.sigmoid(a)
            da, db = g * b * sig * (1.0 + a * (1.0 - sig)), g * a * sig
        else:
            da, db = g * b * _gelu_slope(a), g * F.gelu(a)
        dh = oarlock.concat([da, db], axis=-1)
    dbias = None
    if bias is not None and ctx.edges[1] is not None:
        dbias = dh.reshape([-1, dh.shape[-1]]).sum(axis=0)
    return (dh if ctx.edges[0] is not None else None), dbias


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
    if bias is not None and (not isinstance(bias, oarlock.Tensor) or list(bias.shape) != [cols]):
        got = list(bias.shape) if isinstance(bias, oarlock.Tensor) else type(bias).__name__
        raise ValueError(f"fused_bias_act(): argument 'bias' = {got}; accepted: None or [{cols}]")
    if act_method in ("swiglu", "geglu") and cols % 2:
        raise ValueError(f"fused_bias_act(): act_method={act_method!r} needs an even last axis; got x of shape "
                         f"{list(x.shape)}")
    return _op(x, bias, act_method)


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


def register(ops):
    """Define fused_bias_act_op and its generic kernel."""
    global _op
    _op = ops.define(
        f"{OP}(x: Tensor, bias: OptTensor = None, act_method: str = 'gelu') -> Tensor",
        internal=True, promote=True, dtypes=("float",), grad=_bias_act_grad, saves=("x", "bias"),
        doc="Paddle's fused_bias_act kernel (no quantisation); the public API is "
            "oarlock.incubate.nn.functional.fused_bias_act.")
    ops.kernel(OP)(bias_act_kernel)
