"""`oarlock.distributed.fleet`: init, the hybrid communicate group, distributed_model/optimizer.

One fleet per process, as in Paddle. `init` starts the world (init_parallel_env) when needed and
builds the HybridCommunicateGroup from `strategy.hybrid_configs`, resolved through the registered
parallel strategies (oarlock_parallel.hybrid).
"""

from __future__ import annotations

import copy

import oarlock.distributed as dist
from oarlock_parallel import hybrid
from oarlock_parallel.config import DistributedStrategy
from oarlock_parallel.strategies import registered
from oarlock_parallel.topology import CommunicateTopology, HybridCommunicateGroup

_state = {"strategy": None, "hcg": None, "topology": None, "degrees": None}


def init(role_maker=None, is_collective=False, strategy=None, log_level="INFO"):
    """Paddle's fleet.init: `role_maker` comes first (only None is supported: the role comes from the
    launcher), `strategy` is deep-copied (a default DistributedStrategy when None). Returns the fleet
    module. Degrees whose product is not the world size raise ValueError on every rank."""
    if role_maker is not None:
        raise ValueError(f"fleet.init(): `role_maker` should be None (oarlock takes the role from the launcher), "
                         f"but got {type(role_maker).__name__} {role_maker!r}; pass is_collective=True by keyword")
    if not isinstance(is_collective, bool):
        raise ValueError(f"fleet.init(): `is_collective` should be instance of `bool`, but got {type(is_collective)}")
    if strategy is None:
        strategy = DistributedStrategy()
    elif not isinstance(strategy, DistributedStrategy):
        raise TypeError(f"fleet.init(): strategy must be a fleet.DistributedStrategy or None, got "
                        f"{type(strategy).__name__}")
    strategy = copy.deepcopy(strategy)
    dist.init_parallel_env()
    world = dist.get_world_size()
    names, dims, degrees = hybrid.resolve(strategy.hybrid_configs, strategy.hybrid_parallel_order, world)
    topology = CommunicateTopology(names, dims)
    if topology.world_size() != world:
        shown = " x ".join(f"{s.degree_key}={degrees[s.name]}" for s in registered().values()
                           if s.axis in names)
        raise ValueError(f"fleet.init(): the hybrid degrees {shown} multiply to {topology.world_size()}, but "
                         f"the job has {world} rank(s); their product must equal the world size")
    _state.update(strategy=strategy, topology=topology, degrees=degrees,
                  hcg=HybridCommunicateGroup(topology, strategy.hybrid_configs))
    if degrees.get("tensor", 1) > 1:   # as Paddle: tensor-parallel weights and dropout draw per mp rank
        from oarlock_parallel.rng import model_parallel_random_seed
        seed = strategy.tensor_parallel_configs["tensor_init_seed"]
        model_parallel_random_seed(None if seed == -1 else seed)
    import sys
    return sys.modules[__name__]


def _hcg(what: str) -> HybridCommunicateGroup:
    if _state["hcg"] is None:
        raise RuntimeError(f"fleet.{what}(): call fleet.init() first")
    return _state["hcg"]


def get_hybrid_communicate_group() -> HybridCommunicateGroup:
    return _hcg("get_hybrid_communicate_group")


def get_hybrid_parallel_topology() -> CommunicateTopology:
    return _hcg("get_hybrid_parallel_topology").topology()


def worker_index() -> int:
    return dist.get_rank()


def worker_num() -> int:
    return dist.get_world_size()


def is_first_worker() -> bool:
    return worker_index() == 0


def _active(what: str):
    """The registered strategies whose degree is above 1, in registration order."""
    hcg, degrees = _hcg(what), _state["degrees"]
    return hcg, [s for s in registered().values() if degrees.get(s.name, 1) > 1]


def distributed_model(model):
    """The model wrapped once, as Paddle does by its parallel mode: by the `wrap_model` of the active
    strategy (degree above 1) with the lowest `model_priority` (pipeline, tensor, sep, sharding, data);
    with one process, or every degree 1, the model itself. Pipeline parallel (pp_degree > 1, with dp / mp
    inside) wraps a PipelineLayer in PipelineParallel (PipelineParallelWithInterleave with virtual
    stages); data parallel alone in oarlock.DataParallel over the data-parallel group; tensor parallel
    (dp x mp included) in TensorParallel, which broadcasts the replicated parameters and the inputs;
    strategies not implemented yet raise NotImplementedError naming themselves."""
    hcg, active = _active("distributed_model")
    if dist.get_world_size() <= 1 or not active:
        return model
    first = min(active, key=lambda s: s.model_priority)    # min keeps registration order on ties
    return first.wrap_model(first, model, hcg, _state["strategy"])


def distributed_optimizer(optimizer, strategy=None):
    """The optimizer for hybrid parallel training; `strategy`, when given, replaces the one of fleet.init
    as in Paddle. With one process, or every degree 1, the optimizer itself. Otherwise each active
    strategy's `wrap_optimizer` is applied in registration order (data and tensor: unchanged; sharding:
    DygraphShardingOptimizer) and the result is wrapped in HybridParallelOptimizer, which reduces the
    gradients over the groups that need it and makes global-norm clipping count every piece once."""
    if strategy is not None:
        if not isinstance(strategy, DistributedStrategy):
            raise TypeError(f"fleet.distributed_optimizer(): strategy must be a fleet.DistributedStrategy or None, "
                            f"got {type(strategy).__name__}")
        _state["strategy"] = copy.deepcopy(strategy)
    hcg, active = _active("distributed_optimizer")
    if dist.get_world_size() <= 1 or not active:
        return optimizer
    for s in active:
        optimizer = s.wrap_optimizer(s, optimizer, hcg, _state["strategy"])
    from oarlock_parallel.hybrid_optimizer import HybridParallelOptimizer
    return HybridParallelOptimizer(optimizer, hcg, _state["strategy"])


__all__ = ["init", "DistributedStrategy", "CommunicateTopology", "HybridCommunicateGroup",
           "get_hybrid_communicate_group", "get_hybrid_parallel_topology", "worker_index", "worker_num",
           "is_first_worker", "distributed_model", "distributed_optimizer"]
