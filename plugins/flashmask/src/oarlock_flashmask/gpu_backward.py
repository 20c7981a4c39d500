"""FlashMask attention's backward on the GPU: the kernels of cuda/bwd.cu behind flashmask_attention_grad.

`flashmask_backward_gpu` is kernel.flashmask_backward without `xp` (taken from the inputs, or given as the
keyword `xp`): (dq, dk, dv) of the inputs' dtypes. oarlock_flashmask.gpu registers it for device "gpu" and
compiles NAME_EXPRESSIONS into its kernel family. Three launches, all deterministic (no atomics):

1. fm_bwd_delta<T, D>: delta [B, Hq, Sq] = rowsum(dO * O) (float32) minus grad_lse when given;
2. the pre-pass of gpu.block_stats (per 64-key block min/max of startend_row_indices), when there is a mask;
3. fm_bwd_dkdv<T, D> (a CTA per key block, kv head, batch: dK, dV) and fm_bwd_dq<T, D> (a CTA per query block,
   query head, batch: dQ), recomputing P from lse tile by tile on tensor cores and skipping the tiles the mask
   hides entirely.

The fused path takes grad, query, key, value and out of one dtype (bfloat16 or float16), head dim 64 or 128
(Dv == D), dropout 0 and non-empty inputs; anything else goes to the generic kernel.flashmask_backward with the
same arguments, so behaviour and error messages stay the generic ones. On the fused path the inputs are
validated by kernel.check_inputs (and seed_offset by kernel._seed) first, as the generic kernel does.
"""

from __future__ import annotations

import numpy as np

from oarlock_flashmask import kernel

CTYPES = {"bfloat16": "bf16_t", "float16": "half_t"}
HEAD_DIMS = (64, 128)
KERNELS = ("fm_bwd_delta", "fm_bwd_dkdv", "fm_bwd_dq")
# the template instantiations NVRTC compiles (oarlock_flashmask.gpu adds them to the family's name expressions)
NAME_EXPRESSIONS = [f"{name}<{ctype}, {d}>" for ctype in CTYPES.values() for d in HEAD_DIMS for name in KERNELS]
BLOCK = 64                  # query and key tile (bwd.cu's FM_BWD_BLOCK; the pre-pass's key block)
THREADS = 128               # 4 warps (FM_BWD_THREADS)
DELTA_ROWS = THREADS // 16  # fm_bwd_delta: 16 threads a row
MAX_GRID_YZ = 65535


def smem_bytes(name: str, d: int) -> int:
    """The dynamic shared memory of fm_bwd_dkdv / fm_bwd_dq: six 64-row tiles of D + 8 16-bit elements (the
    block's K and V or Q and dO, and double-buffered Q, dO or K, V), the mask vectors of two tiles (64 keys x 4
    ints each) and, for fm_bwd_dkdv, two tiles' lse and delta (64 floats each)."""
    size = 6 * BLOCK * (d + 8) * 2 + 2 * BLOCK * 4 * 4
    if name == "fm_bwd_dkdv":
        size += 2 * 2 * BLOCK * 4
    return size


def _array_module(a):
    if isinstance(a, np.ndarray):
        return np
    import cupy
    return cupy.get_array_module(a)


def _fused(grad, query, key, value, out, lse, grad_lse, dropout, ctype=None) -> bool:
    """Whether the fused kernels take these inputs (the generic kernel validates and runs the others)."""
    arrays = (grad, query, key, value, out)
    if not all(getattr(a, "ndim", None) == 4 for a in arrays):
        return False
    if any(a.dtype != query.dtype for a in arrays):
        return False
    if (query.dtype.name not in CTYPES) if ctype is None else (query.dtype.itemsize != 2):
        return False
    b, sq, hq, d = query.shape
    sk, hk = key.shape[1], key.shape[2]
    if d not in HEAD_DIMS or key.shape[3] != d or value.shape[3] != d:
        return False
    if tuple(grad.shape) != tuple(query.shape) or tuple(out.shape) != tuple(query.shape):
        return False
    if getattr(lse, "shape", None) is None or tuple(lse.shape) != (b, hq, sq):
        return False
    if grad_lse is not None and tuple(getattr(grad_lse, "shape", ())) != (b, hq, sq):
        return False
    if not isinstance(dropout, (int, float)) or dropout != 0:
        return False
    return (min(b, sq, hq, sk, hk) > 0 and b <= MAX_GRID_YZ and hq <= MAX_GRID_YZ and sq + sk < 2 ** 30
            and b * sq * hq < 2 ** 31)


def _side(w, sq, sk):
    """A window side as the kernels take it: -1 (unbounded), else at most Sk + Sq (which bounds nothing)."""
    return np.int32(-1 if w < 0 else min(w, sk + sq))


def flashmask_backward_gpu(grad, query, key, value, out, lse, startend_row_indices=None, seed_offset=None,
                           grad_lse=None, dropout=0.0, causal=False, window_left=-1, window_right=-1,
                           softmax_scale=None, *, xp=None, ctype=None):
    """(d query, d key, d value) from the output gradient, the inputs, out and lse: kernel.flashmask_backward's
    results, fused where the kernels cover the inputs, else from the generic kernel. `ctype`: the kernels'
    element type (bf16_t / half_t) when the arrays' dtype does not say it (int16 views of bfloat16 data, as cupy
    has no bfloat16 arrays); such inputs must be ones the kernels take."""
    xp = _array_module(query) if xp is None else xp
    if not _fused(grad, query, key, value, out, lse, grad_lse, dropout, ctype):
        if ctype is not None:
            raise ValueError(f"flashmask_backward_gpu(): ctype={ctype!r} given for inputs the fused kernels do not "
                             "take (16-bit arrays of one dtype, head dim 64 or 128, no dropout, non-empty)")
        return kernel.flashmask_backward(xp, grad, query, key, value, out, lse, startend_row_indices, seed_offset,
                                         grad_lse, dropout, causal, window_left, window_right, softmax_scale)
    window = None if window_left < 0 and window_right < 0 else (window_left, window_right)
    if ctype is None:
        kernel.check_inputs(xp, query, key, value, startend_row_indices, causal, window)
    kernel._seed(xp, seed_offset, 0.0, None)   # the generic kernel's check of seed_offset
    from oarlock_flashmask import gpu          # the runtime and the pre-pass (lazily: registration imports this)

    q, k, v, do, o = (xp.ascontiguousarray(a) for a in (query, key, value, grad, out))
    b, sq, hq, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    ctype = ctype or CTYPES[q.dtype.name]
    scale = np.float32(kernel._scale(softmax_scale, d))
    nqb, nkb = -(-sq // BLOCK), -(-sk // BLOCK)
    runtime = gpu.RUNTIME
    device = runtime.device_of(q)
    lse32 = xp.ascontiguousarray(lse, dtype=xp.float32)

    delta = xp.empty((b, hq, sq), dtype=xp.float32)
    glse = delta if grad_lse is None else xp.ascontiguousarray(grad_lse, dtype=xp.float32)
    rows = b * sq * hq
    runtime.launch(runtime.function(gpu.FAMILY, f"fm_bwd_delta<{ctype}, {d}>", device), device,
                   (-(-rows // DELTA_ROWS),), (THREADS,),
                   (do, o, glse, np.int32(grad_lse is not None), delta, np.int32(rows), np.int32(sq), np.int32(hq)))

    if startend_row_indices is not None:
        sri = xp.ascontiguousarray(startend_row_indices)
        hm, c = sri.shape[1], sri.shape[3]
        bmin, bmax = gpu.block_stats(xp, sri, nkb, device)
    else:
        sri = bmin = bmax = xp.zeros((1,), dtype=xp.int32)
        hm, c = 1, 1
    mask = (sri, bmin, bmax, np.int32(startend_row_indices is not None), np.int32(hm), np.int32(c),
            np.int32(bool(causal)), _side(window_left, sq, sk), _side(window_right, sq, sk))
    sizes = (np.int32(sq), np.int32(sk), np.int32(hq), np.int32(hk), scale)

    dq = xp.empty(q.shape, dtype=q.dtype)
    dk = xp.empty(k.shape, dtype=k.dtype)
    dv = xp.empty(v.shape, dtype=v.dtype)
    runtime.launch(runtime.function(gpu.FAMILY, f"fm_bwd_dkdv<{ctype}, {d}>", device), device, (nkb, hk, b),
                   (THREADS,), (q, k, v, do, lse32, delta, *mask, dk, dv, *sizes),
                   shared_bytes=smem_bytes("fm_bwd_dkdv", d))
    runtime.launch(runtime.function(gpu.FAMILY, f"fm_bwd_dq<{ctype}, {d}>", device), device, (nqb, hq, b),
                   (THREADS,), (q, k, v, do, lse32, delta, *mask, dq, *sizes),
                   shared_bytes=smem_bytes("fm_bwd_dq", d))
    return dq, dk, dv


def backward_kernel(xp, grad, query, key, value, out, lse, startend_row_indices=None, seed_offset=None,
                    grad_lse=None, dropout=0.0, causal=False, window_left=-1, window_right=-1, softmax_scale=None):
    """The registered kernel of flashmask_attention_grad (the dispatcher passes xp first)."""
    return flashmask_backward_gpu(grad, query, key, value, out, lse, startend_row_indices, seed_offset, grad_lse,
                                  dropout, causal, window_left, window_right, softmax_scale, xp=xp)
