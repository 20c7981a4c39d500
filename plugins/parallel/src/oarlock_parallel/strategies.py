"""The parallel strategies: what each hybrid_configs degree means, and the table fleet resolves them by.

A strategy is registered through the core's `oarlock_register_parallel_strategies` hook. Fleet reads the
degrees of `hybrid_configs` through the table (`registered()`), so a package that registers a strategy
with a new `degree_key` makes that key valid in `hybrid_configs` and its `order_key` valid in `order`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


def _not_implemented(kind: str):
    def wrap(strategy: "ParallelStrategy", obj, hcg, user_strategy):
        raise NotImplementedError(
            f"fleet.distributed_{kind}(): the {strategy.name!r} parallel strategy ({strategy.degree_key}="
            f"{hcg.topology().get_dim_size(strategy.axis)}) is not implemented yet in oarlock-parallel; "
            f"with degree 1 everywhere distributed_{kind} returns its argument unchanged")
    return wrap


def _lazy(module: str, function: str):
    """module.function, imported on first call (the strategy modules load oarlock.nn: only when a model
    or optimizer is wrapped)."""
    def call(*args):
        import importlib
        return getattr(importlib.import_module(f"oarlock_parallel.{module}"), function)(*args)
    call.__name__ = f"{module}.{function}"
    return call


@dataclass
class ParallelStrategy:
    """One axis of hybrid parallelism.

    name: the strategy's name ("data"); description: one line for `oarlock plugins`;
    degree_key: its degree in hybrid_configs ("dp_degree"); order_key: its name in hybrid_configs["order"]
    ("dp"); axis: its axis name in the CommunicateTopology ("data"); default_degree: the degree when the
    program sets none (-1 means "whatever the world size leaves", data parallel only);
    wrap_model(strategy, model, hcg, user_strategy) and wrap_optimizer(strategy, optimizer, hcg,
    user_strategy): what `fleet.distributed_model` / `distributed_optimizer` do when the degree is above 1
    (they return the wrapped object; the default raises NotImplementedError naming the strategy)."""

    name: str
    description: str
    degree_key: str
    order_key: str
    axis: str
    default_degree: int = 1
    wrap_model: Callable = _not_implemented("model")
    wrap_optimizer: Callable = _not_implemented("optimizer")
    # Paddle wraps the model once, by the first of its parallel modes that is on (pipeline, tensor, sep,
    # sharding, data): the active strategy with the lowest model_priority wraps the model
    model_priority: int = 100
    plugin: str | None = None     # set by the registry


# Paddle's axes, in its d_hybrid_degree order (fleet.py _init_hybrid_parallel_env)
BUILTIN = (
    ParallelStrategy("data", "data parallel: replicas on different batches, gradients averaged",
                     "dp_degree", "dp", "data", default_degree=-1, model_priority=4,
                     wrap_model=_lazy("data_parallel", "wrap_model"),
                     wrap_optimizer=_lazy("data_parallel", "wrap_optimizer")),
    ParallelStrategy("pipeline", "pipeline parallel: layers split into stages", "pp_degree", "pp", "pipe",
                     model_priority=0, wrap_model=_lazy("pipeline_parallel", "wrap_model"),
                     wrap_optimizer=_lazy("pipeline_parallel", "wrap_optimizer")),
    ParallelStrategy("sharding", "sharding: optimizer states (and gradients, parameters) partitioned",
                     "sharding_degree", "sharding", "sharding", model_priority=3,
                     wrap_model=_lazy("sharding_stage1", "wrap_model"),
                     wrap_optimizer=_lazy("sharding_stage1", "wrap_optimizer")),
    ParallelStrategy("tensor", "tensor (model) parallel: weight matrices split over ranks",
                     "mp_degree", "mp", "model", model_priority=1,
                     wrap_model=_lazy("tensor_parallel", "wrap_model"),
                     wrap_optimizer=_lazy("tensor_parallel", "wrap_optimizer")),
    ParallelStrategy("sep", "segment parallel: the sequence split over ranks", "sep_degree", "sep", "sep",
                     model_priority=2),
    ParallelStrategy("context", "context parallel: attention over a split sequence", "cp_degree", "cp", "context"),
    ParallelStrategy("expert", "expert parallel: mixture-of-experts experts split over ranks",
                     "ep_degree", "ep", "expert"),
    ParallelStrategy("moe_sharding", "sharding of the expert parameters", "moe_sharding_degree",
                     "moe_sharding", "moe_sharding"),
)


def registered(registry=None) -> dict[str, ParallelStrategy]:
    """The strategies every installed plugin registered, by name (registration order)."""
    if registry is None:
        from oarlock.plugin_api import default_registry
        registry = default_registry()
    return dict(registry.strategies)
