"""Entry point of oarlock-parallel: the parallel strategies and oarlock.distributed.fleet.

Nothing heavy is imported here; the fleet modules load when a fleet name is first used.
"""

from oarlock import hookimpl


@hookimpl
def oarlock_register_parallel_strategies(strategies):
    from oarlock_parallel.strategies import BUILTIN
    for strategy in BUILTIN:
        strategies.register(strategy)


@hookimpl
def oarlock_register_api(api):
    from oarlock_parallel import fleet, topology
    api.namespace("oarlock.distributed.fleet", doc=fleet.__doc__)
    for name in fleet.__all__:
        api.export("oarlock.distributed.fleet", name, getattr(fleet, name))
    for name in ("CommunicateTopology", "HybridCommunicateGroup", "ParallelMode"):
        api.export("oarlock.distributed.fleet.base.topology", name, getattr(topology, name))
    api.export("oarlock.distributed", "ParallelMode", topology.ParallelMode)
    from oarlock_parallel import meta_parallel
    for namespace in meta_parallel.NAMESPACES:
        for name in meta_parallel.__all__:
            api.export(namespace, name, getattr(meta_parallel, name))
    from oarlock_parallel import dp_api      # oarlock.DataParallel, fleet.utils.hybrid_parallel_util
    dp_api.register(api)
    from oarlock_parallel import hybrid_api, sequence_parallel_api, sharding_api
    hybrid_api.register(api)              # TensorParallel, HybridParallelOptimizer, HybridParallelClipGrad
    sequence_parallel_api.register(api)   # fleet.utils.sequence_parallel_utils
    sharding_api.register(api)            # oarlock.distributed.sharding, DygraphShardingOptimizer
    from oarlock_parallel import paddle_paths_api, recompute_api
    recompute_api.register(api)           # fleet.utils.recompute, fleet.recompute[.recompute]
    paddle_paths_api.register(api)        # the other module paths Paddle model code imports fleet names from
    from oarlock_parallel import moe_api   # MoE (issue 20): incubate.distributed.models.moe, moe_utils
    moe_api.register(api)
