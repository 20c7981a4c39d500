"""Which process logs and saves: Paddle's hapi prints and writes checkpoints on local rank 0 only."""

from __future__ import annotations

import functools

import oarlock.distributed


@functools.lru_cache(maxsize=1)
def local_rank() -> int:
    """This process's rank on its node, from the launch environment (0 when not launched)."""
    return int(oarlock.distributed.ParallelEnv().local_rank)


def world_size() -> int:
    return int(oarlock.distributed.ParallelEnv().nranks)
