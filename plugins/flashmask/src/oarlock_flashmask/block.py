"""FlashMask V2's block_mask as an op pair of its own (flashmask_block_attention_op and its grad): the same CPU
kernels as flashmask_attention_op (generic over the array module) with the block mask passed through, so the
existing op's signature and its fused CUDA kernels, which have no block mask, stay as they are.

block_mask: int32 [batch, heads of startend_row_indices, ceil(seq_len_q / 128), ceil(seq_len_k / 128)]; an entry
of 0 masks its 128 x 128 block of scores (rows 128 i .. 128 i + 127, columns 128 j .. 128 j + 127) on top of what
startend_row_indices, causal and the window mask; a non-zero entry leaves that block to them. The CPU kernel's
tile classification skips tiles every entry of which masks them, so sparse block masks cost only their blocks.
"""

from __future__ import annotations

import oarlock

from oarlock_flashmask import kernel

OP = "flashmask_block_attention_op"
GRAD = "flashmask_block_attention_grad"

forward_op = grad_op = None  # ops.define's callables, set by register


def _forward(xp, query, key, value, startend_row_indices, block_mask, fixed_seed_offset=None, dropout=0.0,
             causal=False, window_left=-1, window_right=-1, softmax_scale=None, *, generator=None):
    return kernel.flashmask_forward(xp, query, key, value, startend_row_indices, fixed_seed_offset, dropout, causal,
                                    window_left, window_right, softmax_scale, generator=generator,
                                    block_mask=block_mask)


def _backward(xp, grad, query, key, value, out, lse, startend_row_indices, block_mask, seed_offset=None,
              grad_lse=None, dropout=0.0, causal=False, window_left=-1, window_right=-1, softmax_scale=None):
    return kernel.flashmask_backward(xp, grad, query, key, value, out, lse, startend_row_indices, seed_offset,
                                     grad_lse, dropout, causal, window_left, window_right, softmax_scale,
                                     block_mask=block_mask)


def _rule(ctx, g_out, g_lse, _g_seed):
    q, k, v, sri, bm, out, lse, seed_offset = ctx.saved
    a = ctx.attrs
    if g_out is None:
        g_out = oarlock.zeros_like(out)
    dq, dk, dv = grad_op(g_out, q, k, v, out, lse, sri, bm, seed_offset, g_lse, a["dropout"], a["causal"],
                         a["window_left"], a["window_right"], a["softmax_scale"])
    return dq, dk, dv, None, None, None


def register(ops):
    global forward_op, grad_op
    attrs = ("dropout: float = 0.0, causal: bool = False, window_left: int = -1, window_right: int = -1, "
             "softmax_scale: float|None = None")
    forward_op = ops.define(
        f"{OP}(query: Tensor, key: Tensor, value: Tensor, startend_row_indices: Tensor, block_mask: Tensor, "
        f"fixed_seed_offset: OptTensor = None, {attrs}) -> tuple[Tensor, Tensor, Tensor]",
        internal=True, promote=("query", "key", "value"), dtypes=("float",),
        nondiff=("startend_row_indices", "block_mask", "fixed_seed_offset"), random=True, grad=_rule,
        saves=("query", "key", "value", "startend_row_indices", "block_mask", "out", "out1", "out2"),
        doc="FlashMask attention with FlashMask V2's block_mask: (out, lse [B, Hq, Sq], seed_offset int64 [2]); "
            "the public API is oarlock.nn.functional.flashmask_attention(..., block_mask=...).")
    ops.kernel(OP)(_forward)
    grad_op = ops.define(
        f"{GRAD}(grad: Tensor, query: Tensor, key: Tensor, value: Tensor, out: Tensor, lse: Tensor, "
        "startend_row_indices: Tensor, block_mask: Tensor, seed_offset: OptTensor = None, grad_lse: OptTensor = None, "
        f"{attrs}) -> tuple[Tensor, Tensor, Tensor]",
        internal=True, promote=("grad", "query", "key", "value", "out"), dtypes=("float",),
        doc="The backward of flashmask_block_attention_op: (d query, d key, d value).")
    ops.kernel(GRAD)(_backward)
