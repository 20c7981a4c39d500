"""A state dict as the checkpoint sees it: nested dicts flattened to "a.b" keys (as Paddle does),
each tensor as a LocalShard (its box of the global tensor), and plain Python values (an optimizer's
step counts, an LR scheduler's state) as JSON objects the metadata carries."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from oarlock import Tensor
from oarlock_checkpoint.flex.boxes import box_of
from oarlock_checkpoint.flex.sharded import ShardedWeight


class LocalShard(NamedTuple):
    key: str
    tensor: Tensor
    box: tuple            # this rank's box of the global tensor
    global_shape: tuple
    dtype: str            # oarlock dtype name


def flatten(state_dict, where: str) -> tuple[dict, dict]:
    """({key: LocalShard}, {key: JSON value}) of a (possibly nested) state dict."""
    if not isinstance(state_dict, Mapping):
        raise TypeError(f"{where}: state_dict must be a dict of str -> Tensor / ShardedWeight (nested dicts "
                        f"allowed), got {type(state_dict).__name__}")
    shards, objects = {}, {}

    def visit(prefix: str, mapping):
        for name, value in mapping.items():
            if not isinstance(name, str):
                raise TypeError(f"{where}: every key must be a str, got {name!r} under {prefix or 'the top level'!r}")
            key = f"{prefix}.{name}" if prefix else name
            if isinstance(value, Mapping):
                visit(key, value)
                continue
            if isinstance(value, ShardedWeight):
                tensor, shard = value.local_tensor, box_of(value.global_offset, value.local_shape)
                global_shape, key = value.global_shape, value.key
            elif isinstance(value, Tensor):
                tensor, shard, global_shape = value, box_of((0,) * value.ndim, value.shape), tuple(value.shape)
            else:
                objects[key] = _json_value(value, key, where)
                continue
            if key in shards or key in objects:
                raise ValueError(f"{where}: the key {key!r} appears twice in the flattened state_dict (nested dicts "
                                 f"join keys with '.', and a ShardedWeight is stored under its own .key)")
            shards[key] = LocalShard(key, tensor, shard, tuple(global_shape), tensor.dtype.name)

    visit("", state_dict)
    return shards, objects


def _json_value(value, key: str, where: str):
    if isinstance(value, np.generic):
        value = value.item()
    try:
        json.dumps(value, allow_nan=True)
    except (TypeError, ValueError):
        raise TypeError(f"{where}: the value for {key!r} is a {type(value).__name__}; a checkpoint holds Tensors, "
                        f"ShardedWeights and plain values (numbers, strings, bools, None, lists and dicts of "
                        f"them)") from None
    return value


def put_objects(state_dict, objects: dict) -> None:
    """Write loaded plain values back under their (flattened) keys."""
    for key, value in objects.items():
        target, parts = state_dict, key.split(".")
        for i in range(len(parts) - 1):   # follow nested dicts as far as they go; the rest is one key
            head = parts[i]
            if isinstance(target.get(head), Mapping):
                target = target[head]
            else:
                target[".".join(parts[i:])] = value
                break
        else:
            target[parts[-1]] = value
