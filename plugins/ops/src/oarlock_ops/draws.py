"""Random fills that write into their output a block at a time: the memory a random op holds beyond its
result is one block of float64 draws, not a float64 copy of the whole result and its transforms.

The values are exactly those of one whole-array draw: a device generator's float64 stream is
sequential (numpy's Generator.random and standard_normal fill element after element; the gpu
CounterGenerator indexes draws by offset), so drawing it in consecutive blocks of the C-ordered output
yields the same numbers, and each block goes through the same float64 arithmetic (scale, shift, one
cast to the output dtype) as the whole array did. `oarlock.seed(n)` keeps reproducing what it did.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import threading

import numpy as np

# values per block: 1 MiB of float64 scratch, small beside any output worth counting and large enough
# that the per-block Python overhead stays a few percent of the drawing itself
BLOCK = 1 << 17


def _blocks(shape):
    """Index tuples of consecutive blocks (in C order) of at most BLOCK values of an array of `shape`: the
    first axis whose trailing size fits a block is sliced, the axes before it are stepped one by one.
    (Ellipsis,) stands for the whole array: x[()] of a 0-d array would be a scalar, not a view."""
    shape = tuple(shape)
    if math.prod(shape) <= BLOCK:   # one block: the common small draw pays for no block arithmetic
        yield (Ellipsis,)
        return
    axis = next(a for a in range(len(shape)) if math.prod(shape[a + 1:]) <= BLOCK)
    step = max(1, BLOCK // max(1, math.prod(shape[axis + 1:])))
    for lead in itertools.product(*(range(n) for n in shape[:axis])):
        for start in range(0, shape[axis], step):
            yield lead + (slice(start, start + step),)


_RLOCK = type(threading.RLock())


def _one_draw(generator):
    """Held across the blocks of one fill, so that for other threads sharing the generator the fill is one
    draw (PyTorch holds its generator's mutex for a whole op): the re-entrant lock numpy's bit generators
    take around every draw, or the gpu CounterGenerator's. Nothing for a generator without one."""
    lock = getattr(getattr(generator, "bit_generator", generator), "lock", None)
    return lock if isinstance(lock, _RLOCK) else contextlib.nullcontext()


def uniform_into(xp, generator, out, low: float, high: float):
    """Fill `out` with samples uniform in [low, high) and return it: low + (high - low) * u in float64 for
    generator.random's u, cast to out's dtype; a value that rounding carried onto `high` wraps to `low`."""
    span = high - low
    with _one_draw(generator):
        for index in _blocks(out.shape):
            part = out[index]   # a view, also of a strided `out` (x[:, ::2].uniform_())
            u = generator.random(part.shape, dtype=np.float64)
            u *= span
            u += low
            part[...] = u
            xp.copyto(part, low, where=part >= high)
    return out


def normal_into(xp, generator, out, mean=None, std=None):
    """Fill `out` with generator.standard_normal's float64 z (times std plus mean when they are given: in
    float64) cast to out's dtype, and return it. mean and std are arrays that broadcast to out's shape."""
    affine = mean is not None
    if affine:   # broadcast views: a block of them is as small as the block of the result
        mean, std = xp.broadcast_to(mean, out.shape), xp.broadcast_to(std, out.shape)
    with _one_draw(generator):
        for index in _blocks(out.shape):
            part = out[index]
            z = generator.standard_normal(part.shape, dtype=np.float64)
            if affine:
                z *= std[index]
                z += mean[index]
            part[...] = z
    return out
