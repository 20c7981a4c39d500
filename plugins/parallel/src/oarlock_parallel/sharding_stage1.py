"""Sharding stage 1 through fleet (`sharding_degree` in hybrid_configs): Paddle's DygraphShardingOptimizer
and ShardingParallel.

Every rank of the sharding group runs the whole model on its own batch and holds every gradient, but each
parameter has one owner rank (Paddle's greedy assignment, largest first) and only the owner keeps its
optimizer state and updates it. A step: each gradient is averaged onto its owner (a reduce, as Paddle 3.2
does), the owners clip (the global norm summed over the group) and update their parameters, then each
parameter is broadcast from its owner. fleet's HybridParallelOptimizer calls reduce_gradients() before
step(); used alone, step() reduces by itself.
"""

from __future__ import annotations

import oarlock
import oarlock.distributed as dist
from oarlock.nn import Layer

from oarlock_parallel import sharding_common as common
from oarlock_parallel.dp_utils import broadcast_dp_parameters, broadcast_sharding_parameters
from oarlock_parallel.wrapper import WrapperLayer

_WHAT = "DygraphShardingOptimizer()"


def _sharding_configs() -> dict:
    from oarlock_parallel import fleet
    strategy = fleet._state["strategy"]
    return {} if strategy is None else strategy.hybrid_configs["sharding_configs"]


class DygraphShardingOptimizer(common.OwnedOptimizerState):
    """Paddle's DygraphShardingOptimizer(optimizer, hcg): `optimizer` (an oarlock optimizer over the whole
    model) keeps state only for the parameters this rank owns in hcg's sharding group. Other attributes
    (get_lr, set_lr, _learning_rate, ...) are the inner optimizer's."""

    _INNER, _NAME = "_inner_opt", "DygraphShardingOptimizer"

    def __init__(self, optimizer, hcg):
        common.check_optimizer(optimizer, _WHAT)
        if not hasattr(hcg, "get_sharding_parallel_group"):
            raise TypeError(f"{_WHAT}: hcg must be a HybridCommunicateGroup (fleet.get_hybrid_communicate_group()), "
                            f"got {type(hcg).__name__}")
        if _sharding_configs().get("split_param"):
            raise NotImplementedError(f"{_WHAT}: sharding_configs split_param=True (Paddle's "
                                      f"DygraphShardingOptimizerV2) is not implemented in oarlock-parallel")
        self._inner_opt, self._hcg = optimizer, hcg
        self._group = hcg.get_sharding_parallel_group()
        self._sharding_world_size = hcg.get_sharding_parallel_world_size()
        self._sharding_rank = hcg.get_sharding_parallel_rank()
        # the whole model's parameters; the inner optimizer keeps only this rank's
        self._parameter_list = self._origin_parameter_list = common.parameters_of(optimizer)
        self._owners = common.partition(self._parameter_list, self._sharding_world_size, sort_by_size=True)
        self._param2rank = {id(p): r for p, r in zip(self._parameter_list, self._owners)}
        self._rank2params = {r: [p for p, o in zip(self._parameter_list, self._owners) if o == r]
                             for r in range(self._sharding_world_size)}
        self._owned = {id(p) for p in self._rank2params[self._sharding_rank]}
        # the norm: tensor-parallel slices summed over mp; every piece once over pipeline stages and sharding
        split = hcg.get_model_parallel_group() if hcg.get_model_parallel_world_size() > 1 else None
        shards = [hcg.get_pipe_parallel_group()] if hcg.get_pipe_parallel_world_size() > 1 else []
        common.wrap_clips(optimizer, split, shards + [self._group])
        self._grads_reduced = False

    def __getattr__(self, name):
        if name == "_inner_opt":     # not set yet (during __init__): no recursion
            raise AttributeError(name)
        return getattr(self._inner_opt, name)

    # -- which rank owns what ---------------------------------------------------------------------------------
    def filter_parameters(self, parameter_list, hcg):
        """The parameters of `parameter_list` this rank owns."""
        rank = hcg.get_sharding_parallel_rank()
        return [p for p in parameter_list if self._owner_of(p, "filter_parameters") == rank]

    def _owner_of(self, param, what: str) -> int:
        owner = self._param2rank.get(id(param))
        if owner is None:
            raise ValueError(f"DygraphShardingOptimizer.{what}(): a parameter of shape {param.shape} is not one of "
                             f"the optimizer's parameters")
        return owner

    # -- a step ---------------------------------------------------------------------------------------------------
    def reduce_gradients(self, parameter_list, hcg):
        """Average each trainable parameter's gradient over the sharding group onto its owner (a missing
        gradient counts as zeros, as in Paddle). The other ranks keep their local gradient."""
        group = hcg.get_sharding_parallel_group()
        params = [p for p in parameter_list if not p.stop_gradient]
        owners = [self._owner_of(p, "reduce_gradients") for p in params]   # before any collective
        with oarlock.no_grad():
            for p in params:
                if p.grad is None:
                    p.grad = oarlock.zeros_like(p)
            if group.nranks > 1:
                tasks = [dist.reduce(p.grad, dst=group.ranks[owner], op=dist.ReduceOp.AVG, group=group,
                                     sync_op=False) for p, owner in zip(params, owners)]
                for task in tasks:
                    task.wait()
        self._grads_reduced = True

    def step(self):
        """Reduce the gradients (unless reduce_gradients ran since the last step), update the owned
        parameters, then broadcast every parameter from its owner."""
        if not self._grads_reduced:
            self.reduce_gradients(self._parameter_list, self._hcg)
        self._grads_reduced = False
        common.step_owned(self._inner_opt, self._owned)
        self._sharding_sync_parameters()

    def _sharding_sync_parameters(self):
        common.broadcast_from_owners(self._parameter_list, self._owners, self._group)

    def minimize(self, loss=None, startup_program=None, parameters=None, no_grad_set=None):
        """Paddle's dygraph minimize: a step with the gradients backward computed. Returns (None, the
        owned (param, grad) pairs that were used)."""
        owned = [(p, p.grad) for p in self._rank2params[self._sharding_rank] if not p.stop_gradient]
        self.step()
        return None, owned

    def clear_grad(self, set_to_zero=True):
        """Clear the gradients of every parameter of the model (not only the owned ones)."""
        if set_to_zero:
            grads = [p.grad for p in self._parameter_list if p.grad is not None]
            if grads:
                with oarlock.no_grad():
                    oarlock.zero_tensors_(grads)
        else:
            for p in self._parameter_list:
                p.grad = None

    def zero_grad(self, set_to_none=True):
        self.clear_grad(set_to_zero=not set_to_none)


class ShardingParallel(WrapperLayer):
    """Paddle's ShardingParallel(layers, hcg): the model of a sharding run, its parameters and buffers
    broadcast over the sharding group (and the data-parallel group) when it is wrapped. Gradients are
    reduced by the DygraphShardingOptimizer. state_dict keys carry no wrapper prefix."""

    def __init__(self, layers, hcg, **kwargs):
        super().__init__()
        if not isinstance(layers, Layer):
            raise TypeError(f"ShardingParallel(): layers must be an oarlock.nn.Layer, got {type(layers).__name__}")
        self._layers, self._hcg, self._strategy = layers, hcg, kwargs.get("strategy")
        broadcast_sharding_parameters(layers, hcg)
        if hcg.get_data_parallel_world_size() > 1:
            broadcast_dp_parameters(layers, hcg)

    def forward(self, *inputs, **kwargs):
        return self._layers(*inputs, **kwargs)


def wrap_model(strategy, model, hcg, user_strategy):
    """The sharding step of fleet.distributed_model: ShardingParallel."""
    return ShardingParallel(model, hcg, strategy=user_strategy)


def wrap_optimizer(strategy, optimizer, hcg, user_strategy):
    """The sharding step of fleet.distributed_optimizer: DygraphShardingOptimizer over the sharding group."""
    return DygraphShardingOptimizer(optimizer, hcg)
