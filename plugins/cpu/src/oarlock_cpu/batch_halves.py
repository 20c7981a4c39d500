"""Kernels of the "cpu" device that run the generic kernel on the two halves of a batch at once:
scaled_dot_product_attention (forward and backward) and fused_rotary_embedding.

The generic kernels (oarlock-ops) walk the queries in blocks with small matrix products, which OpenBLAS
keeps on one thread (they are under its threading threshold), so a training step's attention used one
core while PyTorch's kernel runs on all of them: in the GPT of `oarlock train` ([16, 128, 4, 32]) the
attention was a third of the step. Batch entries are independent, so here the second half of the batch
runs on the worker thread of oarlock_cpu.parallel while the calling thread runs the first (numpy
releases the GIL in matmul and its ufuncs), and the halves' results are joined (a copy of about 0.1 ms
for the GPT's 4 MiB of probabilities, against milliseconds saved).

Each batch entry is computed by the same code as in one call over the whole batch, so the results are the
same bits, except in the rare block the generic forward redoes with the exact row maximum (its cheap
bound underflowed somewhere in the block): a half redoes only its own rows. Calls stay whole when the
work is small, the batch is 1 (or the input unbatched), another process keeps the second core busy
(oarlock_cpu.parallel's test), or dropout is on (its mask is drawn in one call over the whole batch, so
a seed gives the same mask however the work is split).

Rotary embeddings (numpy's elementwise passes, one core) split the same way over the leading axis of x,
each element computed alone: the same bits.
"""

from __future__ import annotations

from oarlock_cpu import blas
from oarlock_cpu.kernels import generic, register_all
from oarlock_cpu.parallel import run_halves, two_cores

OP = "scaled_dot_product_attention"
GRAD = "_scaled_dot_product_attention_grad"
DTYPES = ("float32", "float64")
MIN_WORK = 1 << 22  # attention's batch x heads x Sq x Sk x D under this (well under a millisecond): one call
MIN_ELEMENTS = 1 << 17  # rotary: elements of x under this (as for oarlock_cpu.parallel.split_ufunc)


def _worth_splitting(query, key, dropout: bool) -> bool:
    if dropout or query.ndim != 4 or key.ndim != 4 or query.shape[0] < 2:
        return False
    b, sq, hq, d = query.shape
    return b * hq * sq * key.shape[1] * d >= MIN_WORK and two_cores()


def _in_halves(half, batch: int):
    """half(slice) over the two halves of the batch at once. Each half's products get one BLAS thread (two
    Python threads each asking OpenBLAS for every core would oversubscribe them)."""
    blas.policy().apply(1, 1, 1)
    return run_halves(half, batch)


def _batch_part(a, ndim: int, batch: int, part: slice):
    """The rows of an operand that broadcasts against a batch of `ndim`-D inputs and belong to a batch
    slice: an operand of that rank with the batch axis is cut, one that broadcasts over the batch is
    passed whole."""
    if a is None or a.ndim != ndim or a.shape[0] != batch:
        return a
    return a[part]


def sdpa(xp, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, training=True, scale=None, *,
         generator):
    kernel = generic(OP)
    dropout = bool(dropout_p) and training
    if not _worth_splitting(query, key, dropout):
        return kernel(xp, query, key, value, attn_mask, dropout_p, is_causal, training, scale, generator=generator)
    batch = query.shape[0]

    def half(part):
        return kernel(xp, query[part], key[part], value[part], _batch_part(attn_mask, 4, batch, part), dropout_p,
                      is_causal, training, scale, generator=generator)

    (out_a, probs_a, keep), (out_b, probs_b, _) = _in_halves(half, batch)
    # no dropout: `keep` is the generic kernel's placeholder, the same in both halves
    return xp.concatenate([out_a, out_b]), xp.concatenate([probs_a, probs_b]), keep


def sdpa_grad(xp, grad, query, key, value, out, probs, keep, dropout_p=0.0, scale=None, is_causal=False):
    kernel = generic(GRAD)
    if not _worth_splitting(query, key, bool(dropout_p)):
        return kernel(xp, grad, query, key, value, out, probs, keep, dropout_p, scale, is_causal)
    batch = query.shape[0]

    def half(part):
        return kernel(xp, grad[part], query[part], key[part], value[part], out[part], probs[part], keep,
                      dropout_p, scale, is_causal)

    first, second = _in_halves(half, batch)
    return tuple(xp.concatenate([a, b]) for a, b in zip(first, second))


ROTARY = "fused_rotary_embedding"


def rotary(xp, x, cos, sin, *, transpose=False):
    kernel = generic(ROTARY)
    if x.ndim < 2 or x.shape[0] < 2 or x.size < MIN_ELEMENTS or not two_cores():
        return kernel(xp, x, cos, sin, transpose=transpose)
    batch = x.shape[0]

    def half(part):
        return kernel(xp, x[part], _batch_part(cos, x.ndim, batch, part), _batch_part(sin, x.ndim, batch, part),
                      transpose=transpose)

    return xp.concatenate(_in_halves(half, batch))


KERNELS = {OP: sdpa, GRAD: sdpa_grad, ROTARY: rotary}


def register(ops):
    register_all(ops, KERNELS, DTYPES)
