"""spmd_api: register(api) exports the SPMD part of the auto-parallel API into oarlock.distributed and Paddle's
module paths: shard_layer, shard_optimizer, ShardingStage1/2/3, shard_dataloader, parallelize with
ColWiseParallel / RowWiseParallel and SplitPoint, set_mesh / get_mesh, local_map."""

from oarlock_autoparallel.api_layer import ShardDataloader, shard_dataloader, shard_layer
from oarlock_autoparallel.api_optimizer import ShardingStage1, ShardingStage2, ShardingStage3, shard_optimizer
from oarlock_autoparallel.local_map import local_map
from oarlock_autoparallel.parallelize import ColWiseParallel, RowWiseParallel, get_mesh, parallelize, set_mesh
from oarlock_autoparallel.pipeline import SplitPoint

API = {"shard_layer": shard_layer, "shard_optimizer": shard_optimizer, "ShardingStage1": ShardingStage1,
       "ShardingStage2": ShardingStage2, "ShardingStage3": ShardingStage3, "shard_dataloader": shard_dataloader,
       "parallelize": parallelize, "ColWiseParallel": ColWiseParallel, "RowWiseParallel": RowWiseParallel,
       "local_map": local_map, "SplitPoint": SplitPoint}
# Paddle's module layout under paddle.distributed.auto_parallel
PATHS = {
    "oarlock.distributed.auto_parallel": ["shard_layer", "shard_optimizer", "ShardingStage1", "ShardingStage2",
                                          "ShardingStage3", "shard_dataloader", "set_mesh", "get_mesh"],
    "oarlock.distributed.auto_parallel.api": ["shard_layer", "shard_optimizer", "ShardingStage1", "ShardingStage2",
                                              "ShardingStage3", "shard_dataloader", "ShardDataloader"],
    "oarlock.distributed.auto_parallel.intermediate.parallelize": ["parallelize"],
    "oarlock.distributed.auto_parallel.intermediate.tensor_parallel": ["ColWiseParallel", "RowWiseParallel"],
    "oarlock.distributed.auto_parallel.local_map": ["local_map"],
    "oarlock.distributed.auto_parallel.intermediate.pipeline_parallel": ["SplitPoint"],
}
_EXTRA = {"set_mesh": set_mesh, "get_mesh": get_mesh, "ShardDataloader": ShardDataloader}


def register(api) -> None:
    for name, obj in API.items():
        api.export("oarlock.distributed", name, obj)
    for namespace, names in PATHS.items():
        for name in names:
            api.export(namespace, name, API.get(name) or _EXTRA[name])
