"""paddle.incubate.nn.functional.fused_partial_rope, as Paddle 3.2's GPU kernel
(paddle/phi/kernels/fusion/gpu/fused_partial_rope_kernel.cu) computes it; Paddle registers it for the GPU and
bfloat16 only, here every floating dtype runs (16-bit ones compute in float32 and round once).

x [batch, seq, heads, head_dim], cos / sin [1, seq, 1, pe_dim] with pe_dim even and at most head_dim. The first
nope_dim = head_dim - pe_dim numbers of each head are copied. The last pe_dim numbers p are first
de-interleaved -- q = (p[0], p[2], ..., p[pe_dim-2], p[1], p[3], ..., p[pe_dim-1]) -- then rotated half against
half: out[i] = q[i] * cos[i] - q[i + pe_dim/2] * sin[i] for i < pe_dim/2 and
out[i] = q[i] * cos[i] + q[i - pe_dim/2] * sin[i] above; the result stays de-interleaved (the kernel stores
it that way). Gradients reach x only (Paddle's grad kernel has no cos/sin outputs)."""

from __future__ import annotations

import oarlock

FUNCTIONS = ("fused_partial_rope",)
_NAME = "fused_partial_rope()"
_HALF = ("float16", "bfloat16")


def fused_partial_rope(x, cos, sin):
    """Rotary embedding of the last pe_dim numbers of each head (see the module docstring)."""
    for arg, t in (("x", x), ("cos", cos), ("sin", sin)):
        if not isinstance(t, oarlock.Tensor):
            raise TypeError(f"{_NAME}: argument '{arg}' must be a Tensor; got {type(t).__name__}")
    if x.ndim != 4:
        raise ValueError(f"{_NAME}: argument 'x' has shape {list(x.shape)}; accepted: 4-D [batch, seq_len, "
                         "num_heads, head_dim]")
    b, s, h, d = x.shape
    pe = cos.shape[-1] if cos.ndim == 4 else -1
    for arg, t in (("cos", cos), ("sin", sin)):
        if list(t.shape) != [1, s, 1, pe] or pe % 2 or not 0 < pe <= d:
            raise ValueError(f"{_NAME}: argument '{arg}' has shape {list(t.shape)}; accepted: [1, seq_len, 1, "
                             f"pe_head_dim] = [1, {s}, 1, pe] with pe even, 0 < pe <= head_dim {d}, the same for "
                             "cos and sin")
    dtype = x.dtype
    work = x.astype("float32") if str(dtype).split(".")[-1] in _HALF else x
    nope, part = work[..., :d - pe], work[..., d - pe:]
    pairs = part.reshape([b, s, h, pe // 2, 2])
    even, odd = pairs[..., 0], pairs[..., 1]
    c, sn = cos.detach().astype(work.dtype), sin.detach().astype(work.dtype)
    q = oarlock.concat([even, odd], axis=-1)
    turned = oarlock.concat([-odd, even], axis=-1)
    rotated = q * c + turned * sn
    out = oarlock.concat([nope, rotated], axis=-1) if d > pe else rotated
    return out.astype(dtype) if out.dtype != dtype else out
