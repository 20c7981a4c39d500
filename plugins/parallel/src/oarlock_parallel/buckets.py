"""Gradient buckets: parameters grouped, in reverse registration order (the order backward reaches
them), into buckets of about a size limit, so one fused all-reduce moves each bucket.

As in Paddle's assign_group_by_size, the first bucket uses its own (small) limit so the first
all-reduce starts early in backward, a bucket closes once it reaches its limit, and a bucket
holds one dtype on one device (it is concatenated into one flat tensor).
"""

from __future__ import annotations

import oarlock

MB = 1024 * 1024


def check_size(value, what: str, argument: str) -> float:
    """A bucket size in MB: a positive number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{what}: {argument} must be a positive number of MB, got {value!r}")
    return float(value)


def assign(params: list, limits_mb: list) -> list:
    """Lists of indices into `params`: buckets in launch order. limits_mb[i] is bucket i's limit;
    the last limit applies to every later bucket."""
    buckets, open_by_kind = [], {}
    for index in reversed(range(len(params))):
        param = params[index]
        kind = (param.dtype, str(param.place))
        bucket = open_by_kind.get(kind)
        if bucket is None:
            bucket = open_by_kind[kind] = [[], 0, len(buckets)]
            buckets.append(bucket[0])
        bucket[0].append(index)
        bucket[1] += param.size * param.dtype.itemsize
        if bucket[1] >= limits_mb[min(bucket[2], len(limits_mb) - 1)] * MB:
            del open_by_kind[kind]
    return [b for b in buckets if b]


def flatten(tensors: list):
    """One 1-d tensor with the values of `tensors` (same dtype and device) one after another."""
    return oarlock.concat([t.reshape([-1]) for t in tensors])


def unflatten(flat, like: list) -> list:
    """Pieces of `flat` shaped like the tensors of `like` (the inverse of flatten)."""
    pieces = oarlock.split(flat, [t.size for t in like]) if len(like) > 1 else [flat]
    return [piece.reshape(t.shape) for piece, t in zip(pieces, like)]
