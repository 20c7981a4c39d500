"""Optimizer.sharded_state_dict: the optimizer's state as FlexCheckpoint ShardedWeights (Paddle 3.2's
AdamW.sharded_state_dict), so that it is saved and loaded under any parallel layout with the model.

Each parameter's state is placed by the model's own ShardedWeight for that parameter (matched by
identity, then by name): a state tensor of the parameter's shape (a moment) is sharded exactly like it,
"<model key>.<state name>_0" (Paddle's "linear.weight.moment1_0"); a float32 master weight of
multi_precision is "<model key>.w_0", sharded the same way; other state tensors are replicated.
When the model's shard is flattened (a flat range [a, b) of the parameter's box, as sharding stage 3
keeps a parameter as a flat, zero-padded piece), a state tensor of the parameter's shape is given as
the same flat range: its first b - a elements (the piece's unpadded part), a view, so loads are in place.

The step count, a Python int in oarlock's optimizers (Paddle keeps beta1^t / beta2^t tensors instead), is
"<model key>.step", a replicated int64 tensor of shape [1], kept on the host. Loading is in place, so
the optimizer keeps that tensor linked to the parameter's state: at its next step(), state_dict() or
sharded_state_dict() a value that a load wrote into it becomes the step count, and the tensor is
refreshed to the step count otherwise (so a sharded state dict kept across steps saves the current one).

A parameter without state yet (a fresh optimizer about to load a checkpoint) gets a zero state first, as
its first step() would make it, so that there is something to load into. The learning-rate scheduler's
state is left out, as in Paddle (save it separately).

oarlock-nn does not depend on oarlock-checkpoint: ShardedWeight comes from oarlock.distributed when the
checkpoint plugin is installed.
"""

from __future__ import annotations

import oarlock
from oarlock.plugin_api import array_of, wrap


def _sharded_weight_class(owner: str):
    cls = getattr(oarlock.distributed, "ShardedWeight", None) if hasattr(oarlock, "distributed") else None
    if cls is None:
        raise RuntimeError(f"{owner}.sharded_state_dict(): needs FlexCheckpoint (oarlock.distributed.ShardedWeight); "
                           f"install oarlock-checkpoint")
    return cls


def _address(tensor):
    """Where the tensor's values start in memory (numpy or CUDA arrays), None when unknown."""
    array = array_of(tensor)
    interface = getattr(array, "__array_interface__", None) or getattr(array, "__cuda_array_interface__", None)
    return interface["data"][0] if interface else None


def _model_keys(owner: str, model_sharded_state_dict, sharded_weight) -> tuple[dict, dict, dict]:
    """({id(tensor): model key}, {tensor name: model key}, {address: model key}) of the model's sharded
    state dict; the addresses are those of flattened shards, whose local tensor may be a view of a
    padded piece's leading elements rather than the piece (the parameter) itself."""
    if not isinstance(model_sharded_state_dict, dict):
        raise TypeError(f"{owner}.sharded_state_dict(): model_sharded_state_dict must be the dict "
                        f"model.sharded_state_dict() returns, got {type(model_sharded_state_dict).__name__}")
    by_id, by_name, by_address = {}, {}, {}
    for key, weight in model_sharded_state_dict.items():
        if not isinstance(weight, sharded_weight):
            raise TypeError(f"{owner}.sharded_state_dict(): model_sharded_state_dict[{key!r}] must be a ShardedWeight, "
                            f"got {type(weight).__name__} (pass model.sharded_state_dict())")
        by_id[id(weight.local_tensor)] = key
        if weight.local_tensor.name:
            by_name[weight.local_tensor.name] = key
        if getattr(weight, "is_flattened", False) and _address(weight.local_tensor) is not None:
            by_address[_address(weight.local_tensor)] = key
    return by_id, by_name, by_address


def ensure_state(optimizer, param, group) -> dict:
    """The parameter's state, made as its first step() would make it when it has none."""
    state = optimizer._state.get(id(param))
    if state is None:
        master = optimizer._master_of(param) if optimizer._multi_precision else None
        state = optimizer._state[id(param)] = {"step": 0,
                                               **optimizer._new_state(param if master is None else master, group)}
    return state


def sync_step_links(optimizer, adopt: bool = True) -> None:
    """Adopt step counts that a load wrote into the linked step tensors (`adopt`; not after a step, which
    writes none); refresh the others. The tensors are host int64 [1] (_step_tensor): read and written in
    place through their arrays, as this runs around every step once a sharded state dict was taken."""
    for pid, link in optimizer._step_links.items():
        state = optimizer._state.get(pid)
        if state is None:
            continue
        array, recorded = array_of(link[0]), link[1]
        if adopt and int(array[0]) != recorded:     # written by a load since the last sync
            state["step"] = int(array[0])
        elif state["step"] != recorded:             # stepped on since: the tensor follows
            array[0] = state["step"]
        link[1] = state["step"]


def _step_tensor(optimizer, param, state):
    link = optimizer._step_links.get(id(param))
    if link is None:
        # on the host whatever the device: step() reads it back, which must not wait for a device
        tensor = oarlock.to_tensor([state["step"]], dtype="int64", place=oarlock.CPUPlace())
        link = optimizer._step_links[id(param)] = [tensor, state["step"]]
    return link[0]


def sharded_state_dict(optimizer, model_sharded_state_dict) -> dict:
    """{key: ShardedWeight} of `optimizer`'s state, placed by `model_sharded_state_dict` (see the module
    docstring). Every trainable parameter of the optimizer must be in the model's sharded state dict."""
    owner = optimizer._owner
    sharded_weight = _sharded_weight_class(owner)
    by_id, by_name, by_address = _model_keys(owner, model_sharded_state_dict, sharded_weight)
    sync_step_links(optimizer)
    out = {}
    for group in optimizer._param_groups:
        for param in group["params"]:
            if param.stop_gradient:
                continue
            key = by_id.get(id(param)) or (by_name.get(param.name) if param.name else None) or \
                by_address.get(_address(param) or -1)
            if key is None:
                raise KeyError(f"{owner}.sharded_state_dict(): the parameter {optimizer._keys[id(param)]!r} (shape "
                               f"{param.shape}) is not in model_sharded_state_dict; pass the sharded state dict of "
                               f"the model this optimizer updates")
            placed = model_sharded_state_dict[key]
            state = ensure_state(optimizer, param, group)
            for name, value in state.items():
                if name == "step":
                    out[f"{key}.step"] = sharded_weight(f"{key}.step", _step_tensor(optimizer, param, state), (1,),
                                                        (1,), (0,))
                else:
                    out[f"{key}.{name}_0"] = _placed_like(sharded_weight, f"{key}.{name}_0", value, param, placed)
            master = optimizer._master_weights.get(id(param))
            if master is not None:
                out[f"{key}.w_0"] = _placed_like(sharded_weight, f"{key}.w_0", master, param, placed)
    return out


def _placed_like(sharded_weight, key: str, tensor, param, placed):
    """`tensor` as the same box of its global tensor as the parameter's shard `placed` when it has the
    parameter's shape (a moment, a master weight), or the same flat range when `placed` is flattened;
    replicated otherwise."""
    if getattr(placed, "is_flattened", False) and tuple(tensor.shape) == tuple(param.shape):
        count = placed.flattened_range.stop - placed.flattened_range.start
        local = tensor if tensor.size == count else wrap(array_of(tensor).reshape(-1)[:count], tensor.place)
        return sharded_weight(key, local, placed.local_shape, placed.global_shape, placed.global_offset,
                              is_flattened=True, flattened_range=placed.flattened_range)
    if tuple(tensor.shape) == tuple(placed.local_shape):
        return sharded_weight(key, tensor, placed.local_shape, placed.global_shape, placed.global_offset)
    shape = tuple(tensor.shape)
    return sharded_weight(key, tensor, shape, shape, (0,) * len(shape))
