"""ShardedWeight, Paddle's description of one rank's part of a distributed tensor, and helpers that
build sharded state dicts: shard a tensor along an axis over a group, or mark one replicated.

A plain Tensor in a state dict is the whole tensor (replicated on every rank
that holds it); a ShardedWeight says which box of a larger global tensor its
local tensor is. save_state_dict writes each box once; load_state_dict fills
whatever boxes the ranks hold now.
"""

from __future__ import annotations

import math

import numpy as np

import oarlock
from oarlock import Tensor

__all__ = ["ShardedWeight", "shard_weight", "shard_full_weight", "make_replicated_sharded_weight",
           "build_sharded_state_dict"]


def _int_tuple(value, what: str, argument: str) -> tuple:
    if isinstance(value, (int, np.integer)) or not hasattr(value, "__iter__"):
        raise TypeError(f"{what}: {argument} must be a tuple or list of ints, got {value!r}")
    out = tuple(value)
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 0 for v in out):
        raise ValueError(f"{what}: {argument} must hold non-negative ints, got {list(out)}")
    return tuple(int(v) for v in out)


class ShardedWeight:
    """One rank's shard of a global tensor: `local_tensor` (of shape `local_shape`) is the box of the
    tensor `key` (of shape `global_shape`) that starts at `global_offset`.

    is_flattened=True with flattened_range=slice(a, b) (Paddle's, for sharding's flat pieces): the box
    `local_shape` at `global_offset` is described whole, but `local_tensor` is 1-D and holds only the
    elements [a, b) of that box's row-major flattening (flat.py turns the range into n-d boxes)."""

    __slots__ = ("key", "local_tensor", "local_shape", "global_shape", "global_offset", "is_flattened",
                 "flattened_range")

    def __init__(self, key, local_tensor, local_shape, global_shape, global_offset, is_flattened=False,
                 flattened_range=None):
        what = "ShardedWeight()"
        if not isinstance(key, str) or not key:
            raise TypeError(f"{what}: key must be a non-empty str, got {key!r}")
        if not isinstance(local_tensor, Tensor):
            raise TypeError(f"{what}: local_tensor of {key!r} must be an oarlock Tensor, got "
                            f"{type(local_tensor).__name__}")
        local_shape = _int_tuple(local_shape, what, "local_shape")
        global_shape = _int_tuple(global_shape, what, "global_shape")
        global_offset = _int_tuple(global_offset, what, "global_offset")
        if not isinstance(is_flattened, bool):
            raise TypeError(f"{what}: is_flattened of {key!r} must be a bool, got {is_flattened!r}")
        if is_flattened:
            flattened_range = _check_flat(key, local_tensor, local_shape, flattened_range)
        elif flattened_range is not None:
            raise ValueError(f"{what}: {key!r} has flattened_range {flattened_range!r} but is_flattened=False; pass "
                             f"is_flattened=True for a flat range of the box, or no range")
        elif tuple(local_tensor.shape) != local_shape:
            raise ValueError(f"{what}: {key!r} has local_shape {list(local_shape)} but its local_tensor has shape "
                             f"{local_tensor.shape}")
        if not len(local_shape) == len(global_shape) == len(global_offset):
            raise ValueError(f"{what}: {key!r} has local_shape {list(local_shape)}, global_shape {list(global_shape)} "
                             f"and global_offset {list(global_offset)}; all three need one entry per axis")
        outside = [axis for axis, (o, n, g) in enumerate(zip(global_offset, local_shape, global_shape)) if o + n > g]
        if outside:
            raise ValueError(f"{what}: the shard of {key!r} at offset {list(global_offset)} with shape "
                             f"{list(local_shape)} runs past global_shape {list(global_shape)} on axis {outside[0]}")
        self.key, self.local_tensor = key, local_tensor
        self.local_shape, self.global_shape, self.global_offset = local_shape, global_shape, global_offset
        self.is_flattened, self.flattened_range = is_flattened, flattened_range

    def __repr__(self):
        flat = f", flattened_range={self.flattened_range}" if self.is_flattened else ""
        return (f"ShardedWeight(key={self.key!r}, local_shape={list(self.local_shape)}, global_shape="
                f"{list(self.global_shape)}, global_offset={list(self.global_offset)}{flat}, dtype="
                f"{self.local_tensor.dtype.name})")


def _check_flat(key: str, local_tensor, local_shape: tuple, flattened_range) -> slice:
    """flattened_range as slice(a, b) with 0 <= a <= b <= the box's element count, and a 1-D local
    tensor of b - a elements."""
    what = "ShardedWeight()"
    if flattened_range is None:
        raise ValueError(f"{what}: {key!r} has is_flattened=True but no flattened_range; pass slice(a, b), the "
                         f"elements of the flattened box that local_tensor holds")
    bounds = (flattened_range.start, flattened_range.stop) if isinstance(flattened_range, slice) else None
    if (bounds is None or flattened_range.step not in (None, 1)
            or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in bounds)):
        raise TypeError(f"{what}: flattened_range of {key!r} must be a slice(a, b) of ints (step 1), got "
                        f"{flattened_range!r}")
    start, stop, numel = int(bounds[0]), int(bounds[1]), math.prod(local_shape)
    if not 0 <= start <= stop <= numel:
        raise ValueError(f"{what}: flattened_range of {key!r} is [{start}, {stop}), which runs past the {numel} "
                         f"elements of its box (local_shape {list(local_shape)}); it must satisfy 0 <= a <= b <= "
                         f"{numel}")
    if len(local_tensor.shape) != 1 or local_tensor.shape[0] != stop - start:
        raise ValueError(f"{what}: {key!r} is flattened with range [{start}, {stop}), so its local_tensor must be "
                         f"1-D with {stop - start} elements, got shape {local_tensor.shape}")
    return slice(start, stop)


def _rank_and_size(group, what: str) -> tuple[int, int]:
    """(rank in group, group size); a single process without oarlock-xccl is rank 0 of 1."""
    if group is not None:
        return group.rank, group.nranks
    distributed = oarlock.distributed
    if not hasattr(distributed, "get_rank"):
        return 0, 1
    return distributed.get_rank(), distributed.get_world_size()


def _check_axis(axis, tensor, key: str, what: str) -> int:
    ndim = len(tensor.shape)
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool) or not -ndim <= axis < ndim:
        raise ValueError(f"{what}: axis for {key!r} must be an int in [{-ndim}, {ndim}) (the tensor has shape "
                         f"{tensor.shape}), got {axis!r}")
    return int(axis) % ndim


def shard_weight(key: str, weight, axis: int, group=None) -> ShardedWeight:
    """Paddle's shard_weight: `weight` is this rank's equal part of a tensor split along `axis` over
    `group` (the world when None), rank r holding part r."""
    what = "shard_weight()"
    axis = _check_axis(axis, weight, key, what)
    rank, size = _rank_and_size(group, what)
    local = tuple(weight.shape)
    global_shape = tuple(n * size if a == axis else n for a, n in enumerate(local))
    offset = tuple(rank * n if a == axis else 0 for a, n in enumerate(local))
    return ShardedWeight(key, weight, local, global_shape, offset)


def shard_full_weight(key: str, tensor, axis: int, group=None) -> ShardedWeight:
    """This rank's part of the whole tensor `tensor` split along `axis` over `group` (the world when
    None): rank r keeps rows [r*n/size, (r+1)*n/size) as numpy.array_split cuts them (sizes may
    differ by one). The local tensor is a copy."""
    what = "shard_full_weight()"
    if not isinstance(tensor, Tensor):
        raise TypeError(f"{what}: tensor for {key!r} must be an oarlock Tensor, got {type(tensor).__name__}")
    axis = _check_axis(axis, tensor, key, what)
    rank, size = _rank_and_size(group, what)
    n = tensor.shape[axis]
    start, stop = rank * n // size, (rank + 1) * n // size
    index = tuple(slice(start, stop) if a == axis else slice(None) for a in range(len(tensor.shape)))
    local = tensor[index].clone()
    offset = tuple(start if a == axis else 0 for a in range(len(tensor.shape)))
    return ShardedWeight(key, local, tuple(local.shape), tuple(tensor.shape), offset)


def make_replicated_sharded_weight(key: str, tensor) -> ShardedWeight:
    """`tensor` whole on every rank that holds it: saved once, loaded by each."""
    if not isinstance(tensor, Tensor):
        raise TypeError(f"make_replicated_sharded_weight(): tensor for {key!r} must be an oarlock Tensor, got "
                        f"{type(tensor).__name__}")
    shape = tuple(tensor.shape)
    return ShardedWeight(key, tensor, shape, shape, (0,) * len(shape))


def build_sharded_state_dict(state_dict, shard_rules=None, prefix: str = "", group=None) -> dict:
    """Paddle's build_sharded_state_dict: {prefix + key: ShardedWeight} where a tensor named in
    `shard_rules` ({key: axis}) is this rank's equal shard along that axis over `group` (shard_weight;
    Paddle uses the tensor-parallel group, oarlock the given group or the world) and every other
    tensor is replicated."""
    shard_rules = dict(shard_rules or {})
    unknown = sorted(set(shard_rules) - set(state_dict))
    if unknown:
        raise KeyError(f"build_sharded_state_dict(): shard_rules names {unknown}, which the state_dict does not have")
    out = {}
    for key, tensor in state_dict.items():
        full = f"{prefix}{key}"
        out[full] = (shard_weight(full, tensor, shard_rules[key], group) if key in shard_rules
                     else make_replicated_sharded_weight(full, tensor))
    return out
