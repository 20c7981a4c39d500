"""Paddle's data-parallel gradient utilities (fleet.utils.hybrid_parallel_util):
fused_allreduce_gradients and broadcast_{dp,mp,sharding}_parameters, and the group resolution
and model broadcast DataParallel shares with them.
"""

from __future__ import annotations

import oarlock
import oarlock.distributed as dist

from oarlock_parallel import buckets, marks

# Paddle's bucket size for fused_allreduce_gradients
_FUSED_MB = 128


def resolve_group(group, what: str):
    """`group`, or the world when None; None when there is no world to speak of (one process,
    collectives not started)."""
    if group is None:
        if dist.get_world_size() <= 1:
            return None
        if not dist.is_initialized():
            raise RuntimeError(f"{what}: {dist.get_world_size()} processes but the parallel environment is not "
                               f"started; call oarlock.distributed.init_parallel_env() first")
        return dist.get_group(0)
    if not (hasattr(group, "ranks") and hasattr(group, "nranks")):
        raise TypeError(f"{what}: group must be a process group (oarlock.distributed.new_group) or None, "
                        f"got {type(group).__name__}")
    return group


def broadcast_tensors(tensors, group, skip=None) -> None:
    """Copy the values of the group's first rank into every member's `tensors`, but those for which
    `skip(tensor)` is true (each rank must pass and skip the same ones). Nothing for no group or one rank."""
    if group is None or group.nranks <= 1:
        return
    with oarlock.no_grad():
        for tensor in tensors:
            if skip is None or not skip(tensor):
                dist.broadcast(tensor, src=group.ranks[0], group=group)


def broadcast_model(model, group, skip=None) -> None:
    """Copy the parameters and buffers of the group's first rank into every member's model, but those
    for which `skip(tensor)` is true (each rank must skip the same ones)."""
    broadcast_tensors(list(model.parameters()) + list(model.buffers()), group, skip)


def _hcg_group(hcg, getter: str, what: str):
    if hcg is None:
        return resolve_group(None, what)
    if not hasattr(hcg, getter):
        raise TypeError(f"{what}: hcg must be a HybridCommunicateGroup or None, got {type(hcg).__name__}")
    return getattr(hcg, getter)()


def broadcast_dp_parameters(model, hcg, fuse_params=True):
    """Broadcast `model`'s parameters and buffers from the first rank of the data-parallel group
    (the world when hcg is None). fuse_params (Paddle's: broadcast in fused buffers) is accepted and
    changes nothing: each tensor is broadcast on its own, with the same result."""
    broadcast_model(model, _hcg_group(hcg, "get_data_parallel_group", "broadcast_dp_parameters()"))


def broadcast_mp_parameters(model, hcg, fuse_params=True):
    """Broadcast from the first rank of the model-parallel group, but the tensor-parallel slices
    (marks.is_distributed): each rank of that group holds a different one (as Paddle's
    sync_params_buffers with is_model_parallel=True)."""
    broadcast_model(model, _hcg_group(hcg, "get_model_parallel_group", "broadcast_mp_parameters()"),
                    skip=marks.is_distributed)


def broadcast_sharding_parameters(model, hcg, fuse_params=True):
    """Broadcast from the first rank of the sharding group."""
    broadcast_model(model, _hcg_group(hcg, "get_sharding_parallel_group", "broadcast_sharding_parameters()"))


def fused_allreduce_gradients(parameter_list, hcg):
    """Average the gradients of `parameter_list` over the data-parallel group of `hcg` (the world
    when None), fused into buckets of 128 MB; parameters without a gradient are skipped."""
    what = "fused_allreduce_gradients()"
    group = _hcg_group(hcg, "get_data_parallel_group", what)
    if group is None or group.nranks <= 1:
        return
    allreduce_gradients_fused(parameter_list, group, dist.ReduceOp.AVG)


def allreduce_gradients_fused(parameter_list, group, op) -> None:
    """Replace the gradients of `parameter_list` (those it has) by their reduction `op` over `group`, in flat
    buckets of 128 MB whose all-reduces are all started before the first is waited for."""
    params = [p for p in parameter_list if getattr(p, "grad", None) is not None]
    tasks = []
    with oarlock.no_grad():
        for members in buckets.assign(params, [_FUSED_MB]):
            flat = buckets.flatten([params[i].grad for i in members])
            tasks.append((members, flat, dist.all_reduce(flat, op=op, group=group, sync_op=False)))
        for members, flat, task in tasks:
            task.wait()
            for i, piece in zip(members, buckets.unflatten(flat, [params[i] for i in members])):
                params[i].grad = piece.detach()
