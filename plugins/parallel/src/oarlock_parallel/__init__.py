"""oarlock-parallel: hybrid parallelism with Paddle's fleet API (oarlock.distributed.fleet).

The parallel strategies (data, tensor, pipeline, sharding, sep, ...) are registered through the core's
`oarlock_register_parallel_strategies` hook; fleet resolves the degrees of
`DistributedStrategy.hybrid_configs` to strategies through that table, so another package can add one.
"""

from oarlock_parallel.strategies import ParallelStrategy

__all__ = ["ParallelStrategy"]
