"""The three groups of an expert-parallel model, from fleet's hybrid communicate group (ep_degree in
hybrid_configs is the "expert" axis of oarlock's topology, multiplied into the world like the others):

- moe_group: the ranks along the expert axis, which hold different experts and exchange tokens;
- expert_dp_group: the ranks along the data axis, which hold the same experts (their replicas);
- dense_group: the ranks along data and expert together, which hold the same dense parameters and train
  on different tokens (the whole world when there is no other axis).

Paddle 3.2 carves expert parallelism out of the data-parallel ranks with a second topology
(EPHybridCommunicateGroup); the groups each parameter needs are the same.
"""

from __future__ import annotations

import oarlock.distributed as dist

__all__ = ["expert_parallel_groups"]

_MADE: dict = {}


def _dense_group(hcg):
    topology = hcg.topology()
    names = topology.get_hybrid_group_names()
    if all(a in ("data", "expert") for a in names if topology.get_dim(a) > 1):
        return None                                   # data x expert is the whole world
    axes = [a for a in ("data", "expert") if a in names]
    mine = None
    for ranks in topology.get_fused_ranks(axes, "expert_parallel_groups"):
        group = dist.new_group(ranks)                 # every rank makes every group, in the same order
        if hcg.get_global_rank() in ranks:
            mine = group
    return mine


def expert_parallel_groups(hcg=None) -> tuple:
    """(moe_group, expert_dp_group, dense_group) of this rank; dense_group None means the whole world.
    hcg defaults to fleet's; the dense group is made once per hcg (on every rank: call it on all)."""
    if hcg is None:
        from oarlock.distributed import fleet
        hcg = fleet.get_hybrid_communicate_group()
    if id(hcg) not in _MADE:
        _MADE[id(hcg)] = (hcg, _dense_group(hcg))
    return hcg.get_axis_group("expert"), hcg.get_data_parallel_group(), _MADE[id(hcg)][1]
