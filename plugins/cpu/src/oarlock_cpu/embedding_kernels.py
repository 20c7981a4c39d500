"""The "cpu" device's embedding backward for float32 and float64: the rows of the upstream gradient added into
their ids' rows in one C pass (oarlock_cpu._rows.embedding_grad, columns split over the free cores), where the
generic kernel sorts the ids, gathers the rows in that order and sums each run (argsort, a copy, reduceat).

It overrides, for device "cpu", the ops plugin's kernel of the internal op

    _embedding_grad(x, g, num_embeddings, padding_idx=None, scale_grad_by_freq=False) -> [num_embeddings, D]

for integer ids and a float32/float64 gradient, without padding_idx or scale_grad_by_freq (those, and anything
else, go to the generic kernel). Each row sums its contributions in the order the ids come (PyTorch's CPU order),
so its last bits may differ from the generic kernel's sorted order.
"""

from __future__ import annotations

import numpy as np

from oarlock_cpu.kernels import generic, register_all
from oarlock_cpu.parallel import sync_threads

try:
    from oarlock_cpu import _rows
except ImportError:  # never built: the generic kernels stay in charge
    _rows = None


def embedding_grad(xp, x, g, num_embeddings=0, padding_idx=None, scale_grad_by_freq=False):
    if (padding_idx is not None or scale_grad_by_freq or x.__class__ is not np.ndarray or x.dtype.kind not in "iu"
            or g.__class__ is not np.ndarray or g.dtype not in (np.float32, np.float64) or g.ndim < 1
            or g.size == 0 or x.size * g.shape[-1] != g.size):
        return generic("_embedding_grad")(xp, x, g, num_embeddings=num_embeddings, padding_idx=padding_idx,
                                          scale_grad_by_freq=scale_grad_by_freq)
    dim = g.shape[-1]
    out = np.zeros((num_embeddings, dim), dtype=g.dtype)
    sync_threads()
    _rows.embedding_grad(np.ascontiguousarray(x.reshape(-1), dtype=np.int64),
                         np.ascontiguousarray(g.reshape(-1, dim)), out)
    return out


KERNELS = {"_embedding_grad": embedding_grad}


def register(ops):
    """Register the embedding backward for device "cpu" (float32, float64); nothing when the extension lacks it."""
    if _rows is not None and hasattr(_rows, "embedding_grad"):
        register_all(ops, KERNELS)
