"""`oarlock.distributed.sharding`: group_sharded_parallel and save_group_sharded_model (Paddle's
paddle/distributed/sharding/group_sharded.py).

Levels 'os' and 'os_g' both give stage 2 (GroupShardedOptimizerStage2 + GroupShardedStage2: optimizer state
and gradients partitioned), as in Paddle; 'p_g_os' gives stage 3 (oarlock_parallel.sharding_stage3:
parameters partitioned too). CPU tensors are allowed (Paddle asserts a GPU).
"""

from __future__ import annotations

import os

import numpy as np

import oarlock
import oarlock.distributed as dist
from oarlock.nn import Layer

from oarlock_parallel import sharding_common as common
from oarlock_parallel.sharding_stage2 import GroupShardedOptimizerStage2, GroupShardedStage2, check_buffer_size

LEVELS = ("os", "os_g", "p_g_os")


def _stage3_class():
    from oarlock_parallel.sharding_stage3 import GroupShardedStage3
    return GroupShardedStage3


def GroupShardedScaler(scaler, groups=()):
    """Paddle's GroupShardedScaler: `scaler` (an oarlock.amp.GradScaler / AmpScaler) whose inf/nan verdict is
    agreed over `groups`. Each rank unscales only the gradients it holds, so one rank may find an inf the
    others cannot see; the ranks must still all skip the step together (a rank stepping alone would wait
    forever in the owners' broadcast). As Paddle does, the scaler's own unscale is replaced by one that
    max-reduces the verdict after it."""
    unscale = scaler._unscale

    def agreed_unscale(optimizer):
        unscale(optimizer)
        if not scaler._enable:    # the same on every rank: nothing was checked, nothing to agree on
            return
        verdict = scaler._found_inf.astype("int32")
        for group in groups:
            if group is not None and group.nranks > 1:
                dist.all_reduce(verdict, op=dist.ReduceOp.MAX, group=group)
        scaler._found_inf = verdict.astype("bool")

    scaler._unscale = agreed_unscale
    return scaler


def group_sharded_parallel(model, optimizer, level, scaler=None, group=None, offload=False, sync_buffers=False,
                           buffer_max_size=2**23, segment_size=2**20, sync_comm=False, dp_group=None,
                           exclude_layer=None):
    """Wrap `model` and `optimizer` for sharded data parallelism over `group` (the world when None); each rank
    trains on its own batch. Returns (model, optimizer, scaler); a GradScaler comes back as a
    GroupShardedScaler (the ranks agree on skipping a step with an inf/nan gradient).
    level: 'os' or 'os_g' (stage 2), 'p_g_os' (stage 3). buffer_max_size: the largest gradient bucket of
    stage 2, in elements; segment_size, sync_comm, exclude_layer: stage 3's."""
    what = "group_sharded_parallel()"
    # every check before any collective, so a bad argument fails on every rank alike
    if not isinstance(model, Layer):
        raise TypeError(f"{what}: model must be an oarlock.nn.Layer, got {type(model).__name__}")
    common.check_optimizer(optimizer, what)
    if level not in LEVELS:
        raise ValueError(f"{what}: level must be one of {', '.join(repr(v) for v in LEVELS)} ('os' and 'os_g' are "
                         f"both stage 2, 'p_g_os' stage 3), got {level!r}")
    common.check_member(group, what, "group")
    common.check_member(dp_group, what, "dp_group")
    if scaler is not None and not isinstance(scaler, oarlock.amp.AmpScaler):
        raise TypeError(f"{what}: scaler must be an oarlock.amp.GradScaler or None, got {type(scaler).__name__}")
    if level in ("os", "os_g"):
        check_buffer_size(buffer_max_size, what)
        optimizer = GroupShardedOptimizerStage2(common.parameters_of(optimizer), optimizer, group=group,
                                                offload=offload, dp_group=dp_group)
        model = GroupShardedStage2(model, optimizer, group=group, sync_buffers=sync_buffers,
                                   buffer_max_size=buffer_max_size, dp_group=dp_group)
    else:
        model = _stage3_class()(model, optimizer, group=group, sync_buffers=sync_buffers, segment_size=segment_size,
                                offload=offload, sync_comm=sync_comm, dp_group=dp_group, exclude_layer=exclude_layer)
    if scaler is not None:
        scaler = GroupShardedScaler(scaler, (model._group, model._dp_group))
    return model, optimizer, scaler


def _stage3_state(model, optimizer) -> dict:
    """Stage 3's optimizer state with every partitioned parameter's whole: each rank's optimizer holds the
    state of its flat piece (under the parameter's name); the pieces are all-gathered over the stage's group
    in the optimizer's order (the same on every rank) and unpadded to the parameter's shape."""
    parts = {optimizer._keys[id(part.piece)]: part for part in model._partitions.values()}
    names = set(optimizer._keys.values())

    def whole(name, value):
        part = parts.get(name)
        if part is None or not isinstance(value, oarlock.Tensor) or list(value.shape) != list(part.piece.shape):
            return value     # an unsliced parameter's state, a step count: the same on every rank
        pieces: list = []
        dist.all_gather(pieces, value, group=part.group)
        return oarlock.concat(pieces)[:part.numel].reshape(part.shape)

    state = optimizer.state_dict()
    out = {key: whole(common.owner_key(key, names), value) for key, value in state.items()
           if key not in ("master_weights", "LR_Scheduler")}
    if "master_weights" in state:
        out["master_weights"] = {name: whole(name, value) for name, value in state["master_weights"].items()}
    if "LR_Scheduler" in state:
        out["LR_Scheduler"] = state["LR_Scheduler"]
    return out


def _gathered_state(optimizer) -> dict:
    """Every parameter's optimizer state: each rank's owned states, gathered over the sharding group (on every
    rank: oarlock.distributed has no object gather to one rank)."""
    mine = optimizer._optim.state_dict()
    group = optimizer._group
    if group is None or group.nranks <= 1:
        return mine
    host = {k: (v.numpy() if isinstance(v, oarlock.Tensor) else v) for k, v in mine.items()}
    everyone: list = []
    dist.all_gather_object(everyone, host, group=group)
    merged = {}
    for part in everyone:
        for key, value in part.items():
            if key == "master_weights":
                merged.setdefault(key, {}).update(value)
            else:
                merged[key] = value
    return {k: (oarlock.to_tensor(v) if isinstance(v, np.ndarray) else
                {n: oarlock.to_tensor(t) for n, t in v.items()} if k == "master_weights" else v)
            for k, v in merged.items()}


def _is_writer(group, dp_group) -> bool:
    """One rank writes: the first of the sharding group (and of its data-parallel group)."""
    return all(g is None or g.rank == 0 for g in (group, dp_group))


def save_group_sharded_model(model, output, optimizer=None):
    """Save a group_sharded_parallel model (and optimizer) into the directory `output`, with Paddle's file
    names: output/model.pdmodel holds the full model state_dict (stage 3 gathers the parameters first),
    output/model.pdopt the optimizer state of every parameter, whole: stage 2's gathered from the owners,
    stage 3's pieces gathered and unpadded (Paddle saves only stage 2's, and only this rank's). Every rank of
    the group calls it; one rank writes. Read them back with oarlock.load."""
    what = "save_group_sharded_model()"
    stage3 = _stage3_class()
    if not isinstance(output, (str, os.PathLike)):
        raise TypeError(f"{what}: output must be a directory path, got {type(output).__name__}")
    output = os.fspath(output)
    if os.path.isfile(output):
        raise ValueError(f"{what}: saving directory ({output}) should be a directory, not a file")
    if isinstance(model, GroupShardedStage2):
        group, dp_group = model._group, model._dp_group
    elif isinstance(model, stage3):
        group, dp_group = model._group, model._dp_group
    else:
        raise ValueError(f"{what}: model must be the layer group_sharded_parallel returned, got "
                         f"{type(model).__name__}")
    expected = GroupShardedOptimizerStage2 if isinstance(model, GroupShardedStage2) else type(model._optim)
    if optimizer is not None and (not isinstance(optimizer, expected) or
                                  (isinstance(model, stage3) and optimizer is not model._optim)):
        raise ValueError(f"{what}: optimizer must be the optimizer group_sharded_parallel returned with this model, "
                         f"got {type(optimizer).__name__}")
    # collectives, on every rank: the full weights of stage 3, the optimizer states from their holders
    if isinstance(model, stage3):
        model.get_all_parameters(convert2cpu=bool(getattr(model, "_offload", False)))
        state = _stage3_state(model, optimizer) if optimizer is not None else None
    else:
        state = _gathered_state(optimizer) if optimizer is not None else None
    if _is_writer(group, dp_group):
        os.makedirs(output, exist_ok=True)
        oarlock.save(model._layer.state_dict(), os.path.join(output, "model.pdmodel"))
        if state is not None:
            oarlock.save(state, os.path.join(output, "model.pdopt"))


__all__ = ["group_sharded_parallel", "save_group_sharded_model"]   # Paddle's oarlock.distributed.sharding
