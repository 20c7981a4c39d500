"""Random fills that write into their output a block at a time: the memory a random op holds beyond its
result is one block of float64 draws, not a float64 copy of the whole result and its transforms.

The values are exactly those of one whole-array draw: a device generator's float64 stream is
sequential (numpy's Generator.random and standard_normal fill element after element; the gpu
CounterGenerator indexes draws by offset), so drawing it in consecutive blocks of the C-ordered output
yields the same numbers, and each block goes through the same float64 arithmetic (scale, shift, one
cast to the output dtype) as the whole array did. `oarlock.seed(n)` keeps reproducing what it did.
"""

from __future__ import annotations

import math

import numpy as np

# values per block: 1 MiB of float64 scratch, small beside any output worth counting and large enough
# that the per-block Python overhead stays a few percent of the drawing itself
BLOCK = 1 << 17


def _flat_parts(out, n_per_block=BLOCK):
    """Consecutive 1-D views of a C-contiguous `out`, BLOCK values each."""
    flat = out.reshape(-1)
    for start in range(0, flat.size, n_per_block):
        yield flat[start:start + n_per_block]


def _contiguous_target(xp, out):
    """(array to fill, whether it must be copied back into out): a strided view is filled through a
    contiguous copy, since reshape(-1) would not be a view of it."""
    if out.flags.c_contiguous:
        return out, False
    return xp.empty(out.shape, dtype=out.dtype), True


def uniform_into(xp, generator, out, low: float, high: float):
    """Fill `out` with samples uniform in [low, high) and return it: low + (high - low) * u in float64 for
    generator.random's u, cast to out's dtype; a value that rounding carried onto `high` wraps to `low`."""
    target, copy_back = _contiguous_target(xp, out)
    span = high - low
    for part in _flat_parts(target):
        u = generator.random(part.shape, dtype=np.float64)
        u *= span
        u += low
        part[...] = u
        part[part >= high] = low
    if copy_back:
        out[...] = target
    return out


def normal_into(xp, generator, out, mean=None, std=None):
    """Fill `out` with generator.standard_normal's float64 z (times std plus mean when they are given: in
    float64) cast to out's dtype, and return it. mean and std are numbers or arrays that broadcast to
    out's shape; arrays are taken a block of leading-axis rows at a time (broadcast views, never a
    broadcast copy)."""
    target, copy_back = _contiguous_target(xp, out)
    affine = mean is not None
    if not affine or (getattr(mean, "ndim", 0) == 0 and getattr(std, "ndim", 0) == 0) or target.ndim == 0:
        parts = ((part, mean, std) for part in _flat_parts(target))
    else:
        rows = max(1, BLOCK // max(1, math.prod(target.shape[1:])))
        mean_b, std_b = xp.broadcast_to(mean, target.shape), xp.broadcast_to(std, target.shape)
        parts = ((target[a:a + rows], mean_b[a:a + rows], std_b[a:a + rows]) for a in range(0, len(target), rows))
    for part, m, s in parts:
        z = generator.standard_normal(part.shape, dtype=np.float64)
        if affine:
            z *= s
            z += m
        part[...] = z
    if copy_back:
        out[...] = target
    return out
