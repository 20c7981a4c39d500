"""Two helpers of Paddle 3.2's fleet.utils.hybrid_parallel_util that trainers call (PaddleFormers' Trainer,
its MoE optimizers): fused_allreduce_gradients_with_group and unwrap_optimizer.

`fused_allreduce_gradients_with_group(parameter_list, group, bucket_size, scale)` sums the gradients over
`group` (the world when None) in fused buckets and multiplies them by `scale` (1 / group size when None, so
the default is the mean); Paddle scales before the sum, here after, which is the same up to float rounding."""

from __future__ import annotations

import oarlock
from oarlock_parallel import dp_utils
from oarlock_xccl import api as dist   # oarlock.distributed's implementation

__all__ = ["fused_allreduce_gradients_with_group", "unwrap_optimizer"]


def fused_allreduce_gradients_with_group(parameter_list, group, bucket_size=128 * 1024 * 1024, scale=None):
    """Sum the gradients of `parameter_list` over `group` and scale them (see the module docstring)."""
    if not isinstance(bucket_size, int) or bucket_size <= 0:
        raise ValueError(f"fused_allreduce_gradients_with_group(): argument 'bucket_size' = {bucket_size!r}; "
                         "accepted: a positive int (bytes)")
    group = dist.get_group(0) if group is None else group
    scale = 1.0 / group.nranks if scale is None else float(scale)
    if group.nranks > 1:
        dp_utils.allreduce_gradients_fused(parameter_list, group, dist.ReduceOp.SUM)
    if scale != 1.0:
        with oarlock.no_grad():
            for p in parameter_list:
                if getattr(p, "grad", None) is not None:
                    p.grad = p.grad * scale


def unwrap_optimizer(optimizer, optimizer_instances=()):
    """The optimizer inside the wrappers of the types `optimizer_instances` (their `_inner_opt`)."""
    inner = optimizer
    while isinstance(inner, optimizer_instances):
        inner = inner._inner_opt
    return inner
