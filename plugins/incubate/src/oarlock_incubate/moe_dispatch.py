"""paddle.incubate.nn.functional.moe_gate_dispatch and moe_gate_dispatch_permute, as Paddle 3.2's GPU kernels
(paddle/phi/kernels/gpu/moe_gate_dispatch_kernel.cu, moe_fuse_op.h, moe_gate_dispatch_grad_kernel.cu and the
infer-meta in paddle/phi/infermeta/multiary.cc) compute them. Paddle registers these kernels for the GPU only.

Forward, for x [S, H] and gate_logits [S, E] (float32), k, capacity, use_pad:

- No softmax: the kernel (moe_top_k, named "topk_gating_softmax") takes gate_logits as probabilities already.
  The k experts of token s are the top-k of gate_logits[s] + corr_bias (corr_bias [E] float32, or None), the
  highest first, ties to the lower expert id (cub::ArgMax); expert_id [S, k] int32 holds them.
- combine_weights [S, k] float32 = gate_logits[s, expert_id[s, j]] (without the bias).
- Slot (s, j) has the source number j * S + s. The slots are sorted (a stable radix sort) by expert; with
  use_pad by (expert, j, s): in an expert first every token's first choice in token order, then the second
  choices...; without use_pad by (expert, s, j), plain token order.
- expert_offset [E] int64 = the inclusive cumulative count of slots per expert (over-capacity ones included).
- A slot at sorted position d of expert e has row_in_expert = d - (slots of experts < e). If row_in_expert >=
  capacity it is dropped: scatter_index = 0 and combine_weight = 0, and no row of y gets it. Otherwise
  scatter_index = e * capacity + row_in_expert with use_pad (y is [E * capacity, H]) and d without it (y is
  [S * k, H]), and that row of y is x[s].
- scatter_index is [k, S] int32 (slot (s, j) at [j, s]).
Rows of y that receive no token are left uninitialised by Paddle's kernel; here they are zero. Paddle's arg-max
starts from the value -1 (its inputs being probabilities), so scores below -1 would make it pick expert 0; here
the top-k is exact for any scores.

moe_gate_dispatch_permute(..., world_size) is the use_pad dispatch with y laid out for an all-to-all:
[E / world_size local experts, world_size, capacity, H], expert e = rank * (E / world_size) + local at
y[local, rank]; scatter_index keeps the unpermuted numbering e * capacity + row_in_expert.

Backward (moe_gate_dispatch_grad): x_grad[s] = sum over j with combine_weights[s, j] > 0 of
y_grad[scatter_index[j, s]] (not weighted); gate_logits_grad [S, E] float32 is 0 except at [s, expert_id[s, j]],
which gets combine_weights_grad[s, j] where combine_weights[s, j] > 0 (a dropped slot or a zero probability
passes no gradient). corr_bias gets none.

The forward is one op (moe_gate_dispatch_op, internal) whose generic kernel runs on any array library and whose
"gpu" kernel lives in oarlock-cuda (kernels/moe.cu); the backward is written with differentiable ops."""

from __future__ import annotations

import numpy as np

import oarlock
import oarlock.nn.functional as F

FUNCTIONS = ("moe_gate_dispatch", "moe_gate_dispatch_permute")
OP = "moe_gate_dispatch_op"
_op = None   # the callable ops.define returned (set at op registration)


def route(xp, gate_logits, corr_bias, k, capacity, use_pad):
    """The routing of the module docstring on arrays: (combine_weights [S, k] float32, scatter_index [k, S]
    int32, expert_offset [E] int64, expert_id [S, k] int32, y_row [S, k] int64: the row of y each slot fills,
    -1 when dropped)."""
    s, e = gate_logits.shape
    probs = gate_logits.astype(np.float32, copy=False)
    score = probs if corr_bias is None else probs + corr_bias.astype(np.float32, copy=False)
    expert_id = xp.argsort(-score, axis=1, kind="stable")[:, :k]          # ties: the lower expert first
    combine = xp.take_along_axis(probs, expert_id, axis=1).astype(np.float32)
    rows = xp.broadcast_to(xp.arange(s)[:, None], (s, k))
    choice = xp.broadcast_to(xp.arange(k)[None, :], (s, k))
    experts = expert_id.reshape(-1)
    # np.lexsort sorts by its last key first: (expert, choice, token) with use_pad, else (expert, token, choice)
    keys = (rows.reshape(-1), choice.reshape(-1), experts) if use_pad else (choice.reshape(-1), rows.reshape(-1),
                                                                          experts)
    order = xp.lexsort(keys)
    counts = xp.bincount(experts, minlength=e)
    expert_offset = xp.cumsum(counts).astype(np.int64)
    dest = xp.empty(s * k, dtype=np.int64)
    dest[order] = xp.arange(s * k)                                        # sorted position d of each slot
    row_in_expert = dest - (expert_offset - counts)[experts]
    keep = row_in_expert < capacity
    y_row = xp.where(keep, experts * capacity + row_in_expert if use_pad else dest, -1).reshape(s, k)
    keep = keep.reshape(s, k)
    combine = xp.where(keep, combine, np.float32(0))
    scatter_index = xp.where(keep, y_row, 0).T.astype(np.int32)
    return combine, xp.ascontiguousarray(scatter_index), expert_offset, expert_id.astype(np.int32), y_row


def dispatch_kernel(xp, x, gate_logits, corr_bias=None, k=1, capacity=1, use_pad=True):
    """Generic kernel of moe_gate_dispatch_op: (y, combine_weights, scatter_index, expert_offset, expert_id)."""
    s, h = x.shape
    combine, scatter_index, expert_offset, expert_id, y_row = route(xp, gate_logits, corr_bias, k, capacity,
                                                                    use_pad)
    y = xp.zeros((gate_logits.shape[1] * capacity if use_pad else s * k, h), dtype=x.dtype)
    kept = y_row >= 0
    y[y_row[kept]] = x[xp.nonzero(kept)[0]]
    return y, combine, scatter_index, expert_offset, expert_id


def _dispatch_grad(ctx, g_y, g_combine, *_int_grads):
    combine, scatter_index, expert_id = ctx.saved
    (s, h), (_, e) = ctx.meta[0][0], ctx.meta[1][0]
    k = combine.shape[1]
    passes = combine > 0
    dx = dgate = None
    if ctx.edges[0] is not None and g_y is not None:
        picked = oarlock.gather(g_y, scatter_index.transpose([1, 0]).reshape([-1]).astype("int64"), axis=0)
        picked = picked.reshape([s, k, h]) * passes.astype(g_y.dtype).unsqueeze(-1)
        dx = picked.sum(axis=1)
    if ctx.edges[1] is not None and g_combine is not None:
        spread = F.one_hot(expert_id.astype("int64"), e).astype("float32")
        dgate = (spread * (g_combine * passes.astype("float32")).unsqueeze(-1)).sum(axis=1)
    return dx, dgate, None


def _check(fn, x, gate_logits, corr_bias, k, capacity):
    for arg, value in (("x", x), ("gate_logits", gate_logits)):
        if not isinstance(value, oarlock.Tensor):
            raise TypeError(f"{fn}(): argument '{arg}' must be a Tensor; got {type(value).__name__}")
    if x.ndim != 2 or gate_logits.ndim != 2 or x.shape[0] != gate_logits.shape[0]:
        raise ValueError(f"{fn}(): arguments 'x' {list(x.shape)} and 'gate_logits' {list(gate_logits.shape)}; "
                         "accepted: x [num_tokens, hidden] and gate_logits [num_tokens, num_experts]")
    if str(gate_logits.dtype).split(".")[-1] != "float32":
        raise TypeError(f"{fn}(): argument 'gate_logits' has dtype {gate_logits.dtype}; accepted: float32")
    if not str(x.dtype).split(".")[-1].startswith(("float", "bfloat")):
        raise TypeError(f"{fn}(): argument 'x' has dtype {x.dtype}; accepted: a floating dtype")
    e = gate_logits.shape[1]
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= e:
        raise ValueError(f"{fn}(): argument 'k' = {k!r}; accepted: an int from 1 to the number of experts {e}")
    if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity < 1:
        raise ValueError(f"{fn}(): argument 'capacity' = {capacity!r}; accepted: an int >= 1")
    if corr_bias is not None:
        if not isinstance(corr_bias, oarlock.Tensor) or list(corr_bias.shape) != [e] or \
                str(corr_bias.dtype).split(".")[-1] != "float32":
            got = (f"{list(corr_bias.shape)} {corr_bias.dtype}" if isinstance(corr_bias, oarlock.Tensor)
                   else type(corr_bias).__name__)
            raise ValueError(f"{fn}(): argument 'corr_bias' = {got}; accepted: None or a float32 Tensor of shape "
                             f"[num_experts] = [{e}]")


def moe_gate_dispatch(x, gate_logits, corr_bias, k, capacity, use_pad, name=None):
    """Route each token of x [S, H] to the top-k experts of gate_logits [S, E] (+ corr_bias for the choice only)
    with at most `capacity` tokens per expert. Returns (y, combine_weights [S, k] float32, scatter_index [k, S]
    int32, expert_offset [E] int64, expert_id [S, k] int32); y is [E * capacity, H] with use_pad, else
    [S * k, H]. Exact conventions in the module docstring."""
    _check("moe_gate_dispatch", x, gate_logits, corr_bias, k, capacity)
    return _op(x, gate_logits, corr_bias, int(k), int(capacity), bool(use_pad))


def moe_gate_dispatch_permute(x, gate_logits, corr_bias, k, capacity, world_size, name=None):
    """moe_gate_dispatch with use_pad and y laid out [E / world_size, world_size, capacity, H] (local expert
    major, then the rank that holds the expert), ready for an all-to-all. Same five outputs."""
    _check("moe_gate_dispatch_permute", x, gate_logits, corr_bias, k, capacity)
    e = gate_logits.shape[1]
    if isinstance(world_size, bool) or not isinstance(world_size, (int, np.integer)) or world_size < 1 \
            or e % world_size:
        raise ValueError(f"moe_gate_dispatch_permute(): argument 'world_size' = {world_size!r}; accepted: a "
                         f"positive int dividing the number of experts {e}")
    y, *rest = _op(x, gate_logits, corr_bias, int(k), int(capacity), True)
    local = e // world_size
    y = y.reshape([world_size, local, int(capacity), x.shape[1]]).transpose([1, 0, 2, 3])
    return (y, *rest)


def register(ops):
    """Define moe_gate_dispatch_op and its generic kernel."""
    global _op
    _op = ops.define(
        f"{OP}(x: Tensor, gate_logits: Tensor, corr_bias: OptTensor = None, k: int = 1, capacity: int = 1, "
        "use_pad: bool = True) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]",
        internal=True, nondiff=("corr_bias",), grad=_dispatch_grad, saves=("out1", "out2", "out4"),
        doc="Paddle's moe_gate_dispatch kernel: (y, combine_weights, scatter_index, expert_offset, expert_id); "
            "the public API is oarlock.incubate.nn.functional.moe_gate_dispatch.")
    ops.kernel(OP)(dispatch_kernel)
