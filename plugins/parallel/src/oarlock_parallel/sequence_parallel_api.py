"""The public names of sequence parallelism, registered by oarlock_parallel.plugin: Paddle's
paddle.distributed.fleet.utils.sequence_parallel_utils (oarlock_parallel.sequence_parallel)."""

from __future__ import annotations

NAMESPACE = "oarlock.distributed.fleet.utils.sequence_parallel_utils"


def register(api) -> None:
    from oarlock_parallel import sequence_parallel
    api.namespace(NAMESPACE, doc=sequence_parallel.__doc__)
    for name in sequence_parallel.__all__:
        api.export(NAMESPACE, name, getattr(sequence_parallel, name))
