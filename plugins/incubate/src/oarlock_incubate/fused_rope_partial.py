"""paddle.incubate.nn.functional.fused_partial_rope, as Paddle 3.2's GPU kernel
(paddle/phi/kernels/fusion/gpu/fused_partial_rope_kernel.cu) computes it; Paddle registers it for the GPU and
bfloat16 only, here every floating dtype runs (16-bit ones compute in float32 and round once).

x [batch, seq, heads, head_dim], cos / sin [1, seq, 1, pe_dim] with pe_dim even and at most head_dim. The first
nope_dim = head_dim - pe_dim numbers of each head are copied. The last pe_dim numbers p are first
de-interleaved -- q = (p[0], p[2], ..., p[pe_dim-2], p[1], p[3], ..., p[pe_dim-1]) -- then rotated half against
half (h = pe_dim / 2): out[i] = q[i] cos[i] - q[i + h] sin[i] for i < h and out[i] = q[i] cos[i] + q[i - h] sin[i]
above; the result stays de-interleaved (the kernel stores it that way).

The gradient reaches x only (Paddle's grad kernel has no cos / sin outputs): it is the transposed map, which is
the op again with transpose=True -- r[i] = g[i] cos[i] + g[i + h] sin[i + h], r[i + h] = g[i + h] cos[i + h] -
g[i] sin[i], re-interleaved (p[2i] = r[i], p[2i + 1] = r[i + h]) -- so every order of gradient is one call.
The op (fused_partial_rope_op, internal) has this generic kernel and a "gpu" kernel in oarlock-cuda."""

from __future__ import annotations

import numpy as np

import oarlock

FUNCTIONS = ("fused_partial_rope",)
OP = "fused_partial_rope_op"
_NAME = "fused_partial_rope()"
_op = None


def partial_rope_kernel(xp, x, cos, sin, *, transpose=False):
    """Generic kernel of fused_partial_rope_op (see the module docstring)."""
    d, pe = x.shape[-1], cos.shape[-1]
    h = pe // 2
    work = np.float32 if x.dtype.itemsize < 4 else x.dtype
    part = x[..., d - pe:].astype(work)
    c, s = cos.astype(work), sin.astype(work)
    out = xp.empty(x.shape, dtype=work)
    out[..., :d - pe] = x[..., :d - pe]
    if not transpose:
        q = xp.concatenate([part[..., 0::2], part[..., 1::2]], axis=-1)
        turned = xp.concatenate([-q[..., h:], q[..., :h]], axis=-1)
        out[..., d - pe:] = q * c + turned * s
    else:
        scaled = part * s
        r = part * c + xp.concatenate([scaled[..., h:], -scaled[..., :h]], axis=-1)
        tail = out[..., d - pe:]
        tail[..., 0::2] = r[..., :h]
        tail[..., 1::2] = r[..., h:]
    return out.astype(x.dtype, copy=False)


def _grad(ctx, g):
    cos, sin = ctx.saved
    return _op(g, cos, sin, transpose=not ctx.attrs.get("transpose", False)), None, None


def fused_partial_rope(x, cos, sin):
    """Rotary embedding of the last pe_dim numbers of each head (see the module docstring)."""
    for arg, t in (("x", x), ("cos", cos), ("sin", sin)):
        if not isinstance(t, oarlock.Tensor):
            raise TypeError(f"{_NAME}: argument '{arg}' must be a Tensor; got {type(t).__name__}")
    if x.ndim != 4:
        raise ValueError(f"{_NAME}: argument 'x' has shape {list(x.shape)}; accepted: 4-D [batch, seq_len, "
                         "num_heads, head_dim]")
    _, s, _, d = x.shape
    pe = cos.shape[-1] if cos.ndim == 4 else -1
    for arg, t in (("cos", cos), ("sin", sin)):
        if list(t.shape) != [1, s, 1, pe] or pe % 2 or not 0 < pe <= d:
            raise ValueError(f"{_NAME}: argument '{arg}' has shape {list(t.shape)}; accepted: [1, seq_len, 1, "
                             f"pe_head_dim] = [1, {s}, 1, pe] with pe even, 0 < pe <= head_dim {d}, the same for "
                             "cos and sin")
    return _op(x, cos.detach().astype(x.dtype), sin.detach().astype(x.dtype))


def register(ops):
    """Define fused_partial_rope_op and its generic kernel."""
    global _op
    _op = ops.define(
        f"{OP}(x: Tensor, cos: Tensor, sin: Tensor, *, transpose: bool = False) -> Tensor",
        internal=True, dtypes=("float",), nondiff=("cos", "sin"), grad=_grad, saves=("cos", "sin"),
        doc="Paddle's fused_partial_rope kernel (transpose=True: its transposed map, the gradient); the public "
            "API is oarlock.incubate.nn.functional.fused_partial_rope.")
    ops.kernel(OP)(partial_rope_kernel)
