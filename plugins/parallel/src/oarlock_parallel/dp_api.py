"""The public names of data parallelism, registered by oarlock_parallel.plugin: oarlock.DataParallel
and Paddle's fleet.utils.hybrid_parallel_util functions."""

from __future__ import annotations

UTIL_NAMESPACE = "oarlock.distributed.fleet.utils.hybrid_parallel_util"
UTILS = ("fused_allreduce_gradients", "broadcast_dp_parameters", "broadcast_mp_parameters",
         "broadcast_sharding_parameters")


def register(api) -> None:
    from oarlock_parallel import dp_utils
    from oarlock_parallel.data_parallel import DataParallel
    api.export("oarlock", "DataParallel", DataParallel)
    api.namespace(UTIL_NAMESPACE, doc=dp_utils.__doc__)
    for name in UTILS:
        api.export(UTIL_NAMESPACE, name, getattr(dp_utils, name))
