"""Entry point of oarlock-flashmask: the flashmask_attention op pair, flashmask_to_densemask and the public
wrapper oarlock.nn.functional.flashmask_attention (Paddle 3.2's signature)."""

from __future__ import annotations

import oarlock
from oarlock import hookimpl

from oarlock_flashmask import block, flash_api, gpu, kernel, masks

_OP = "flashmask_attention_op"
_GRAD = "flashmask_attention_grad"

# The two internal ops (no public name), as the callables ops.define returned; also reachable as
# oarlock.ops.flashmask.flashmask_attention_op / flashmask_attention_grad.
_forward_op = _grad_op = None


def _grad_rule(ctx, g_out, g_lse, _g_seed):
    q, k, v, sri, out, lse, seed_offset = ctx.saved
    a = ctx.attrs
    if g_out is None:
        g_out = oarlock.zeros_like(out)
    dq, dk, dv = _grad_op(
        g_out, q, k, v, out, lse, sri, seed_offset, g_lse, a["dropout"], a["causal"], a["window_left"],
        a["window_right"], a["softmax_scale"])
    return dq, dk, dv, None, None


def flashmask_attention(query, key, value, startend_row_indices=None, *, dropout=0.0, causal=False,
                        window_size=None, return_softmax_lse=False, return_seed_offset=False,
                        fixed_seed_offset=None, rng_name="", training=True, name=None, softmax_scale=None,
                        block_mask=None):
    """FlashMask attention over [batch, seq_len, num_heads, head_dim] (Paddle's layout) with a column-wise sparse
    mask `startend_row_indices` [batch, 1 | kv_heads | q_heads, seq_len_k, 1 | 2 | 4] (int32); see
    oarlock_flashmask.kernel for the exact semantics. Returns out, or a tuple (out[, lse][, seed_offset]) when
    return_softmax_lse / return_seed_offset are set. window_size: an int w (causal: query i sees keys [i-w, i];
    non-causal: (w, w)) or (left, right); with seq_len_q != seq_len_k it aligns bottom-right like causal.
    Dropout (when training) uses fixed_seed_offset (seed, offset) if given, else a seed from the device generator;
    the same seed/offset reproduces output and gradients. block_mask (FlashMask V2, with startend_row_indices):
    int32 [batch, heads of startend_row_indices, ceil(seq_len_q / 128), ceil(seq_len_k / 128)], an entry of 0
    masking its 128 x 128 block of scores besides what the rest masks (oarlock_flashmask.block)."""
    if not isinstance(dropout, (int, float)) or isinstance(dropout, bool) or not 0.0 <= dropout <= 1.0:
        raise ValueError(f"flashmask_attention(): argument 'dropout' = {dropout!r}; accepted: a float in [0, 1]")
    wl = wr = -1
    if window_size is not None:
        if startend_row_indices is not None:
            raise ValueError("flashmask_attention(): argument 'window_size' was given together with "
                             "startend_row_indices; accepted: one of them, not both")
        if isinstance(window_size, int) and not isinstance(window_size, bool):
            wl, wr = window_size, (0 if causal else window_size)
        elif isinstance(window_size, (tuple, list)) and len(window_size) == 2 and \
                all(isinstance(w, int) and not isinstance(w, bool) for w in window_size):
            wl, wr = window_size
        else:
            raise ValueError(f"flashmask_attention(): argument 'window_size' = {window_size!r}; accepted: None, an "
                             "int or a pair (left, right) of ints")
        if wl < 0 or wr < 0:
            raise ValueError(f"flashmask_attention(): argument 'window_size' = {window_size!r}; accepted: "
                             "non-negative sizes")
    if fixed_seed_offset is not None and not isinstance(fixed_seed_offset, oarlock.Tensor):
        fixed_seed_offset = oarlock.to_tensor(list(fixed_seed_offset), dtype="int64")
    p = float(dropout) if training else 0.0
    scale = None if softmax_scale is None else float(softmax_scale)
    if block_mask is None:
        out, lse, seed_offset = _forward_op(query, key, value, startend_row_indices, fixed_seed_offset, p,
                                            bool(causal), wl, wr, scale)
    else:
        if startend_row_indices is None:
            raise ValueError("flashmask_attention(): argument 'block_mask' was given without startend_row_indices; "
                             "accepted: block_mask together with startend_row_indices (as in Paddle)")
        out, lse, seed_offset = block.forward_op(query, key, value, startend_row_indices, block_mask,
                                                 fixed_seed_offset, p, bool(causal), wl, wr, scale)
    result = [out]
    if return_softmax_lse:
        result.append(lse)
    if return_seed_offset:
        result.append(seed_offset)
    return result[0] if len(result) == 1 else tuple(result)


@hookimpl
def oarlock_register_ops(ops):
    global _forward_op, _grad_op
    _forward_op = ops.define(
        f"{_OP}(query: Tensor, key: Tensor, value: Tensor, startend_row_indices: OptTensor = None, "
        "fixed_seed_offset: OptTensor = None, dropout: float = 0.0, causal: bool = False, "
        "window_left: int = -1, window_right: int = -1, softmax_scale: float|None = None) "
        "-> tuple[Tensor, Tensor, Tensor]",
        internal=True, promote=("query", "key", "value"), dtypes=("float",),
        nondiff=("startend_row_indices", "fixed_seed_offset"), random=True, grad=_grad_rule,
        saves=("query", "key", "value", "startend_row_indices", "out", "out1", "out2"),
        doc="FlashMask attention kernel: (out, lse [B, Hq, Sq], seed_offset int64 [2]); the public API is "
            "oarlock.nn.functional.flashmask_attention.")
    ops.kernel(_OP)(kernel.flashmask_forward)
    _grad_op = ops.define(
        f"{_GRAD}(grad: Tensor, query: Tensor, key: Tensor, value: Tensor, out: Tensor, lse: Tensor, "
        "startend_row_indices: OptTensor = None, seed_offset: OptTensor = None, grad_lse: OptTensor = None, "
        "dropout: float = 0.0, causal: bool = False, window_left: int = -1, window_right: int = -1, "
        "softmax_scale: float|None = None) -> tuple[Tensor, Tensor, Tensor]",
        internal=True, promote=("grad", "query", "key", "value", "out"), dtypes=("float",),
        doc="The backward of flashmask_attention: (d query, d key, d value), recomputed tile by tile from "
            "lse; grad_lse is the gradient that reached lse (or None).")
    ops.kernel(_GRAD)(kernel.flashmask_backward)
    ops.define("flashmask_to_densemask(startend_row_indices: Tensor, dtype: DType = 'float32', causal: bool = True) "
               "-> Tensor", public=["oarlock.nn.functional.flashmask_to_densemask"], dtypes=("int",),
               doc="The dense additive mask [B, Hm, S, S] (0 allowed, -inf masked) of FlashMask's "
                   "startend_row_indices, as in Paddle's docs.")
    ops.kernel("flashmask_to_densemask")(kernel.densemask)
    block.register(ops)
    gpu.register(ops)


@hookimpl
def oarlock_register_api(api):
    api.export("oarlock.nn.functional", "flashmask_attention", flashmask_attention)
    masks.register_api(api)
    flash_api.register_api(api)
