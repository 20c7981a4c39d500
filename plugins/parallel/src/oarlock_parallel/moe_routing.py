"""The routing kernels of Paddle's MoE (paddle.distributed.models.moe.utils: number_count, assign_pos,
limit_by_capacity, prune_gate_by_capacity, random_routing) and the two helpers built on them
(paddle.incubate.distributed.models.moe.utils: count_by_gate, limit_by_capacity).

Paddle has these as CUDA kernels only. Here they are numpy over the index tensors (one entry per token
slot or per expert), written from the kernels' semantics with their atomics taken in index order, which
is the order Paddle's docstring examples show:

- number_count(numbers, upper_range): how many entries equal each e in [0, upper_range); others (-1:
  a dropped slot) are not counted.
- assign_pos(x, cum_count): the flat indices of x's entries grouped by expert (expert e's entries fill
  positions [cum[e-1], cum[e])); the kernel decrements cum[e] per entry in index order and writes
  at the decremented slot, so within an expert the indices come in descending order.
- limit_by_capacity(expert_count, capacity, n_worker): expert_count is [n_worker, n_expert] flat; each
  expert's capacity is consumed worker by worker in worker order.
- prune_gate_by_capacity(gate_idx, expert_count, n_expert, n_worker): entries beyond their expert's
  count (consumed in index order) become -1.
- random_routing(topk_idx, topk_value, prob): the last slot of token i becomes -1 when
  topk * value[i][topk-1] < prob[i].
"""

from __future__ import annotations

import numpy as np

import oarlock
import oarlock.distributed as dist

__all__ = ["number_count", "assign_pos", "limit_by_capacity_kernel", "prune_gate_by_capacity", "random_routing",
           "count_by_gate", "limit_by_capacity"]


def _ints(tensor) -> np.ndarray:
    return np.asarray(tensor.numpy() if isinstance(tensor, oarlock.Tensor) else tensor).astype(np.int64)


def _tensor(array) -> oarlock.Tensor:
    return oarlock.to_tensor(np.ascontiguousarray(array, dtype=np.int64))


def number_count(numbers, upper_range: int) -> oarlock.Tensor:
    flat = _ints(numbers).reshape(-1)
    kept = flat[(flat >= 0) & (flat < upper_range)]
    return _tensor(np.bincount(kept, minlength=upper_range))


def assign_pos(x, cum_count) -> oarlock.Tensor:
    flat, cum = _ints(x).reshape(-1), _ints(cum_count)
    index = np.flatnonzero(flat > -1)
    # grouped by expert; within one, the kernel's index-order decrements leave the indices descending
    out = index[np.lexsort((-index, flat[index]))]
    return _tensor(out[:int(cum[-1]) if cum.size else 0])


def _arrival(flat: np.ndarray) -> np.ndarray:
    """For each entry of `flat` (-1: none), how many earlier entries hold the same expert."""
    order = np.argsort(flat, kind="stable")
    ranked = flat[order]
    starts = np.flatnonzero(np.r_[True, ranked[1:] != ranked[:-1]])
    first = np.repeat(starts, np.diff(np.r_[starts, ranked.size]))
    out = np.empty_like(flat)
    out[order] = np.arange(flat.size) - first
    return out


def limit_by_capacity_kernel(expert_count, capacity, n_worker: int) -> oarlock.Tensor:
    count, left = _ints(expert_count), _ints(capacity).copy()
    n_expert = left.size
    out = np.zeros_like(count)
    for w in range(n_worker):
        for e in range(n_expert):
            proposal = count[w * n_expert + e]
            out[w * n_expert + e] = min(proposal, max(left[e], 0))
            left[e] -= proposal
    return _tensor(out)


def prune_gate_by_capacity(gate_idx, expert_count, n_expert: int, n_worker: int) -> oarlock.Tensor:
    gate, left = _ints(gate_idx), _ints(expert_count).copy()
    if left.size != n_expert * n_worker:
        raise ValueError(f"prune_gate_by_capacity(): expert_count has {left.size} entries, but n_expert * n_worker "
                         f"is {n_expert * n_worker}")
    flat = gate.reshape(-1).copy()
    kept = flat >= 0
    flat[kept & (_arrival(flat) >= left[np.maximum(flat, 0)])] = -1
    return _tensor(flat.reshape(gate.shape))


def random_routing(topk_idx, topk_value, prob, topk: int = 2) -> oarlock.Tensor:
    if topk != 2:
        raise ValueError(f"random_routing(): only topk=2 is supported (as Paddle's), got topk={topk}")
    idx = _ints(topk_idx).copy()
    value = np.asarray(topk_value.numpy(), dtype=np.float64)
    p = np.asarray(prob.numpy(), dtype=np.float64).reshape(-1)
    drop = topk * value[:, topk - 1] < p
    idx[drop, topk - 1] = -1
    return _tensor(idx)


def _exchange_counts(counts: oarlock.Tensor, group) -> oarlock.Tensor:
    """Row i of `counts` (world_size equal pieces) to rank i; what arrives, in rank order."""
    out = oarlock.empty(counts.shape, dtype=counts.dtype)
    dist.alltoall_single(out, counts, group=group)
    return out


def count_by_gate(gate, num_expert: int, world_size: int, require_pos: bool = True, group=None) -> tuple:
    """(pos, local_expert_count, global_expert_count) as Paddle's: how many of this rank's entries go to
    each of the world_size * num_expert experts, how many each of this rank's experts gets from each
    rank ([rank, expert] flat), and (require_pos) the entries' flat indices grouped by expert."""
    with oarlock.no_grad():
        local = number_count(gate, num_expert * world_size)
        glob = _exchange_counts(local, group) if world_size > 1 else local
        pos = assign_pos(gate, np.cumsum(local.numpy())) if require_pos else None
    return pos, local, glob


def limit_by_capacity(topk_idx, num_expert: int, world_size: int, capacity: int, group=None) -> tuple:
    """(new_lec, new_gec, topk_idx): every expert takes at most `capacity` entries from all ranks
    together (the ranks in order, each rank's entries in order); the others become -1."""
    with oarlock.no_grad():
        _, lec, gec = count_by_gate(topk_idx, num_expert, world_size, require_pos=False, group=group)
        new_gec = limit_by_capacity_kernel(gec, np.full(num_expert, capacity, dtype=np.int64), world_size)
        new_lec = _exchange_counts(new_gec, group) if world_size > 1 else new_gec
        topk_idx = prune_gate_by_capacity(topk_idx, new_lec, num_expert, world_size)
    return new_lec, new_gec, topk_idx
