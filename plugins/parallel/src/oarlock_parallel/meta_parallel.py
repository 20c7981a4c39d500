"""The tensor-parallel names of Paddle's `paddle.distributed.fleet.meta_parallel` (and
`fleet.layers.mpu`): the four layers, the RNG tracker and model_parallel_random_seed."""

from oarlock_parallel.mp_layers import (ColumnParallelLinear, ParallelCrossEntropy, RowParallelLinear,
                                        VocabParallelEmbedding)
from oarlock_parallel.rng import RNGStatesTracker, get_rng_state_tracker, model_parallel_random_seed

__all__ = ["ColumnParallelLinear", "RowParallelLinear", "VocabParallelEmbedding", "ParallelCrossEntropy",
           "RNGStatesTracker", "get_rng_state_tracker", "model_parallel_random_seed"]

# the namespaces Paddle exposes them in
NAMESPACES = ("oarlock.distributed.fleet.meta_parallel", "oarlock.distributed.fleet.layers.mpu")
