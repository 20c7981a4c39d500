"""Shard / Replicate / Partial / ReduceType against Paddle's own placements: repr, equality, hashing, the
is_* queries, get_dim and reduce types; the split rule against Paddle 3's BalancedSplit; bad input."""

from __future__ import annotations

import itertools

import pytest

import oarlock.distributed as dist
from oarlock_autoparallel.placements import chunk_bounds

paddle_dist = pytest.importorskip("paddle.distributed")


def pairs():
    ours = [dist.Shard(0), dist.Shard(1), dist.Replicate(), dist.Partial(), dist.Partial(dist.ReduceType.kRedMax),
            dist.Partial(dist.ReduceType.kRedAvg)]
    theirs = [paddle_dist.Shard(0), paddle_dist.Shard(1), paddle_dist.Replicate(), paddle_dist.Partial(),
              paddle_dist.Partial(paddle_dist.ReduceType.kRedMax), paddle_dist.Partial(paddle_dist.ReduceType.kRedAvg)]
    return list(zip(ours, theirs))


def test_queries_and_repr_match_paddle():
    for ours, theirs in pairs():
        assert repr(ours) == repr(theirs) and str(ours) == str(theirs)
        assert ours.is_shard() == theirs.is_shard() and ours.is_replicated() == theirs.is_replicated()
        assert ours.is_partial() == theirs.is_partial()
        for dim in (0, 1):
            assert ours.is_shard(dim) == theirs.is_shard(dim)
        if theirs.is_shard():
            assert ours.get_dim() == theirs.get_dim()
        if theirs.is_partial():
            assert int(ours.reduce_type()) == int(theirs.reduce_type())


def test_equality_and_hash_match_paddle():
    for (a, pa), (b, pb) in itertools.product(pairs(), repeat=2):
        assert (a == b) == (pa == pb) and (a != b) == (pa != pb)
        if a == b:
            assert hash(a) == hash(b)


def test_reduce_type_values_are_paddles():
    for name in ["kRedSum", "kRedMax", "kRedMin", "kRedProd", "kRedAvg", "kRedAny", "kRedAll"]:
        assert int(getattr(dist.ReduceType, name)) == int(getattr(paddle_dist.ReduceType, name))


def balanced_split(total, pieces):
    """Paddle 3's BalancedSplit (reshard_utils.cc): ceil-sized pieces, the last one takes the remainder."""
    result = [-(-total // pieces)] * pieces
    if total % pieces:
        result[-1] -= result[-1] * pieces - total
    return result


@pytest.mark.parametrize("total, pieces", [(8, 4), (7, 4), (12, 5), (5, 2), (3, 3), (13, 4), (5, 4)])
def test_split_rule_is_paddles(total, pieces):
    sizes = [hi - lo for lo, hi in (chunk_bounds(total, pieces, i) for i in range(pieces))]
    assert sum(sizes) == total
    paddle = balanced_split(total, pieces)
    if min(paddle) >= 0:
        assert sizes == paddle
    else:   # Paddle's rule would give a negative piece (5 into 4: [2, 2, 2, -1]): ours clamps, as torch.chunk
        assert sizes == [2, 2, 1, 0] and (total, pieces) == (5, 4)


def test_bad_placements():
    with pytest.raises(TypeError, match=r"Shard\(\): argument 'dim' must be an int"):
        dist.Shard("0")
    with pytest.raises(ValueError, match=r"Partial\(\): argument 'reduce_type' must be a ReduceType"):
        dist.Partial(99)
