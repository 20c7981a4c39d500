"""The public names of sharding, registered by oarlock_parallel.plugin, under the namespaces Paddle has them
in: oarlock.distributed.sharding (group_sharded_parallel, save_group_sharded_model), the stage-1
DygraphShardingOptimizer and ShardingParallel, and the stage-2 classes."""

from __future__ import annotations

SHARDING = "oarlock.distributed.sharding"
DYGRAPH_OPTIMIZER = ("oarlock.distributed.fleet.meta_optimizers.dygraph_optimizer",
                     "oarlock.distributed.fleet.meta_optimizers.dygraph_optimizer.dygraph_sharding_optimizer")
META_PARALLEL = ("oarlock.distributed.fleet.meta_parallel", "oarlock.distributed.fleet.meta_parallel.sharding_parallel")
STAGE2 = {"oarlock.distributed.fleet.meta_parallel.sharding.group_sharded_stage2": "GroupShardedStage2",
          "oarlock.distributed.fleet.meta_parallel.sharding.group_sharded_optimizer_stage2":
              "GroupShardedOptimizerStage2"}
UTILS = "oarlock.distributed.fleet.meta_parallel.sharding.group_sharded_utils"


def register(api) -> None:
    from oarlock_parallel import group_sharded, sharding_stage1, sharding_stage2
    api.namespace(SHARDING, doc=group_sharded.__doc__)
    for name in group_sharded.__all__:
        api.export(SHARDING, name, getattr(group_sharded, name))
    for namespace in DYGRAPH_OPTIMIZER:
        api.export(namespace, "DygraphShardingOptimizer", sharding_stage1.DygraphShardingOptimizer)
    for namespace in META_PARALLEL:
        api.export(namespace, "ShardingParallel", sharding_stage1.ShardingParallel)
    for namespace, name in STAGE2.items():
        api.export(namespace, name, getattr(sharding_stage2, name))
    api.export(UTILS, "GroupShardedScaler", group_sharded.GroupShardedScaler)
