"""TensorParallel (Paddle's fleet/meta_parallel/tensor_parallel.py): the wrapper fleet.distributed_model
puts around a model when tensor parallelism is the first active parallel mode (dp x mp included).

At wrap time the replicas are made to agree, as Paddle's _prepare_for_model does: the parameters that are
not tensor-parallel slices are broadcast over the model-parallel group (each mp rank's slices differ
on purpose), then every parameter and buffer over the sharding and data-parallel groups (ranks there
hold the same slices). Before each forward the tensor inputs are broadcast in place from the first rank
of the model-parallel group (mp_configs.need_broadcast_data, on by default in Paddle), so every mp rank
computes on the same batch. Gradients are not touched here: HybridParallelOptimizer averages them over
the data-parallel group in step().
"""

from __future__ import annotations

import oarlock
import oarlock.distributed as dist
from oarlock.nn import Layer

from oarlock_parallel.dp_utils import (broadcast_dp_parameters, broadcast_mp_parameters,
                                       broadcast_sharding_parameters, broadcast_tensors)
from oarlock_parallel.wrapper import WrapperLayer

_WHAT = "TensorParallel()"


class TensorParallel(WrapperLayer):
    """Run `layers` (built from fleet.meta_parallel layers) under the hybrid group `hcg`.

    kwargs: Paddle's `strategy` (a fleet.DistributedStrategy; its mp_configs.need_broadcast_data says
    whether inputs are broadcast over the model-parallel group). state_dict, set_state_dict and
    sharded_state_dict are the wrapped model's, without a prefix."""

    def __init__(self, layers, hcg, **kwargs):
        super().__init__()
        if not isinstance(layers, Layer):
            raise TypeError(f"{_WHAT}: layers must be an oarlock.nn.Layer, got {type(layers).__name__}")
        if not hasattr(hcg, "get_model_parallel_group"):
            raise TypeError(f"{_WHAT}: hcg must be a HybridCommunicateGroup (fleet.get_hybrid_communicate_group()), "
                            f"got {type(hcg).__name__}")
        unknown = sorted(set(kwargs) - {"strategy"})
        if unknown:
            raise TypeError(f"{_WHAT}: unexpected keyword argument(s) {unknown}; it accepts strategy")
        self._layers, self._hcg, self._strategy = layers, hcg, kwargs.get("strategy")
        self._broadcast_inputs = hcg.get_model_parallel_world_size() > 1 and self._need_broadcast_data()
        self._prepare_for_model()

    def _prepare_for_model(self):
        hcg = self._hcg
        broadcast_mp_parameters(self._layers, hcg)
        if hcg.get_sharding_parallel_world_size() > 1:
            broadcast_sharding_parameters(self._layers, hcg)
        if hcg.get_data_parallel_world_size() > 1:
            broadcast_dp_parameters(self._layers, hcg)

    def _need_broadcast_data(self) -> bool:
        if self._strategy is None:
            return True
        return bool(self._strategy.hybrid_configs["mp_configs"]["need_broadcast_data"])

    def forward(self, *inputs, **kwargs):
        if self._broadcast_inputs:
            broadcast_input_data(self._hcg, *inputs, **kwargs)
        return self._layers(*inputs, **kwargs)


def _tensors_in(value, found: list) -> list:
    """The Tensors of a (nested) list / tuple / dict of inputs, in order; other values are left alone."""
    if isinstance(value, oarlock.Tensor):
        found.append(value)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _tensors_in(item, found)
    elif isinstance(value, dict):
        for item in value.values():
            _tensors_in(item, found)
    return found


def broadcast_input_data(hcg, *inputs, **kwargs):
    """Paddle's hybrid_parallel_util.broadcast_input_data: overwrite, in place, every Tensor among the
    inputs with the one of the model-parallel group's first rank. The ranks first exchange the shapes and
    dtypes, so inputs that differ in structure raise the same ValueError on every rank instead of
    leaving a broadcast waiting (Paddle also reallocates a tensor of another shape; oarlock's tensors
    keep their shape). Returns (inputs, kwargs)."""
    group = hcg.get_model_parallel_group()
    if group.nranks <= 1:
        return inputs, kwargs
    tensors = _tensors_in(list(inputs) + [kwargs], [])
    mine = [(list(t.shape), t.dtype.name) for t in tensors]
    seen: list = []
    dist.all_gather_object(seen, mine, group=group)
    if any(other != seen[0] for other in seen):
        raise ValueError(f"TensorParallel.forward(): the model-parallel ranks {group.ranks} pass different input "
                         f"tensors (shapes and dtypes per rank: {seen}); the inputs are broadcast from rank "
                         f"{group.ranks[0]}, so each rank must pass tensors of the same shapes and dtypes")
    broadcast_tensors(tensors, group)
    return inputs, kwargs


def wrap_model(strategy, model, hcg, user_strategy):
    """The tensor-parallel step of fleet.distributed_model: TensorParallel(model, hcg, strategy=...)."""
    return TensorParallel(model, hcg, strategy=user_strategy)


def wrap_optimizer(strategy, optimizer, hcg, user_strategy):
    """The tensor-parallel step of fleet.distributed_optimizer: the optimizer as it is
    (HybridParallelOptimizer, which fleet wraps around every strategy's optimizer, does the work)."""
    return optimizer
