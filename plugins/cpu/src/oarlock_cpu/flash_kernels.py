"""oarlock-flashmask's forward and backward for masks without vectors (plain causal, or none), float32, in C: the
array functions `flashmask_forward` and `flashmask_backward` of the "cpu" backend (Backend.array_functions), over
oarlock_cpu._gemm's _flash.c (MKL's sgemm on one thread per unit, the units on _gemm's worker pool).

flashmask_forward(q, kt, v, out, lse, kv_heads, causal, block_q, block_k, threads) -> bool fills `out` and `lse`
from the FlashMask kernel's working layouts (see _flash.c and oarlock_flashmask.kernel) and returns True, or
returns False without touching them when the arrays are not ones the C kernel takes (the caller then runs its
own tiles). flashmask_backward(q, do, delta, lse2, k, kt, vt, dk, dv, dqs, group, causal, block_q, block_k) -> bool
likewise accumulates into dk, dv and the tuple of arrays dqs (one per pool piece; see _flash.c).
flashmask_transpose_heads(x, dst, kv_heads, threads) -> bool writes the preparation's K^T (or V^T) of every head,
dst[b * kv_heads + h, d, s] = x[b, s, h, d], and flashmask_gather_heads(x, dst, kv_heads, scale, threads) -> bool
its per-head Q rows, dst[b * kv_heads + h, s * G + g, :D] = scale * x[b, s, h * G + g], on the pool (False: not
taken, nothing written); flashmask_scatter_heads(x, parts, dst, kv_heads, scale, threads) -> bool is the backward's
finish, the other way: dst[b, s, h * G + g] = (x[f, s * G + g] + the parts' rows, in order) * scale. Offered only
where MKL is loaded.

AVX512_TILES: whether the forward and the backward may use _flash_tiles.c's AVX-512 kernels (where the CPU has
AVX-512 and the head dim is a multiple of 16) instead of sgemm and row passes; False keeps the sgemm path (the
tests compare the two).
"""

from __future__ import annotations

from oarlock_cpu import mkl

AVX512_TILES = True


def tiles_available() -> bool:
    """Whether flashmask_forward can use the AVX-512 tiles here (the CPU has AVX-512F and the build targets x86-64)."""
    return mkl.LIBRARY is not None and hasattr(mkl._gemm, "flashmask_tiles") and mkl._gemm.flashmask_tiles()


def flashmask_forward(q, kt, v, out, lse, kv_heads, causal, block_q, block_k, threads) -> bool:
    return mkl._gemm.flashmask_forward(q, kt, v, out, lse, int(kv_heads), bool(causal), int(block_q),
                                       int(block_k), int(threads), AVX512_TILES) is not None


def flashmask_backward(q, do, delta, lse2, k, kt, vt, dk, dv, dqs, group, causal, block_q, block_k) -> bool:
    return mkl._gemm.flashmask_backward(q, do, delta, lse2, k, kt, vt, dk, dv, tuple(dqs), int(group), bool(causal),
                                        int(block_q), int(block_k), AVX512_TILES) is not None


def flashmask_transpose_heads(x, dst, kv_heads, threads) -> bool:
    return mkl._gemm.flashmask_transpose_heads(x, dst, int(kv_heads), int(threads)) is not None


def flashmask_gather_heads(x, dst, kv_heads, scale, threads) -> bool:
    return mkl._gemm.flashmask_gather_heads(x, dst, int(kv_heads), float(scale), int(threads)) is not None


def flashmask_scatter_heads(x, parts, dst, kv_heads, scale, threads) -> bool:
    return mkl._gemm.flashmask_scatter_heads(x, tuple(parts), dst, int(kv_heads), float(scale),
                                             int(threads)) is not None


# (an extension built before _flash.c existed has neither: the kernels then keep their numpy tiles)
FUNCTIONS = {} if mkl.LIBRARY is None or not hasattr(mkl._gemm, "flashmask_backward") else {
    "flashmask_forward": flashmask_forward, "flashmask_backward": flashmask_backward}
if FUNCTIONS and hasattr(mkl._gemm, "flashmask_transpose_heads"):
    FUNCTIONS["flashmask_transpose_heads"] = flashmask_transpose_heads
    FUNCTIONS["flashmask_gather_heads"] = flashmask_gather_heads
if FUNCTIONS and hasattr(mkl._gemm, "flashmask_scatter_heads"):
    FUNCTIONS["flashmask_scatter_heads"] = flashmask_scatter_heads
