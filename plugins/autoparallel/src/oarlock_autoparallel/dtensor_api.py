"""The distributed-tensor API (Paddle's paddle.distributed auto-parallel data API): shard_tensor,
dtensor_from_fn, dtensor_from_local, dtensor_to_local, unshard_dtensor, reshard, and `register(api)`, which
exports them with ProcessMesh and the placements into oarlock.distributed and Paddle's module paths
(oarlock.distributed.auto_parallel.api / .process_mesh / .placement_type), and gives every Tensor
placements, process_mesh and _local_value() (None / False / itself for a plain tensor)."""

from __future__ import annotations

import oarlock
import oarlock.distributed as dist
from oarlock import Tensor

from oarlock_autoparallel.dtensor import DistTensor
from oarlock_autoparallel.mesh import ProcessMesh
from oarlock_autoparallel.placements import (Partial, Placement, ReduceType, Replicate, Shard, check_placements)
from oarlock_autoparallel.reshard import empty_local, reshard
from oarlock_autoparallel.reshard_local import cut, region, reshard_local


def _check_mesh(mesh, what: str):
    if not isinstance(mesh, ProcessMesh):
        raise TypeError(f"{what}: argument 'mesh' must be a ProcessMesh, got {type(mesh).__name__}")


def _copy_parameter(source: Tensor, target: Tensor) -> None:
    """Make target a Parameter like source (parameter attributes, name, persistable, user attributes)."""
    if source.param_attrs is None:
        return
    target.param_attrs = source.param_attrs
    target.persistable = source.persistable
    target.name = source.name
    for key, value in getattr(source, "__dict__", {}).items():
        setattr(target, key, value)


def _piece_of(full: Tensor, mesh, placements, rank: int) -> Tensor:
    """This rank's piece of the whole tensor `full` (Partial: the mesh index 0 keeps the value)."""
    coord = mesh.coordinate(rank)
    if coord is None:
        return empty_local(full.dtype)
    piece = full.detach()
    for dim, (lo, hi) in enumerate(region(mesh, placements, full.shape, coord)):
        if (lo, hi) != (0, full.shape[dim]):
            piece = cut(piece, dim, lo, hi)
    if piece._data is full._data:   # nothing was cut: the piece must not share the caller's storage
        piece = piece.clone()
    replicated = [Replicate() if isinstance(p, Partial) else p for p in placements]
    return reshard_local(piece, mesh, replicated, placements, full.shape, rank)


def shard_tensor(data, mesh, placements, dtype=None, place=None, stop_gradient=None):
    """A distributed tensor laid out on `mesh` by `placements`, from a Tensor (a Parameter stays one), a
    numpy array, a list or a number; it is a new leaf with the data's stop_gradient."""
    what = "shard_tensor()"
    _check_mesh(mesh, what)
    if isinstance(data, DistTensor):
        return reshard(data, mesh, placements)
    if isinstance(data, Tensor) and dtype is None:
        tensor = data
    else:
        tensor = oarlock.to_tensor(data, dtype=dtype, place=place,
                                   stop_gradient=True if stop_gradient is None else stop_gradient)
    placements = check_placements(placements, mesh, tensor.ndim, what)
    local = _piece_of(tensor, mesh, placements, dist.get_rank())
    local.stop_gradient = tensor.stop_gradient if stop_gradient is None or isinstance(data, Tensor) \
        else stop_gradient
    result = DistTensor.make(local, mesh, placements, tensor.shape)
    _copy_parameter(tensor, result)
    return result


def dtensor_from_fn(fn, mesh, placements, *args, **kwargs):
    """shard_tensor(fn(*args, **kwargs), mesh, placements)."""
    return shard_tensor(fn(*args, **kwargs), mesh, placements)


def dtensor_from_local(local_tensor, mesh, placements, shape=None):
    """A distributed tensor whose piece on this rank is `local_tensor` (kept, with its autograd history);
    the global shape is the local one times the mesh size on each sharded dimension (Paddle's rule, which
    assumes even pieces), or `shape` (an oarlock extension, as torch's DTensor.from_local: uneven pieces).
    With Partial the tensor is the reduction of the ranks' pieces."""
    what = "dtensor_from_local()"
    if isinstance(local_tensor, DistTensor) or not isinstance(local_tensor, Tensor):
        raise ValueError(f"{what}: argument 'local_tensor' must be a local (not distributed) Tensor, got "
                         f"{type(local_tensor).__name__}")
    _check_mesh(mesh, what)
    placements = check_placements(placements, mesh, local_tensor.ndim, what)
    if shape is None:
        shape = local_tensor.shape
        for axis, p in enumerate(placements):
            if isinstance(p, Shard):
                shape[p.dim] *= mesh.shape[axis]
    elif not isinstance(shape, (list, tuple)) or len(shape) != local_tensor.ndim:
        raise ValueError(f"{what}: argument 'shape' must be a list of {local_tensor.ndim} sizes, got {shape!r}")
    return DistTensor.make(local_tensor, mesh, placements, list(shape))


def dtensor_to_local(dist_tensor, mesh=None, placements=None):
    """This rank's piece of `dist_tensor` (differentiable: gradients reach the distributed tensor)."""
    if not isinstance(dist_tensor, DistTensor):
        raise ValueError(f"dtensor_to_local(): argument 'dist_tensor' must be a distributed tensor, got "
                         f"{type(dist_tensor).__name__}")
    return dist_tensor._local


def unshard_dtensor(dist_tensor):
    """The whole tensor, on every rank of the mesh (a plain Tensor; a Parameter stays one)."""
    if not isinstance(dist_tensor, DistTensor):
        raise ValueError(f"unshard_dtensor(): argument 'dist_tensor' must be a distributed tensor, got "
                         f"{type(dist_tensor).__name__}")
    whole = reshard(dist_tensor, dist_tensor._mesh, [Replicate()] * dist_tensor._mesh.ndim)._local
    _copy_parameter(dist_tensor, whole)
    return whole


def _plain_local_value(self):
    """Tensor._local_value() of a plain (not distributed) tensor: None, as Paddle 3.2 answers."""
    return None


API = {"ProcessMesh": ProcessMesh, "Placement": Placement, "Shard": Shard, "Replicate": Replicate,
       "Partial": Partial, "ReduceType": ReduceType, "shard_tensor": shard_tensor, "dtensor_from_fn": dtensor_from_fn,
       "dtensor_from_local": dtensor_from_local, "dtensor_to_local": dtensor_to_local,
       "unshard_dtensor": unshard_dtensor, "reshard": reshard}
# Paddle's module layout under paddle.distributed.auto_parallel
PATHS = {"oarlock.distributed.auto_parallel": list(API),
         "oarlock.distributed.auto_parallel.api": ["shard_tensor", "dtensor_from_fn", "dtensor_from_local",
                                                   "dtensor_to_local", "unshard_dtensor", "reshard"],
         "oarlock.distributed.auto_parallel.process_mesh": ["ProcessMesh"],
         "oarlock.distributed.auto_parallel.placement_type": ["Placement", "Shard", "Replicate", "Partial"]}


def register(api) -> None:
    for name, obj in API.items():
        api.export("oarlock.distributed", name, obj)
    for namespace, names in PATHS.items():
        for name in names:
            api.export(namespace, name, API[name])
    # plain tensors answer the distributed queries too (is_dist() comes from oarlock-compat, False);
    # DistTensor's own definitions override these
    api.export("Tensor", "placements", property(lambda self: None, doc="None: a plain tensor is not distributed"))
    api.export("Tensor", "process_mesh", property(lambda self: None, doc="None: a plain tensor is not distributed"))
    api.export("Tensor", "_local_value", _plain_local_value)
