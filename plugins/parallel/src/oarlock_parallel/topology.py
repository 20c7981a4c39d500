"""`CommunicateTopology`, `HybridCommunicateGroup` and `ParallelMode`, with Paddle's rank layout.

Ranks are laid out row-major over the axes in `hybrid_group_names` order: the last axis gets contiguous
ranks. Every rank builds every group, in the same order (new_group is collective in MPI's sense: all
ranks must make the same calls); a group's communicator is made on its first collective.
"""

from __future__ import annotations

import collections
import math
from itertools import product

import oarlock.distributed as dist

STANDARD_AXES = ("data", "pipe", "sharding", "sep", "model")


class ParallelMode:
    """Paddle's paddle.distributed.ParallelMode values."""

    DATA_PARALLEL = 0
    TENSOR_PARALLEL = 1
    PIPELINE_PARALLEL = 2
    SHARDING_PARALLEL = 3
    SEGMENT_PARALLEL = 4


class CommunicateTopology:
    """The rank grid of hybrid parallelism: one axis per name, `dims` ranks along each."""

    def __init__(self, hybrid_group_names=("data", "pipe", "sharding", "sep", "context", "model"),
                 dims=(1, 1, 1, 1, 1, 1)):
        names, dims = list(hybrid_group_names), list(dims)
        if len(names) != len(dims) or len(set(names)) != len(names):
            raise ValueError(f"CommunicateTopology(): hybrid_group_names {names} must be distinct and as many as "
                             f"dims {dims}")
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in dims):
            raise ValueError(f"CommunicateTopology(): dims must be ints >= 1, got {dims}")
        self._parallel_names, self._dims = names, dims
        self.coordinate = collections.namedtuple("Coordinate", names)
        self._world_size = math.prod(dims)
        self._rank2coord = [self.coordinate(*c) for c in product(*(range(d) for d in dims))]
        self._coord2rank = {c: r for r, c in enumerate(self._rank2coord)}

    def _axis(self, axis_name: str, what: str) -> int:
        if axis_name not in self._parallel_names:
            raise ValueError(f"CommunicateTopology.{what}(): axis {axis_name!r} is not one of "
                             f"{self._parallel_names}")
        return self._parallel_names.index(axis_name)

    def get_hybrid_group_names(self) -> list:
        return self._parallel_names

    def get_dim(self, axis_name: str) -> int:
        return self._dims[self._axis(axis_name, "get_dim")]

    get_dim_size = get_dim

    def world_size(self) -> int:
        return self._world_size

    def get_rank(self, **coords) -> int:
        key = self.coordinate(**coords)   # TypeError naming the missing or unexpected axis
        if key not in self._coord2rank:
            raise ValueError(f"CommunicateTopology.get_rank(): coordinate {coords} is outside dims {self._dims}")
        return self._coord2rank[key]

    def get_coord(self, rank: int):
        if not 0 <= rank < self._world_size:
            raise ValueError(f"CommunicateTopology.get_coord(): rank {rank} is outside [0, {self._world_size})")
        return self._rank2coord[rank]

    def get_axis_list(self, axis_name: str, index: int) -> list:
        """Every rank whose coordinate on `axis_name` is `index`, sorted."""
        axis = self._axis(axis_name, "get_axis_list")
        return [r for r, c in enumerate(self._rank2coord) if c[axis] == index]

    def get_comm_list(self, axis_name: str) -> list:
        """The groups along `axis_name`: one list per coordinate of the other axes (row-major), each
        ordered by the coordinate on `axis_name`."""
        return self.get_fused_ranks([axis_name], "get_comm_list")

    def get_fused_ranks(self, fused_axis, what: str = "get_fused_ranks") -> list:
        """The groups spanning all of `fused_axis` at once (Paddle's order: the other axes outer)."""
        fused = [self._axis(a, what) for a in fused_axis]
        others = [i for i in range(len(self._dims)) if i not in fused]
        groups = []
        for outer in product(*(range(self._dims[i]) for i in others)):
            coord = [0] * len(self._dims)
            for i, v in zip(others, outer):
                coord[i] = v
            group = []
            for inner in product(*(range(self._dims[i]) for i in fused)):
                for i, v in zip(fused, inner):
                    coord[i] = v
                group.append(self._coord2rank[self.coordinate(*coord)])
            groups.append(group)
        return groups

    def get_rank_from_stage(self, global_rank: int, **kwargs) -> int:
        return self.get_rank(**self.get_coord(global_rank)._replace(**kwargs)._asdict())


class HybridCommunicateGroup:
    """This rank's groups along every axis of `topology` (Paddle's HCG). The topology's size must equal
    the world size; the check runs on every rank before any group is made, so a mismatch never hangs."""

    def __init__(self, topology: CommunicateTopology, hybrid_configs=None):
        self.nranks = dist.get_world_size()
        self.global_rank = dist.get_rank()
        self._topo = topology
        if topology.world_size() != self.nranks:
            sizes = " x ".join(f"{n}={d}" for n, d in zip(topology.get_hybrid_group_names(), topology._dims))
            raise ValueError(f"HybridCommunicateGroup(): the parallel degrees ({sizes}) multiply to "
                             f"{topology.world_size()}, but the world has {self.nranks} rank(s); choose degrees "
                             f"whose product is {self.nranks}")
        names = topology.get_hybrid_group_names()
        degree = {a: (topology.get_dim(a) if a in names else 1) for a in STANDARD_AXES}
        self._dp_degree, self._pp_degree = degree["data"], degree["pipe"]
        self._sharding_degree, self._sep_degree, self._mp_degree = degree["sharding"], degree["sep"], degree["model"]
        coord = topology.get_coord(self.global_rank)._asdict()
        self._data_parallel_id = coord.get("data", 0)
        self._model_parallel_id = coord.get("model", 0)
        self._sharding_parallel_id = coord.get("sharding", 0)
        self._sep_parallel_id = coord.get("sep", 0)
        self.stage_id = coord.get("pipe", 0)

        # Paddle's creation order: pipe, data, model, sharding, sep, check, sharding check, fused
        self._pp_comm_group = self._set_comm_group("pipe")
        self._dp_comm_group = self._set_comm_group("data")
        self._mp_comm_group = self._set_comm_group("model")
        self._sharding_comm_group = self._set_comm_group("sharding")
        self._sep_comm_group = self._set_comm_group("sep") if self._sep_degree > 1 else None
        self._check_comm_group = self._set_check_group("data")
        self.sharding_check_comm_group = self._set_check_group("sharding") if self._sharding_degree > 1 else None
        self._dp_sep_comm_group = self._pp_mp_comm_group = None
        if self._sep_degree > 1:
            self._dp_sep_comm_group = self._new_groups(topology.get_fused_ranks(["data", "sep"]))
            self._pp_mp_comm_group = self._new_groups(topology.get_fused_ranks(["pipe", "model"]))
        # axes of strategies beyond Paddle's five (context, expert, a plugin's own): one group each
        self._axis_groups = {a: self._set_comm_group(a) for a in names if a not in STANDARD_AXES}
        self.is_first_stage = self.stage_id == 0
        self.is_last_stage = self.stage_id == self._pp_degree - 1
        self._p2p_groups = None

    # -- group creation ---------------------------------------------------------------------------
    def _new_groups(self, rank_lists):
        """Make every group in `rank_lists` (every rank, same order); return the one holding this rank."""
        mine = None
        for ranks in rank_lists:
            group = dist.new_group(ranks)
            if self.global_rank in ranks:
                mine = group
        return mine

    def _set_comm_group(self, axis: str):
        if axis not in self._topo.get_hybrid_group_names():   # an axis the order left out: this rank alone
            return self._new_groups([[r] for r in range(self.nranks)])
        return self._new_groups(self._topo.get_comm_list(axis))

    def _set_check_group(self, axis: str):
        if axis not in self._topo.get_hybrid_group_names():
            return self._new_groups([list(range(self.nranks))])
        return self._new_groups([self._topo.get_axis_list(axis, i) for i in range(self._topo.get_dim(axis))])

    def _check_sep_exist(self, what: str):
        if self._sep_degree <= 1:
            raise RuntimeError(f"HybridCommunicateGroup.{what}(): sep not exist (sep_degree is {self._sep_degree})")

    # -- Paddle's getters ---------------------------------------------------------------------------
    def topology(self) -> CommunicateTopology:
        return self._topo

    def get_global_rank(self) -> int:
        return self.global_rank

    def get_parallel_mode(self):
        """Paddle's order: pp > 1, then mp > 1, sep > 1, sharding > 1, dp > 1; None when all are 1."""
        if self._pp_degree > 1:
            return ParallelMode.PIPELINE_PARALLEL
        if self._mp_degree > 1:
            return ParallelMode.TENSOR_PARALLEL
        if self._sep_degree > 1:
            return ParallelMode.SEGMENT_PARALLEL
        if self._sharding_degree > 1:
            return ParallelMode.SHARDING_PARALLEL
        if self._dp_degree > 1:
            return ParallelMode.DATA_PARALLEL
        return None

    def get_data_parallel_rank(self):
        return self._data_parallel_id

    def get_data_parallel_world_size(self):
        return self._dp_degree

    def get_data_parallel_group(self):
        return self._dp_comm_group

    def get_data_parallel_group_src_rank(self):
        return self._dp_comm_group.ranks[0]

    def get_model_parallel_rank(self):
        return self._model_parallel_id

    def get_model_parallel_world_size(self):
        return self._mp_degree

    def get_model_parallel_group(self):
        return self._mp_comm_group

    def get_model_parallel_group_src_rank(self):
        return self._mp_comm_group.ranks[0]

    def get_sharding_parallel_rank(self):
        return self._sharding_parallel_id

    def get_sharding_parallel_world_size(self):
        return self._sharding_degree

    def get_sharding_parallel_group(self):
        return self._sharding_comm_group

    def get_sharding_parallel_group_src_rank(self):
        return self._sharding_comm_group.ranks[0]

    def get_sep_parallel_rank(self):
        return self._sep_parallel_id

    def get_sep_parallel_world_size(self):
        return self._sep_degree

    def get_sep_parallel_group(self):
        self._check_sep_exist("get_sep_parallel_group")
        return self._sep_comm_group

    def get_sep_parallel_group_src_rank(self):
        self._check_sep_exist("get_sep_parallel_group_src_rank")
        return self._sep_comm_group.ranks[0]

    # expert parallel (Paddle's EPHybridCommunicateGroup names): the "expert" axis, when the topology has one
    def _expert_group(self, what: str):
        if "expert" not in self._topo.get_hybrid_group_names():
            raise RuntimeError(f"HybridCommunicateGroup.{what}(): expert parallel does not exist (no 'ep' in "
                               "hybrid_configs['order'] with ep_degree > 1)")
        return self.get_axis_group("expert")

    def get_expert_parallel_rank(self) -> int:
        return self._expert_group("get_expert_parallel_rank").rank

    def get_expert_parallel_world_size(self) -> int:
        return self._expert_group("get_expert_parallel_world_size").nranks

    def get_expert_parallel_group(self):
        return self._expert_group("get_expert_parallel_group")

    def get_expert_parallel_group_src_rank(self) -> int:
        return self._expert_group("get_expert_parallel_group_src_rank").ranks[0]

    def get_stage_id(self):
        return self.stage_id

    def get_pipe_parallel_world_size(self):
        return self._pp_degree

    def get_pipe_parallel_group(self):
        return self._pp_comm_group

    def get_rank_from_stage(self, stage_id: int, **kwargs) -> int:
        return self._topo.get_rank_from_stage(self.global_rank, pipe=stage_id, **kwargs)

    def get_p2p_groups(self):
        """Paddle's (send_next, send_prev, recv_next, recv_prev) groups do not exist here: oarlock's
        PipelineParallel gives each boundary between (virtual) stages its own two-rank group
        (oarlock_parallel.pipeline_p2p), so this raises."""
        raise NotImplementedError("HybridCommunicateGroup.get_p2p_groups(): oarlock's pipeline parallelism has no "
                                  "send/recv group pairs; PipelineParallel makes one two-rank group per boundary "
                                  "between stages (oarlock_parallel.pipeline_p2p.PipelineP2P)")

    def get_check_parallel_group(self, sharding: bool = False):
        if sharding:
            if self.sharding_check_comm_group is None:
                raise RuntimeError("HybridCommunicateGroup.get_check_parallel_group(sharding=True): "
                                   f"sharding_degree is {self._sharding_degree}, so there is no sharding check group")
            return self.sharding_check_comm_group
        return self._check_comm_group

    def get_dp_sep_parallel_group(self):
        self._check_sep_exist("get_dp_sep_parallel_group")
        return self._dp_sep_comm_group

    def get_pp_mp_parallel_group(self):
        self._check_sep_exist("get_pp_mp_parallel_group")
        return self._pp_mp_comm_group

    def get_axis_group(self, axis: str):
        """This rank's group along any topology axis (also those a plugin's strategy adds)."""
        standard = {"data": self._dp_comm_group, "pipe": self._pp_comm_group, "model": self._mp_comm_group,
                    "sharding": self._sharding_comm_group, "sep": self._sep_comm_group}
        if axis in standard and standard[axis] is not None:
            return standard[axis]
        if axis in self._axis_groups:
            return self._axis_groups[axis]
        raise ValueError(f"HybridCommunicateGroup.get_axis_group(): axis {axis!r} has no group; axes: "
                         f"{self._topo.get_hybrid_group_names()}")
