"""A state dict as the checkpoint sees it: nested dicts flattened to "a.b" keys (as Paddle does),
each tensor as a LocalShard (its box of the global tensor), and plain Python values (an optimizer's
step counts, an LR scheduler's state) as JSON objects the metadata carries.

A flattened ShardedWeight becomes one LocalShard per n-d box its range covers (flat.py), each
naming the run of the 1-D local tensor it is; shards are keyed by their name, the tensor key for
a single box, "key@i" for the i-th box of a flat range that needs several."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from oarlock import Tensor
from oarlock_checkpoint.flex.boxes import box_of
from oarlock_checkpoint.flex.flat import flat_pieces
from oarlock_checkpoint.flex.sharded import ShardedWeight


class LocalShard(NamedTuple):
    key: str
    tensor: Tensor
    box: tuple            # this rank's box of the global tensor
    global_shape: tuple
    dtype: str            # oarlock dtype name
    name: str             # the shard's name in this rank's data file (unique on the rank)
    span: tuple | None    # (first, end) elements of the 1-D tensor that the box is; None: the whole tensor

    def values(self, array):
        """The box's values out of `array`, the tensor's own values (a view: a flat span reshaped)."""
        if self.span is None:
            return array
        first, end = self.span
        return array.reshape(-1)[first:end].reshape([hi - lo for lo, hi in self.box])


def flatten(state_dict, where: str) -> tuple[dict, dict]:
    """({name: LocalShard}, {key: JSON value}) of a (possibly nested) state dict."""
    if not isinstance(state_dict, Mapping):
        raise TypeError(f"{where}: state_dict must be a dict of str -> Tensor / ShardedWeight (nested dicts "
                        f"allowed), got {type(state_dict).__name__}")
    shards, objects, keys = {}, {}, set()

    def visit(prefix: str, mapping):
        for name, value in mapping.items():
            if not isinstance(name, str):
                raise TypeError(f"{where}: every key must be a str, got {name!r} under {prefix or 'the top level'!r}")
            key = f"{prefix}.{name}" if prefix else name
            if isinstance(value, Mapping):
                visit(key, value)
                continue
            if isinstance(value, ShardedWeight):
                tensor, global_shape, key = value.local_tensor, value.global_shape, value.key
                pieces = _pieces(value)
            elif isinstance(value, Tensor):
                tensor, global_shape = value, tuple(value.shape)
                pieces = [(box_of((0,) * value.ndim, value.shape), None)]
            else:
                objects[key] = _json_value(value, key, where)
                continue
            if key in keys or key in objects:
                raise ValueError(f"{where}: the key {key!r} appears twice in the flattened state_dict (nested dicts "
                                 f"join keys with '.', and a ShardedWeight is stored under its own .key)")
            keys.add(key)
            for i, (box, span) in enumerate(pieces):
                name = key if len(pieces) == 1 else f"{key}@{i}"
                if name in shards:
                    raise ValueError(f"{where}: the shard name {name!r} is taken twice (the boxes of a flattened "
                                     f"key are named key@0, key@1, ...); rename the key that clashes")
                shards[name] = LocalShard(key, tensor, box, tuple(global_shape), tensor.dtype.name, name, span)

    visit("", state_dict)
    return shards, objects


def _pieces(weight: ShardedWeight) -> list:
    """[(box of the global tensor, span of the local tensor or None)] that the ShardedWeight holds."""
    if not weight.is_flattened:
        return [(box_of(weight.global_offset, weight.local_shape), None)]
    return flat_pieces(weight.local_shape, weight.global_offset, weight.flattened_range.start,
                       weight.flattened_range.stop)


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
