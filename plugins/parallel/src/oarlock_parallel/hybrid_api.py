"""The public names of hybrid parallelism, registered by oarlock_parallel.plugin: TensorParallel,
HybridParallelOptimizer and HybridParallelClipGrad, under the namespaces Paddle has them in."""

from __future__ import annotations

META_PARALLEL = ("oarlock.distributed.fleet.meta_parallel", "oarlock.distributed.fleet.meta_parallel.tensor_parallel")
META_OPTIMIZERS = ("oarlock.distributed.fleet.meta_optimizers",
                   "oarlock.distributed.fleet.meta_optimizers.dygraph_optimizer",
                   "oarlock.distributed.fleet.meta_optimizers.dygraph_optimizer.hybrid_parallel_optimizer")
UTIL_NAMESPACE = "oarlock.distributed.fleet.utils.hybrid_parallel_util"


def register(api) -> None:
    from oarlock_parallel import hybrid_optimizer, tensor_parallel
    for namespace in META_PARALLEL:
        api.export(namespace, "TensorParallel", tensor_parallel.TensorParallel)
    for namespace in META_OPTIMIZERS:
        api.export(namespace, "HybridParallelOptimizer", hybrid_optimizer.HybridParallelOptimizer)
    api.export(META_OPTIMIZERS[-1], "HybridParallelClipGrad", hybrid_optimizer.HybridParallelClipGrad)
    api.export(UTIL_NAMESPACE, "broadcast_input_data", tensor_parallel.broadcast_input_data)
    api.export(UTIL_NAMESPACE, "obtain_optimizer_parameters_list", hybrid_optimizer.parameters_of)
