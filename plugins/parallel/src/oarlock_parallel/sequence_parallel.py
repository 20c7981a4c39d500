"""Sequence parallelism (Paddle's fleet/utils/sequence_parallel_utils.py): the linears, the parameter
marks and the gradient all-reduce hooks; the communication ops are in sequence_parallel_ops.

Layout [s, b, h]. Between tensor-parallel blocks each rank of the model-parallel group holds s/n rows
of the sequence, so LayerNorm, dropout and residuals run on a shard. `ColumnSequenceParallelLinear`
all-gathers its input on dim 0 and multiplies by its column slice [in, out/n];
`RowSequenceParallelLinear` multiplies its input slice by its row slice [in/n, out] and reduce-scatters
the partial products on dim 0 before adding its whole bias.

A parameter applied to a sequence shard (a LayerNorm's, the row linear's bias) sees only its shard's
gradient: it is marked (`mark_as_sequence_parallel_parameter`), and
`register_sequence_parallel_allreduce_hooks` sums the gradients of the marked parameters over the
model-parallel group once backward has made them final (every accumulation_steps backward passes).
"""

from __future__ import annotations

import numbers

import oarlock
import oarlock.distributed as dist
import oarlock.nn as nn
import oarlock.nn.functional as F
from oarlock.autograd import queue_callback

from oarlock_parallel import marks
from oarlock_parallel.config import MP_CONFIGS
from oarlock_parallel.dp_utils import allreduce_gradients_fused
from oarlock_parallel.mp_layers import _check_last_dim, _ParallelLayer
from oarlock_parallel.mp_ops import hybrid_group
from oarlock_parallel.sequence_parallel_ops import (AllGatherOp, GatherOp, MPScale, ReduceScatterOp, ScatterOp,
                                                    SPInnerOverlapLinear, all_gather, check_sequence, reduce_scatter,
                                                    scatter)

__all__ = ["scatter", "all_gather", "reduce_scatter", "ScatterOp", "GatherOp", "AllGatherOp", "ReduceScatterOp",
           "mark_as_sequence_parallel_parameter", "is_sequence_parallel_parameter",
           "create_fused_allreduce_gradient_hook", "create_non_fused_allreduce_gradient_hook",
           "register_sequence_parallel_allreduce_hooks", "is_fused_matmul_bias_supported",
           "is_fused_linear_param_grad_add_supported", "SPInnerOverlapLinear", "ColumnSequenceParallelLinear",
           "MPScale", "RowSequenceParallelLinear"]

MARK = "sequence_parallel"


# -- parameter marks ---------------------------------------------------------------------------------
def mark_as_sequence_parallel_parameter(parameter):
    """Mark `parameter` as applied to a sequence shard: its gradient is summed over the model-parallel group."""
    marks.mark(parameter, **{MARK: True})


def is_sequence_parallel_parameter(parameter) -> bool:
    return bool(marks.get(parameter, MARK, False))


def is_fused_matmul_bias_supported() -> bool:
    """False: oarlock has no fused matmul + bias kernel (Paddle's fused_gemm_epilogue)."""
    return False


def is_fused_linear_param_grad_add_supported() -> bool:
    """False: oarlock has no fused_linear_param_grad_add kernel."""
    return False


# -- gradient all-reduce hooks -----------------------------------------------------------------------
def _after_backward(fn) -> None:
    """Run fn() once backward has put every gradient in place and after every callback its hooks queued
    (a DataParallel write-back of averaged gradients included), so it sums the final `.grad`."""
    queue_callback(lambda: queue_callback(fn))


def _sum_grads(params: list, group, fused: bool) -> None:
    """Replace the gradients of `params` by their sums over `group`: one all-reduce each, or fused into
    flat buckets of 128 MB. Fresh tensors are reduced, as a gradient may share memory with another."""
    if fused:
        allreduce_gradients_fused(params, group, dist.ReduceOp.SUM)
        return
    with oarlock.no_grad():
        for p in params:
            if p.grad is not None:
                total = p.grad.clone()
                dist.all_reduce(total, group=group)
                p.grad = total


def _steps(accumulation_steps, what: str) -> int:
    if not isinstance(accumulation_steps, numbers.Integral) or isinstance(accumulation_steps, bool):
        raise TypeError(f"{what}: accumulation_steps must be an int, got {accumulation_steps!r}")
    return int(accumulation_steps)


def create_fused_allreduce_gradient_hook(parameter_list, accumulation_steps, *, group=None):
    """A gradient hook for every parameter of `parameter_list`: once each has had accumulation_steps
    gradients, their gradients are summed over the model-parallel group (`group`) in fused buckets."""
    what = "create_fused_allreduce_gradient_hook()"
    params, steps = list(parameter_list), _steps(accumulation_steps, what)
    group = hybrid_group(what).get_model_parallel_group() if group is None else group
    count, due = [0], steps * len(params)

    def hook(grad):
        count[0] += 1
        if count[0] == due:
            count[0] = 0
            _after_backward(lambda: _sum_grads(params, group, fused=True))
        return None

    return hook


def create_non_fused_allreduce_gradient_hook(param, accumulation_steps, *, group=None):
    """A gradient hook for `param`: every accumulation_steps-th gradient, the accumulated gradient is
    summed over the model-parallel group (`group`)."""
    what = "create_non_fused_allreduce_gradient_hook()"
    steps = _steps(accumulation_steps, what)
    group = hybrid_group(what).get_model_parallel_group() if group is None else group
    count = [0]

    def hook(grad):
        count[0] += 1
        if count[0] % steps == 0:
            _after_backward(lambda: _sum_grads([param], group, fused=False))
        return None

    return hook


def register_sequence_parallel_allreduce_hooks(model, accumulation_steps=1, fuse_sequence_parallel_allreduce=False):
    """Sum the gradients of `model`'s trainable sequence-parallel parameters over fleet's model-parallel
    group every accumulation_steps backward passes (fused into buckets with
    fuse_sequence_parallel_allreduce). As in Paddle it does nothing when accumulation_steps <= 0, when
    the parallel environment is not started, or when the model-parallel degree is 1."""
    what = "register_sequence_parallel_allreduce_hooks()"
    if not isinstance(model, nn.Layer):
        raise TypeError(f"{what}: model must be an oarlock.nn.Layer, got {type(model).__name__}")
    steps = _steps(accumulation_steps, what)
    if steps <= 0 or not dist.is_initialized():
        return
    group = hybrid_group(what).get_model_parallel_group()
    if group.nranks <= 1:
        return
    params = [p for p in model.parameters() if is_sequence_parallel_parameter(p) and not p.stop_gradient]
    if fuse_sequence_parallel_allreduce:
        hook = create_fused_allreduce_gradient_hook(params, steps, group=group)
        for p in params:
            p.register_hook(hook)
    else:
        for p in params:
            p.register_hook(create_non_fused_allreduce_gradient_hook(p, steps, group=group))


# -- the linears -------------------------------------------------------------------------------------
def _mp_configs() -> dict:
    """The mp_configs of fleet's strategy (Paddle reads fleet._user_defined_strategy), else the defaults."""
    from oarlock_parallel import fleet
    strategy = fleet._state["strategy"]
    return dict(MP_CONFIGS) if strategy is None else strategy.hybrid_configs["mp_configs"]


def _no_fused_kernel(layer: str, fuse_matmul_bias) -> None:
    if fuse_matmul_bias and not is_fused_matmul_bias_supported():
        raise NotImplementedError(f"{layer}: fuse_matmul_bias=True needs a fused matmul + bias kernel, which "
                                  f"oarlock does not have; set fuse_matmul_bias=False")


class ColumnSequenceParallelLinear(_ParallelLayer):
    """y = all_gather(x) @ W + b with W [in, out] split by columns: this rank holds [in, out/n] (bias
    [out/n], none by default). x is this rank's [s/n, b, in]; y is [s, b, out/n]. Needs mp > 1 and
    gather_output=False (Paddle asserts both; its default gather_output=True is an error)."""

    SPLIT_AXES = {"weight": 1, "bias": 0}

    def __init__(self, in_features, out_features, weight_attr=None, has_bias=None, gather_output=True,
                 fuse_matmul_bias=False, mp_group=None, name=None):
        super().__init__()
        layer = "ColumnSequenceParallelLinear"
        self._init_features(layer, in_features, out_features)
        self._init_group(mp_group)
        if not self.is_mp:
            raise ValueError(f"{layer}: the model-parallel degree must be greater than 1 in sequence parallel, "
                             f"got {self.world_size}")
        if gather_output is not False:
            raise ValueError(f"{layer}: gather_output must be False in sequence parallel (the output stays split "
                             f"on its last dim), got gather_output={gather_output!r}; pass gather_output=False")
        _no_fused_kernel(layer, fuse_matmul_bias)
        self.gather_output, self.fuse_matmul_bias, self._name = False, False, name
        self._column_parameters(layer, weight_attr, has_bias)
        configs = _mp_configs()
        self.mp_async_allreduce = configs["mp_async_allreduce"]
        self.sp_async_reduce_scatter = configs["sp_async_reduce_scatter"]
        self.recompute_allgather = configs["recompute_allgather"]
        self.mp_fused_linear_param_grad_add = self.mp_async_allreduce and configs["mp_fused_linear_param_grad_add"]

    def forward(self, x):
        layer = "ColumnSequenceParallelLinear.forward()"
        _check_last_dim(layer, x, self.in_features, f"in_features={self.in_features}")
        if self.sp_async_reduce_scatter:
            return SPInnerOverlapLinear.apply(x, self.weight, self.bias, self.fuse_matmul_bias,
                                              self.recompute_allgather, self.mp_fused_linear_param_grad_add,
                                              self.model_parallel_group)
        return F.linear(AllGatherOp.apply(x, group=self.model_parallel_group), self.weight, self.bias)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features} "
                f"({self.output_size_per_partition} on this rank)")


class RowSequenceParallelLinear(_ParallelLayer):
    """y = reduce_scatter(x @ W) + b with W [in, out] split by rows: this rank holds [in/n, out]; the
    bias [out] is whole, zero-initialised and marked sequence-parallel (it is added to a sequence shard).
    x is [s, b, in/n]; y is this rank's [s/n, b, out]. Needs input_is_parallel=True (Paddle asserts it)."""

    SPLIT_AXES = {"weight": 0}

    def __init__(self, in_features, out_features, weight_attr=None, has_bias=True, input_is_parallel=False,
                 fuse_matmul_bias=False, mp_group=None, name=None):
        super().__init__()
        layer = "RowSequenceParallelLinear"
        self._init_features(layer, in_features, out_features)
        if input_is_parallel is not True:
            raise ValueError(f"{layer}: input_is_parallel must be True in sequence parallel (the input is the "
                             f"column-parallel output), got input_is_parallel={input_is_parallel!r}")
        _no_fused_kernel(layer, fuse_matmul_bias)
        self._init_group(mp_group)
        self.input_is_parallel, self.fuse_matmul_bias, self._name, self.mp_scale = True, False, name, None
        self._row_parameters(layer, weight_attr, has_bias)
        if self.is_mp and self.bias is not None:
            mark_as_sequence_parallel_parameter(self.bias)

    def forward(self, x):
        layer = "RowSequenceParallelLinear.forward()"
        _check_last_dim(layer, x, self.input_size_per_partition,
                        "this rank's slice of in_features" if self.is_mp else f"in_features={self.in_features}")
        if not self.is_mp:
            return F.linear(x, self.weight, self.bias)
        check_sequence(x, layer, self.world_size)
        out = ReduceScatterOp.apply(oarlock.matmul(x, self.weight), group=self.model_parallel_group)
        return out if self.bias is None else out + self.bias

    def extra_repr(self):
        return (f"in_features={self.in_features} ({self.input_size_per_partition} on this rank), "
                f"out_features={self.out_features}")

