"""Collectives on picklable Python objects: all_gather_object, broadcast_object_list and
scatter_object_list. Objects are pickled into uint8 CPU tensors and moved by the tensor
collectives (sizes first, then the padded bytes), so any backend serving the CPU carries them.
Unpickling runs code: exchange objects only with ranks you trust, as with pickle anywhere."""

from __future__ import annotations

import pickle

import numpy as np

import oarlock
from oarlock_xccl import collectives, groups


def _to_bytes(obj) -> np.ndarray:
    return np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), dtype=np.uint8)


def _tensor(array: np.ndarray):
    return oarlock.to_tensor(array, place="cpu")


def _from_bytes(tensor, size: int):
    return pickle.loads(tensor.numpy()[:size].tobytes())


def all_gather_object(object_list, obj, group=None) -> None:
    """Fill `object_list` (cleared first) with `obj` from every rank of the group, in rank order."""
    if not isinstance(object_list, list):
        raise TypeError(f"all_gather_object(): object_list must be a list, got {type(object_list).__name__}")
    group = groups.resolve(group, "all_gather_object")
    if not group.is_member():
        return None
    payload = _to_bytes(obj)
    sizes = []
    collectives.all_gather(sizes, _tensor(np.array(payload.size, dtype=np.int64)), group)
    sizes = [int(s.item()) for s in sizes]
    padded = np.zeros(max(sizes), dtype=np.uint8)
    padded[:payload.size] = payload
    pieces = []
    collectives.all_gather(pieces, _tensor(padded), group)
    object_list[:] = [_from_bytes(piece, size) for piece, size in zip(pieces, sizes)]
    return None


def broadcast_object_list(object_list, src, group=None) -> None:
    """Replace the contents of `object_list` on every rank with those of global rank `src`."""
    if not isinstance(object_list, list):
        raise TypeError(f"broadcast_object_list(): object_list must be a list, got {type(object_list).__name__}")
    group = groups.resolve(group, "broadcast_object_list")
    if not group.is_member():
        return None
    is_src = group.rank == group.get_group_rank(src)
    payload = _to_bytes(list(object_list)) if is_src else np.zeros(0, dtype=np.uint8)
    size = _tensor(np.array(payload.size, dtype=np.int64))
    collectives.broadcast(size, src, group)
    data = _tensor(payload if is_src else np.zeros(int(size.item()), dtype=np.uint8))
    collectives.broadcast(data, src, group)
    if not is_src:
        object_list[:] = _from_bytes(data, int(size.item()))
    return None


def scatter_object_list(out_object_list, in_object_list=None, src=0, group=None) -> None:
    """Global rank `src` sends in_object_list[i] to group rank i, which finds it in out_object_list[0]."""
    if not isinstance(out_object_list, list):
        raise TypeError(f"scatter_object_list(): out_object_list must be a list, got "
                        f"{type(out_object_list).__name__}")
    group = groups.resolve(group, "scatter_object_list")
    if not group.is_member():
        return None
    everything = [None] * group.nranks
    if group.rank == group.get_group_rank(src):
        if not isinstance(in_object_list, list) or len(in_object_list) != group.nranks:
            raise ValueError(f"scatter_object_list(): in_object_list on the source rank {src} must be a list of "
                             f"{group.nranks} objects (one per rank), got {in_object_list!r}")
        everything = list(in_object_list)
    broadcast_object_list(everything, src, group)
    out_object_list[:] = [everything[group.rank]]
    return None


__all__ = ["all_gather_object", "broadcast_object_list", "scatter_object_list"]
