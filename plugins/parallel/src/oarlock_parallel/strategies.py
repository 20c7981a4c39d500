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


def _data_parallel():
    from oarlock_parallel import data_parallel    # loads oarlock.nn: only when a model is wrapped
    return data_parallel


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
    plugin: str | None = None     # set by the registry


# Paddle's axes, in its d_hybrid_degree order (fleet.py _init_hybrid_parallel_env)
BUILTIN = (
    ParallelStrategy("data", "data parallel: replicas on different batches, gradients averaged",
                     "dp_degree", "dp", "data", default_degree=-1,
                     wrap_model=lambda *a: _data_parallel().wrap_model(*a),
                     wrap_optimizer=lambda *a: _data_parallel().wrap_optimizer(*a)),
    ParallelStrategy("pipeline", "pipeline parallel: layers split into stages", "pp_degree", "pp", "pipe"),
    ParallelStrategy("sharding", "sharding: optimizer states (and gradients, parameters) partitioned",
                     "sharding_degree", "sharding", "sharding"),
    ParallelStrategy("tensor", "tensor (model) parallel: weight matrices split over ranks",
                     "mp_degree", "mp", "model"),
    ParallelStrategy("sep", "segment parallel: the sequence split over ranks", "sep_degree", "sep", "sep"),
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
