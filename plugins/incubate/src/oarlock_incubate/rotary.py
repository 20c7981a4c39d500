"""paddle.incubate.nn.functional.fused_rotary_position_embedding (Paddle 3.2's signature and semantics).

Each of q, k, v [batch, seq, heads, head_dim] ([seq, batch, ...] with time_major) is rotated by the angles
whose sines and cosines are `sin` / `cos` ([seq, head_dim] or [1, seq, 1, head_dim]; rows picked by
`position_ids` [batch, seq] when given):

- use_neox_rotary_style=True rotates every two adjacent numbers: out[2i] = x[2i] cos[2i] - x[2i+1] sin[2i],
  out[2i+1] = x[2i+1] cos[2i+1] + x[2i] sin[2i+1];
- use_neox_rotary_style=False rotates the front half against the back half (rotate_half):
  out[i] = x[i] cos[i] - x[i+d/2] sin[i], out[i+d/2] = x[i+d/2] cos[i+d/2] + x[i] sin[i+d/2].

Without sin/cos the angles are position * rotary_emb_base^(-2j/head_dim) for pair j, each used for both
numbers of its pair (Paddle allows this only in the neox style and without position_ids). Like Paddle's fused
kernel, gradients flow to q, k and v only, never to sin and cos; half-precision inputs are computed in float32.
The rotation is written with differentiable ops, so backward is the transposed rotation autograd derives."""

from __future__ import annotations

import oarlock

FUNCTIONS = ("fused_rotary_position_embedding",)
_NAME = "fused_rotary_position_embedding()"
_HALF = ("float16", "bfloat16")


def _check_input(arg, x, ref_shape):
    if not isinstance(x, oarlock.Tensor):
        raise TypeError(f"{_NAME}: argument '{arg}' must be a Tensor; got {type(x).__name__}")
    if x.ndim != 4 or x.shape[-1] % 2:
        raise ValueError(f"{_NAME}: argument '{arg}' has shape {list(x.shape)}; accepted: 4-D [batch, seq_len, "
                         "num_heads, head_dim] (or [seq_len, batch, ...] with time_major) with an even head_dim")
    if ref_shape is not None and (x.shape[:2] != ref_shape[:2] or x.shape[-1] != ref_shape[-1]):
        raise ValueError(f"{_NAME}: argument '{arg}' has shape {list(x.shape)}, which does not match q's "
                         f"{list(ref_shape)}; accepted: the same batch, seq_len and head_dim (num_heads may differ)")


def _table(arg, t, seq_len, head_dim, position_ids):
    """sin or cos as [seq, head_dim] rows (or [batch, seq, head_dim] gathered by position_ids)."""
    if not isinstance(t, oarlock.Tensor):
        raise TypeError(f"{_NAME}: argument '{arg}' must be a Tensor; got {type(t).__name__}")
    shape = list(t.shape)
    ok = (len(shape) == 2 or (len(shape) == 4 and shape[0] == 1 and shape[2] == 1)) and shape[-1] == head_dim
    rows = shape[-3] if len(shape) == 4 else shape[0] if len(shape) == 2 else None
    if ok and position_ids is None and rows != seq_len:
        ok = False
    if not ok:
        raise ValueError(f"{_NAME}: argument '{arg}' has shape {shape}; accepted: [seq_len, head_dim] or "
                         f"[1, seq_len, 1, head_dim] with head_dim {head_dim} and seq_len {seq_len} (any number of "
                         "rows, at least the largest position id + 1, when position_ids is given)")
    table = t.detach().reshape([rows, head_dim])
    if position_ids is not None:
        table = oarlock.gather(table, position_ids.reshape([-1]).astype("int64"), axis=0)
        table = table.reshape(list(position_ids.shape) + [head_dim])
    return table


def _default_tables(seq_len, head_dim, base):
    """Paddle's angles when sin/cos are omitted: pair j turns by position * base^(-2j/head_dim)."""
    inv_freq = 1.0 / (base ** (oarlock.arange(0, head_dim, 2, dtype="float32") / head_dim))
    angles = oarlock.arange(seq_len, dtype="float32").unsqueeze(1) * inv_freq.unsqueeze(0)
    angles = oarlock.stack([angles, angles], axis=-1).reshape([seq_len, head_dim])   # both numbers of a pair
    return oarlock.sin(angles), oarlock.cos(angles)


def _rotate(x, sin, cos, neox):
    dtype = x.dtype
    work = x.astype("float32") if str(dtype).split(".")[-1] in _HALF else x
    if neox:   # every two adjacent numbers: (a, b) -> (-b, a)
        pairs = work.reshape(list(work.shape[:-1]) + [work.shape[-1] // 2, 2])
        turned = oarlock.stack([-pairs[..., 1], pairs[..., 0]], axis=-1).reshape(work.shape)
    else:      # front half against back half: (a, b) -> (-b, a)
        front, back = oarlock.chunk(work, 2, axis=-1)
        turned = oarlock.concat([-back, front], axis=-1)
    out = work * cos.astype(work.dtype) + turned * sin.astype(work.dtype)
    return out.astype(dtype) if out.dtype != dtype else out


def fused_rotary_position_embedding(q, k=None, v=None, sin=None, cos=None, position_ids=None,
                                    use_neox_rotary_style=True, time_major=False, rotary_emb_base=10000.0):
    """Rotary position embedding of q, k and v; returns (out_q, out_k, out_v), None for an input not given.
    See the module docstring for the exact formulas."""
    _check_input("q", q, None)
    for arg, x in (("k", k), ("v", v)):
        if x is not None:
            _check_input(arg, x, q.shape)
    seq_axis = 0 if time_major else 1
    seq_len, head_dim = q.shape[seq_axis], q.shape[-1]
    batch = q.shape[1 - seq_axis]
    if (sin is None) != (cos is None):
        raise ValueError(f"{_NAME}: only one of 'sin' and 'cos' was given; accepted: both or neither")
    if position_ids is not None:
        if sin is None:
            raise ValueError(f"{_NAME}: argument 'position_ids' was given without sin/cos; accepted: "
                             "position_ids only together with sin and cos (as in Paddle)")
        if not isinstance(position_ids, oarlock.Tensor) or list(position_ids.shape) != [batch, seq_len]:
            got = list(position_ids.shape) if isinstance(position_ids, oarlock.Tensor) else type(position_ids).__name__
            raise ValueError(f"{_NAME}: argument 'position_ids' = {got}; accepted: an int Tensor of shape "
                             f"[batch_size, seq_len] = {[batch, seq_len]}")
    if sin is None:
        if not use_neox_rotary_style:
            raise ValueError(f"{_NAME}: use_neox_rotary_style=False needs sin and cos; accepted: pass sin and "
                             "cos, or use_neox_rotary_style=True (as in Paddle)")
        sin, cos = _default_tables(seq_len, head_dim, float(rotary_emb_base))
    else:
        sin = _table("sin", sin, seq_len, head_dim, position_ids)
        cos = _table("cos", cos, seq_len, head_dim, position_ids)
    # broadcast over heads (and batch): [seq, 1, d] rows, or [batch, seq, 1, d] gathered ones
    sin, cos = sin.unsqueeze(-2), cos.unsqueeze(-2)
    if time_major and sin.ndim == 4:          # gathered [batch, seq, 1, d] -> [seq, batch, 1, d]
        sin, cos = sin.transpose([1, 0, 2, 3]), cos.transpose([1, 0, 2, 3])
    elif time_major:                          # [seq, 1, d] -> [seq, 1, 1, d]
        sin, cos = sin.unsqueeze(1), cos.unsqueeze(1)
    neox = bool(use_neox_rotary_style)
    return tuple(None if x is None else _rotate(x, sin, cos, neox) for x in (q, k, v))
