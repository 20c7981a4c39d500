"""oarlock-flashmask's forward for masks without vectors (plain causal, or none), float32, in C: the array
function `flashmask_forward` of the "cpu" backend (Backend.array_functions), over oarlock_cpu._gemm's
_flash.c (MKL's sgemm on one thread per unit, the units on _gemm's worker pool).

flashmask_forward(q, kt, v, out, lse, kv_heads, causal, block_q, block_k, threads) -> bool fills `out` and `lse`
from the FlashMask kernel's working layouts (see _flash.c and oarlock_flashmask.kernel) and returns True, or
returns False without touching them when the arrays are not ones the C kernel takes (the caller then runs its
own tiles). Offered only where MKL is loaded.
"""

from __future__ import annotations

from oarlock_cpu import mkl


def flashmask_forward(q, kt, v, out, lse, kv_heads, causal, block_q, block_k, threads) -> bool:
    return mkl._gemm.flashmask_forward(q, kt, v, out, lse, int(kv_heads), bool(causal), int(block_q),
                                       int(block_k), int(threads)) is not None


FUNCTIONS = {} if mkl.LIBRARY is None else {"flashmask_forward": flashmask_forward}
