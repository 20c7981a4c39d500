"""Paddle's private model-parallel helpers, with Paddle 3.2's signatures, over oarlock_parallel.mp_ops:
`_c_identity`, `_c_concat`, `_c_split`, `_mp_allreduce` (paddle.distributed.fleet.layers.mpu.mp_ops, the first
two also in paddle.distributed.collective) and `_get_global_group` (paddle.distributed.communication.group).
Tensor-parallel model code (PaddleFormers' parallel matmul, refined recompute) calls them directly.

As in Paddle's eager mode, group=None means the global group (not the model-parallel one); a process that
is not a member of `group` gets None. In one process (no parallel environment started) the global group has
one rank and each op is the identity. `skip_c_identity_dynamic` only lets Paddle skip a copy; values and
gradients are the same, so it is accepted and has no effect."""

from __future__ import annotations

from oarlock_parallel import mp_ops
from oarlock_xccl import api as dist   # oarlock.distributed's implementation

__all__ = ["_c_identity", "_c_concat", "_c_split", "_mp_allreduce", "_get_global_group"]


class _OneRank:
    """The global group of a process that started no parallel environment."""
    nranks, rank = 1, 0


def _get_global_group():
    """The global (world) group: Paddle's _get_global_group."""
    return dist.get_group(0)


def _resolve(group, what):
    if group is None:
        return dist.get_group(0) if dist.is_initialized() else _OneRank()
    group = mp_ops.mp_group_of(group, what)
    return group if group.is_member() else None


def _c_identity(tensor, group=None, skip_c_identity_dynamic=False):
    """tensor unchanged; in backward its gradient is summed over `group`."""
    group = _resolve(group, "_c_identity()")
    return None if group is None else mp_ops.c_identity(tensor, group)


def _c_concat(tensor, group=None):
    """Every rank's tensor concatenated on the last axis; in backward each rank keeps its slice."""
    group = _resolve(group, "_c_concat()")
    return None if group is None else mp_ops.c_concat(tensor, group)


def _c_split(tensor, group=None):
    """This rank's slice of tensor's last axis; in backward the slices' gradients are gathered."""
    group = _resolve(group, "_c_split()")
    return None if group is None else mp_ops.c_split(tensor, group)


def _mp_allreduce(tensor, op=dist.ReduceOp.SUM, group=None, use_calc_stream=True, use_model_parallel=True,
                  skip_c_identity_dynamic=False):
    """tensor summed over `group` (only SUM, as in Paddle); in backward the gradient passes unchanged."""
    if op != dist.ReduceOp.SUM:
        raise ValueError(f"_mp_allreduce(): argument 'op' = {op!r}; accepted: ReduceOp.SUM")
    group = _resolve(group, "_mp_allreduce()")
    return None if group is None else mp_ops.mp_allreduce(tensor, group)
