"""Module paths of Paddle 3.2 that model code imports fleet names from, registered by oarlock_parallel.plugin
with the same objects the primary namespaces hold (PaddleFormers imports e.g.
`paddle.distributed.fleet.meta_parallel.parallel_layers.random.get_rng_state_tracker` and
`from paddle.distributed.fleet.layers.mpu import mp_layers, mp_ops`)."""

from __future__ import annotations

MPU = "oarlock.distributed.fleet.layers.mpu"
# namespace -> (module of oarlock_parallel, names)
PATHS = {
    MPU + ".mp_layers": ("mp_layers", ("ColumnParallelLinear", "RowParallelLinear", "VocabParallelEmbedding",
                                       "ParallelCrossEntropy")),
    MPU + ".random": ("rng", ("RNGStatesTracker", "get_rng_state_tracker", "model_parallel_random_seed")),
    "oarlock.distributed.fleet.meta_parallel.parallel_layers": (
        "meta_parallel", ("ColumnParallelLinear", "RowParallelLinear", "VocabParallelEmbedding",
                          "ParallelCrossEntropy", "get_rng_state_tracker", "model_parallel_random_seed")),
    "oarlock.distributed.fleet.meta_parallel.parallel_layers.mp_layers": (
        "mp_layers", ("ColumnParallelLinear", "RowParallelLinear", "VocabParallelEmbedding",
                      "ParallelCrossEntropy")),
    "oarlock.distributed.fleet.meta_parallel.parallel_layers.random": (
        "rng", ("RNGStatesTracker", "get_rng_state_tracker", "model_parallel_random_seed")),
}


STREAM = ("oarlock.distributed.stream", "oarlock.distributed.communication.stream")
PIPELINE = ("oarlock.distributed.fleet.meta_parallel", "oarlock.distributed.fleet.meta_parallel.parallel_layers",
            "oarlock.distributed.fleet.meta_parallel.parallel_layers.pp_layers")
GROUP = "oarlock.distributed.communication.group"
GROUP_NAMES = ("Group", "get_group", "is_initialized", "destroy_process_group", "barrier", "wait", "get_backend")


def register(api) -> None:
    import importlib

    from oarlock_parallel import fleet_object, stream
    from oarlock_xccl import api as dist   # oarlock.distributed's objects: oarlock-xccl registers after this plugin
    for namespace in STREAM:
        api.namespace(namespace, doc=stream.__doc__)
        for name in stream.__all__:
            api.export(namespace, name, getattr(stream, name))
    for name in GROUP_NAMES:
        api.export(GROUP, name, getattr(dist, name))
    from oarlock_parallel import pipeline_layers, pipeline_parallel
    for namespace in PIPELINE:
        for name in pipeline_layers.__all__:
            api.export(namespace, name, getattr(pipeline_layers, name))
    for namespace in PIPELINE[:1] + ("oarlock.distributed.fleet.meta_parallel.pipeline_parallel",):
        for name in pipeline_parallel.__all__:
            api.export(namespace, name, getattr(pipeline_parallel, name))
    from oarlock_parallel import marks
    # Paddle's built-in Tensor attribute (False unless a parallel layer marks its slice), kept in marks
    api.export("Tensor", "is_distributed", property(
        marks.is_distributed, lambda t, value: marks.mark(t, is_distributed=bool(value)),
        doc="Whether this tensor is one rank's slice of a tensor-parallel weight (Paddle's attribute)."))
    from oarlock_parallel import dp_group_utils
    for name in dp_group_utils.__all__:
        api.export("oarlock.distributed.fleet.utils.hybrid_parallel_util", name, getattr(dp_group_utils, name))
    for name in fleet_object.__all__:
        api.export("oarlock.distributed.fleet", name, getattr(fleet_object, name))
    for namespace, (module, names) in PATHS.items():
        source = importlib.import_module(f"oarlock_parallel.{module}")
        for name in names:
            api.export(namespace, name, getattr(source, name))
    from oarlock_parallel import paddle_mp_ops, sequence_parallel
    # Paddle's private helpers (allowed in registry.PADDLE_PRIVATE_NAMES)
    api.namespace(MPU + ".mp_ops", doc=paddle_mp_ops.__doc__)
    for name in ("_c_identity", "_c_concat", "_c_split", "_mp_allreduce"):
        api.export(MPU + ".mp_ops", name, getattr(paddle_mp_ops, name))
    for name in ("_c_identity", "_c_concat"):
        api.export("oarlock.distributed.collective", name, getattr(paddle_mp_ops, name))
    api.export(GROUP, "_get_global_group", paddle_mp_ops._get_global_group)
    api.export(MPU + ".mp_layers", "MPScale", sequence_parallel.MPScale)
