"""paddle.incubate.nn.functional.fused_rms_norm_ext: RMS normalisation over the last axis.

y = x * invvar * scale with invvar = 1 / sqrt(mean(x^2 over the last axis) + epsilon); returns (y, invvar),
invvar in float32 with one value per row (x flattened to [rows, cols], as Paddle documents). Half-precision
inputs are computed in float32 and y is cast back to x's dtype. Written with differentiable ops, so x and scale
get their gradients from autograd (invvar's gradient flows too)."""

from __future__ import annotations

import oarlock

FUNCTIONS = ("fused_rms_norm_ext",)
_HALF = ("float16", "bfloat16")


def fused_rms_norm_ext(x, scale, epsilon=1e-5, name=None):
    """(RMS-normalised x times scale, float32 inverse RMS per row)."""
    for arg, value in (("x", x), ("scale", scale)):
        if not isinstance(value, oarlock.Tensor):
            raise TypeError(f"fused_rms_norm_ext(): argument '{arg}' must be a Tensor; got {type(value).__name__}")
    if x.ndim < 1 or list(scale.shape) != [x.shape[-1]]:
        raise ValueError(f"fused_rms_norm_ext(): argument 'scale' has shape {list(scale.shape)} for x of shape "
                         f"{list(x.shape)}; accepted: [cols] = [{x.shape[-1] if x.ndim else '?'}]")
    dtype = x.dtype
    work = x.astype("float32") if str(dtype).split(".")[-1] in _HALF else x
    invvar = oarlock.rsqrt((work * work).mean(axis=-1, keepdim=True) + float(epsilon))
    y = (work * invvar * scale.astype(work.dtype)).astype(dtype)
    return y, invvar.astype("float32").reshape([-1])
