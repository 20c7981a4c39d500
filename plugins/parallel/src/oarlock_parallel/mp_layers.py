"""Tensor-parallel layers (Paddle's fleet/layers/mpu/mp_layers.py): ColumnParallelLinear,
RowParallelLinear, VocabParallelEmbedding, ParallelCrossEntropy.

Each rank of the model-parallel group holds one equal slice of the weight (Paddle's per-rank shapes):
ColumnParallelLinear [in, out/n], RowParallelLinear [in/n, out], VocabParallelEmbedding [V/n, D].
`mp_group=None` means the model-parallel group of fleet's HybridCommunicateGroup. With a one-rank
group every layer is its plain counterpart.

Weights are created in the tracker's 'model_parallel_rng' state when it is tracked (fleet.init with
mp > 1 seeds it through model_parallel_random_seed), so that slices start different on each rank.
Paddle marks such weights `is_distributed` / `split_axis`; oarlock's tensors have no free attributes,
so each layer keeps its split axes in `SPLIT_AXES` (what sharded_state_dict uses).
"""

from __future__ import annotations

import numbers

import oarlock
import oarlock.nn as nn
import oarlock.nn.functional as F
from oarlock_parallel import marks, mp_ops
from oarlock_parallel.parallel_cross_entropy import parallel_cross_entropy
from oarlock_parallel.rng import MODEL_PARALLEL_RNG, get_rng_state_tracker

__all__ = ["ColumnParallelLinear", "RowParallelLinear", "VocabParallelEmbedding", "ParallelCrossEntropy"]



def _positive(layer: str, argument: str, value) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{layer}: {argument} must be a positive int, got {value!r}")
    return int(value)


def _divisible(layer: str, argument: str, value: int, size: int) -> int:
    if value % size:
        raise ValueError(f"{layer}: {argument} ({value}) must be divisible by the model-parallel degree "
                         f"({size})")
    return value // size


def _check_last_dim(layer: str, x, size: int, what: str):
    if not isinstance(x, oarlock.Tensor):
        raise TypeError(f"{layer}.forward(): x must be a Tensor, got {type(x).__name__}")
    if x.ndim == 0 or x.shape[-1] != size:
        raise ValueError(f"{layer}.forward(): x must have shape [*, {size}] ({what}), got {x.shape}")


class _ParallelLayer(nn.Layer):
    """What the parallel layers (and the sequence-parallel linears) share: the group, and creating sliced
    weights in the tracked state: a column- or row-parallel linear's weight and bias."""

    SPLIT_AXES: dict = {}

    def _init_group(self, mp_group):
        self.model_parallel_group = mp_ops.mp_group_of(mp_group, type(self).__name__, "mp_group")
        self.rank, self.world_size = mp_ops.group_rank_size(self.model_parallel_group)
        self.is_mp = self.world_size > 1

    def _init_features(self, layer: str, in_features, out_features):
        self.in_features = _positive(layer, "in_features", in_features)
        self.out_features = _positive(layer, "out_features", out_features)

    def _column_parameters(self, layer: str, weight_attr, has_bias):
        """This rank's columns of the weight, [in, out/n], and of the bias, [out/n] (None without has_bias)."""
        self.output_size_per_partition = _divisible(layer, "out_features", self.out_features, self.world_size)
        self.weight = self._sliced_parameter([self.in_features, self.output_size_per_partition], weight_attr)
        self.bias = self._zero_bias(self.output_size_per_partition) if has_bias else None
        self._mark_split()

    def _row_parameters(self, layer: str, weight_attr, has_bias):
        """This rank's rows of the weight, [in/n, out], and the whole bias, [out] (None without has_bias)."""
        self.input_size_per_partition = _divisible(layer, "in_features", self.in_features, self.world_size)
        self.weight = self._sliced_parameter([self.input_size_per_partition, self.out_features], weight_attr)
        self.bias = self._zero_bias(self.out_features) if has_bias else None
        self._mark_split()

    def _zero_bias(self, size: int):
        # Megatron's (and Paddle's) bias starts at zero whatever weight_attr says
        return self.create_parameter([size], attr=nn.initializer.Constant(0.0), is_bias=True)

    def _sliced_parameter(self, shape, attr):
        tracker = get_rng_state_tracker()
        if self.is_mp and MODEL_PARALLEL_RNG in tracker.states_:
            with tracker.rng_state():
                return self.create_parameter(shape, attr=attr)
        return self.create_parameter(shape, attr=attr)

    def _mark_split(self):
        """Mark this rank's slices (Paddle's is_distributed / split_axis): global-norm clipping sums
        their squares over the model-parallel group, checkpoints shard them."""
        if self.is_mp:
            for key, axis in self.SPLIT_AXES.items():
                param = getattr(self, key, None)
                if param is not None:
                    marks.mark(param, is_distributed=True, split_axis=axis)

    def sharded_state_dict(self, structured_name_prefix: str = ""):
        """{prefix + key: ShardedWeight}: split weights as this rank's shard along their split axis over
        the model-parallel group, the rest replicated (needs oarlock-checkpoint's FlexCheckpoint)."""
        build = getattr(oarlock.distributed, "build_sharded_state_dict", None)
        if build is None:
            raise RuntimeError(f"{type(self).__name__}.sharded_state_dict(): needs FlexCheckpoint "
                               f"(oarlock.distributed.build_sharded_state_dict); install oarlock-checkpoint")
        state = self.state_dict(structured_name_prefix="")
        rules = {k: axis for k, axis in self.SPLIT_AXES.items() if k in state}
        return build(state, rules, structured_name_prefix, group=self.model_parallel_group)


class ColumnParallelLinear(_ParallelLayer):
    """y = x @ W + b with W [in, out] split by columns: this rank holds [in, out/n] (and bias [out/n],
    none by default). The input is replicated (its gradient is summed over the group); the output is
    gathered on the last dim to [*, out] with gather_output, else left as [*, out/n]."""

    SPLIT_AXES = {"weight": 1, "bias": 0}

    def __init__(self, in_features, out_features, weight_attr=None, has_bias=None, gather_output=True,
                 fuse_matmul_bias=False, mp_group=None, name=None):
        super().__init__()
        self._init_features("ColumnParallelLinear", in_features, out_features)
        self._init_group(mp_group)
        self.gather_output, self.fuse_matmul_bias, self._name = bool(gather_output), fuse_matmul_bias, name
        self._column_parameters("ColumnParallelLinear", weight_attr, has_bias)

    def forward(self, x):
        _check_last_dim("ColumnParallelLinear", x, self.in_features, f"in_features={self.in_features}")
        out = F.linear(mp_ops.c_identity(x, self.model_parallel_group), self.weight, self.bias)
        return mp_ops.c_concat(out, self.model_parallel_group) if self.gather_output else out

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features} "
                f"({self.output_size_per_partition} on this rank), gather_output={self.gather_output}")


class RowParallelLinear(_ParallelLayer):
    """y = x @ W + b with W [in, out] split by rows: this rank holds [in/n, out]; bias [out] is whole
    (zero-initialised). The input is split on its last dim unless input_is_parallel; the partial products
    are summed over the group, then the bias is added once."""

    SPLIT_AXES = {"weight": 0}

    def __init__(self, in_features, out_features, weight_attr=None, has_bias=True, input_is_parallel=False,
                 fuse_matmul_bias=False, mp_group=None, name=None):
        super().__init__()
        self._init_features("RowParallelLinear", in_features, out_features)
        self._init_group(mp_group)
        self.input_is_parallel, self.fuse_matmul_bias, self._name = bool(input_is_parallel), fuse_matmul_bias, name
        self._row_parameters("RowParallelLinear", weight_attr, has_bias)

    def forward(self, x):
        group = self.model_parallel_group
        if self.input_is_parallel or not self.is_mp:
            width = self.input_size_per_partition if self.is_mp else self.in_features
            _check_last_dim("RowParallelLinear", x, width, "this rank's slice of in_features" if self.is_mp
                            else f"in_features={self.in_features}")
            x_parallel = x
        else:
            _check_last_dim("RowParallelLinear", x, self.in_features, f"in_features={self.in_features}")
            x_parallel = mp_ops.c_split(x, group)
        out = mp_ops.mp_allreduce(oarlock.matmul(x_parallel, self.weight), group)
        return out if self.bias is None else out + self.bias

    def extra_repr(self):
        return (f"in_features={self.in_features} ({self.input_size_per_partition} on this rank), "
                f"out_features={self.out_features}, input_is_parallel={self.input_is_parallel}")


class VocabParallelEmbedding(_ParallelLayer):
    """An embedding table [V, D] split by rows: this rank holds ids [rank*V/n, (rank+1)*V/n) as [V/n, D].
    Each rank looks up the ids it holds (zeros for the others) and the results are summed over the group."""

    SPLIT_AXES = {"weight": 0}

    def __init__(self, num_embeddings, embedding_dim, weight_attr=None, mp_group=None, name=None):
        super().__init__()
        layer = "VocabParallelEmbedding"
        self.num_embeddings = self.origin_num_embeddings = _positive(layer, "num_embeddings", num_embeddings)
        self.embedding_dim = _positive(layer, "embedding_dim", embedding_dim)
        self._init_group(mp_group)
        per_part = _divisible(layer, "num_embeddings", self.num_embeddings, self.world_size)
        self.vocab_start_index = self.rank * per_part
        self._size, self._name = [per_part, self.embedding_dim], name
        self.weight = self._sliced_parameter(self._size, weight_attr)
        self._mark_split()

    def forward(self, x):
        if not isinstance(x, oarlock.Tensor) or x.dtype not in (oarlock.int32, oarlock.int64):
            got = f"dtype {x.dtype}" if isinstance(x, oarlock.Tensor) else type(x).__name__
            raise TypeError(f"VocabParallelEmbedding.forward(): x must be an int32/int64 Tensor of ids, got {got}")
        if not self.is_mp:
            return F.embedding(x, self.weight)
        local = x - self.vocab_start_index
        held = oarlock.logical_and(local >= 0, local < self._size[0])
        # ids held elsewhere look up row 0, then are zeroed (their gradient to row 0 is zero too)
        rows = F.embedding(oarlock.where(held, local, oarlock.zeros_like(local)), self.weight)
        rows = rows * oarlock.unsqueeze(held.astype(rows.dtype), -1)
        return mp_ops.mp_allreduce(rows, self.model_parallel_group)

    def extra_repr(self):
        return (f"num_embeddings={self.num_embeddings} ({self._size[0]} on this rank from "
                f"{self.vocab_start_index}), embedding_dim={self.embedding_dim}")


class ParallelCrossEntropy(_ParallelLayer):
    """Softmax cross-entropy over logits split on the vocabulary (last) dim across the group, without
    gathering them. forward(input, label): label of rank input.ndim - 1 or input.ndim (last dim 1);
    returns the unreduced loss [..., 1], 0 where label == ignore_index."""

    def __init__(self, mp_group=None, name=None, ignore_index=-100):
        super().__init__()
        if not isinstance(ignore_index, numbers.Integral) or isinstance(ignore_index, bool):
            raise TypeError(f"ParallelCrossEntropy: ignore_index must be an int, got {ignore_index!r}")
        self._init_group(mp_group)
        self.ignore_index, self.name = int(ignore_index), name

    def forward(self, input, label):
        return parallel_cross_entropy(input, label, self.model_parallel_group, self.ignore_index)
