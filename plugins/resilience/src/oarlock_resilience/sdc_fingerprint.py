"""Bit-exact fingerprints of tensors and the majority vote over ranks that names the odd ones out.

A fingerprint is a 63-bit integer of a tensor's raw bytes: XXH3-64 of the bytes for numpy arrays (xxhash, the
hash FlexCheckpoint's data files use: several GB/s, read in place), and for device arrays (CuPy) a
position-weighted sum of the 32-bit words computed on the device, so only one integer per tensor crosses to the
host. Either way a single flipped bit changes it; equal bytes give equal
values on every rank, which is what data-parallel replicas must have.
"""

from __future__ import annotations

import numpy as np
import xxhash

from oarlock.plugin_api import array_of

_MASK = (1 << 63) - 1
_PRIME = 2_147_483_629   # weights cycle through [1, _PRIME]: a swap of two words moves the sum too


def array_fingerprint(array) -> int:
    """The fingerprint of one backend array (numpy: XXH3-64; any other array module: weighted word sum)."""
    if isinstance(array, np.ndarray):
        if not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)
        # as bytes: the buffer protocol does not know ml_dtypes' bfloat16 / float8
        return xxhash.xxh3_64_intdigest(array.reshape(-1).view(np.uint8)) & _MASK
    return device_fingerprint(array)


def device_fingerprint(array) -> int:
    """Weighted sum, modulo 2**63, of the array's bytes read as 32-bit words (padded with zero bytes), computed
    with the array's own module (numpy or CuPy): sum_i word_i * (i mod _PRIME + 1)."""
    xp = _module_of(array)
    raw = xp.ascontiguousarray(array).reshape(-1).view(xp.uint8)
    pad = (-raw.size) % 4
    if pad:
        raw = xp.concatenate([raw, xp.zeros(pad, dtype=xp.uint8)])
    words = raw.view(xp.uint32).astype(xp.uint64)
    weights = xp.arange(words.size, dtype=xp.uint64) % _PRIME + 1
    return int((words * weights).sum(dtype=xp.uint64)) & _MASK   # uint64 arithmetic wraps: exact and portable


def _module_of(array):
    if isinstance(array, np.ndarray):
        return np
    import cupy   # the only other array module oarlock's backends use
    return cupy


def fingerprints(tensors) -> np.ndarray:
    """int64 [len(tensors)]: each tensor's fingerprint, 0 for None (a parameter without a gradient)."""
    return np.array([0 if t is None else array_fingerprint(array_of(t)) for t in tensors], dtype=np.int64)


def odd_ones(column) -> tuple[list, bool]:
    """(positions whose value differs from the majority, whether a strict majority exists) for one column of
    values gathered over the ranks. Without a strict majority (two ranks that disagree, a three-way split)
    every position outside the largest block of equal values is returned, or all of them on a tie."""
    values, counts = np.unique(np.asarray(column), return_counts=True)
    if len(values) == 1:
        return [], True
    top = counts.max()
    winner = values[counts.argmax()]
    strict = top * 2 > len(column)
    if not strict and (counts == top).sum() > 1:
        return list(range(len(column))), False
    return [i for i, v in enumerate(column) if v != winner], strict
