"""Token exchange of expert parallelism: Paddle's global_scatter / global_gather
(paddle.distributed.utils.moe_utils) as differentiable ops over `alltoall_single` with uneven splits.

With world_size ranks of num_expert experts each, `local_count[j*num_expert + e]` rows of this rank go to
expert e of rank j (x sorted by global expert, rank-major), and `global_count[j*num_expert + e]` rows
arrive from rank j for this rank's expert e. global_scatter returns the arrivals grouped by expert, then
by source rank (what the experts consume in order); the all-to-all delivers them grouped by source rank,
so a permutation of rows follows it. global_gather is the exact reverse, and each is the other's
backward.
"""

from __future__ import annotations

import numpy as np

import oarlock
import oarlock.distributed as dist
from oarlock import PyLayer

__all__ = ["global_scatter", "global_gather"]


def _counts(count, world_size: int, what: str) -> np.ndarray:
    counts = np.asarray(count.numpy() if isinstance(count, oarlock.Tensor) else count, dtype=np.int64)
    if counts.ndim != 1 or counts.size % world_size:
        raise ValueError(f"{what}: counts must be one entry per (rank, expert), a multiple of the {world_size} "
                         f"ranks, got shape {counts.shape}")
    return counts.reshape(world_size, -1)


def _rank_major_to_expert_major(counts: np.ndarray) -> np.ndarray:
    """Row order taking rows grouped [rank][expert] (counts[rank, expert] each) to [expert][rank]."""
    starts = np.concatenate([[0], np.cumsum(counts.reshape(-1))])[:-1].reshape(counts.shape)
    return np.concatenate([np.arange(starts[j, e], starts[j, e] + counts[j, e], dtype=np.int64)
                           for e in range(counts.shape[1]) for j in range(counts.shape[0])] or
                          [np.zeros(0, dtype=np.int64)])


def _rows(x, order: np.ndarray):
    return oarlock.index_select(x, oarlock.to_tensor(order), 0) if order.size else x[:0]


def _alltoall(x, send_rows: np.ndarray, recv_rows: np.ndarray, group):
    out = oarlock.empty([int(recv_rows.sum()), *x.shape[1:]], dtype=x.dtype)
    dist.alltoall_single(out, x, in_split_sizes=send_rows.tolist(), out_split_sizes=recv_rows.tolist(), group=group)
    return out


def _scatter(x, local, glob, group):
    arrived = _alltoall(x, local.sum(axis=1), glob.sum(axis=1), group)
    return _rows(arrived, _rank_major_to_expert_major(glob))


def _gather(x, local, glob, group):
    rank_major = _rows(x, np.argsort(_rank_major_to_expert_major(glob), kind="stable"))
    return _alltoall(rank_major, glob.sum(axis=1), local.sum(axis=1), group)


class _GlobalScatter(PyLayer):
    @staticmethod
    def forward(ctx, x, local, glob, group):
        ctx.args = local, glob, group
        return _scatter(x, local, glob, group)

    @staticmethod
    def backward(ctx, grad):
        return _gather(grad, *ctx.args)


class _GlobalGather(PyLayer):
    @staticmethod
    def forward(ctx, x, local, glob, group):
        ctx.args = local, glob, group
        return _gather(x, local, glob, group)

    @staticmethod
    def backward(ctx, grad):
        return _scatter(grad, *ctx.args)


def _world(group) -> int:
    return group.nranks if group is not None else dist.get_world_size()


def global_scatter(x, local_count, global_count, group=None, use_calc_stream=True):
    """This rank's rows (sorted by global expert) to the experts' ranks; returns what this rank's experts
    receive, grouped by expert then source rank. Differentiable (backward: global_gather)."""
    n = _world(group)
    local = _counts(local_count, n, "global_scatter(): local_count")
    glob = _counts(global_count, n, "global_scatter(): global_count")
    if int(local.sum()) != x.shape[0]:
        raise ValueError(f"global_scatter(): x has {x.shape[0]} rows but local_count sums to {int(local.sum())}")
    return _GlobalScatter.apply(x, local, glob, group)


def global_gather(x, local_count, global_count, group=None, use_calc_stream=True):
    """The reverse of global_scatter: the experts' output rows back to the ranks they came from, in the
    order global_scatter took them. Differentiable (backward: global_scatter)."""
    n = _world(group)
    local = _counts(local_count, n, "global_gather(): local_count")
    glob = _counts(global_count, n, "global_gather(): global_count")
    if int(glob.sum()) != x.shape[0]:
        raise ValueError(f"global_gather(): x has {x.shape[0]} rows but global_count sums to {int(glob.sum())}")
    return _GlobalGather.apply(x, local, glob, group)
