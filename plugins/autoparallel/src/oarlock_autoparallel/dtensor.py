"""DistTensor: a distributed tensor (Paddle's dist tensor: a Tensor whose is_dist() is True).

It is an oarlock.Tensor subclass holding this rank's piece `_local` (a plain Tensor: autograd records on it),
the ProcessMesh `_mesh`, one placement per mesh dimension `_placements` and the global shape `_global_shape`.
The storage and autograd slots of the base class (`_data`, `_place`, `_dtype`, `stop_gradient`, `_node`,
`_grad`, ...) are properties forwarding to the local piece, so optimizers, `.numpy()`, `.grad` and backward()
see this rank's piece; `shape` / `ndim` / `size` are the global ones. Parameter attributes (`param_attrs`,
`name`, `persistable`) stay on the DistTensor itself: a DistTensor made from a Parameter is a Parameter
(oarlock.nn.Parameter is a marked Tensor, not a class, so no subclass relationship is needed).

Ops called on a DistTensor reach `__oarlock_dispatch__` (the core's subclass hook), which hands them to the
SPMD rules of spmd.py. A rank outside the mesh holds an empty local piece (shape [0]) and
`_is_initialized()` is False there: Paddle's local value there is uninitialised (no storage; its metadata
keeps the global dims, which a real array cannot do without storage).
"""

from __future__ import annotations

import math

import oarlock
from oarlock import Tensor


def _forward(slot: str):
    """A property reading and writing `slot` of the local piece."""
    def get(self):
        return getattr(self._local, slot)

    def set(self, value):
        setattr(self._local, slot, value)

    def delete(self):
        delattr(self._local, slot)
    return property(get, set, delete, doc=f"`{slot}` of this rank's local piece.")


class DistTensor(Tensor):
    """A tensor distributed over a ProcessMesh; build one with DistTensor.make or shard_tensor."""

    __slots__ = ("_local", "_mesh", "_placements", "_global_shape")

    for _slot in ("_data", "_place", "_dtype", "stop_gradient", "_node", "_oidx", "_vc", "_view", "_grad",
                  "_hooks"):
        locals()[_slot] = _forward(_slot)
    del _slot

    def __init__(self, *args, **kwargs):
        raise TypeError("DistTensor(): build distributed tensors with oarlock.distributed.shard_tensor, "
                        "dtensor_from_local or DistTensor.make")

    @classmethod
    def make(cls, local: Tensor, mesh, placements, global_shape) -> DistTensor:
        """A DistTensor over `local` (this rank's piece, kept as is: no copy, its autograd history kept)."""
        if local.__class__ is not Tensor:
            raise TypeError(f"DistTensor.make(): local must be a plain oarlock.Tensor, got {type(local).__name__}")
        t = object.__new__(cls)
        t._local, t._mesh, t._placements, t._global_shape = local, mesh, list(placements), list(global_shape)
        return t

    @classmethod
    def __oarlock_dispatch__(cls, op, args, attrs):
        from oarlock_autoparallel import spmd
        return spmd.dispatch(op, args, attrs)

    @classmethod
    def __oarlock_like__(cls, x, build, random):
        """zeros_like / full_like / randn_like ... of a distributed tensor (oarlock-ops' hook): a DistTensor
        on x's mesh with x's placements, Partial read as Replicate (every rank holds the fill, as Paddle).
        A fill is built at the local piece's size; random draws are drawn whole and cut, so replicas agree
        and the values equal one process's for the same seed."""
        from oarlock_autoparallel.reshard import gradient_placements
        from oarlock_autoparallel.reshard_local import region
        placements = gradient_placements(x._placements)
        coord = x._mesh.coordinate(_rank())
        if coord is None:
            local = build([0])
        else:
            bounds = region(x._mesh, placements, x._global_shape, coord)
            if random:
                whole = build(x._global_shape)
                local = whole[tuple(slice(lo, hi) for lo, hi in bounds)].detach().clone() if bounds else whole
                local.stop_gradient = whole.stop_gradient
            else:
                local = build([hi - lo for lo, hi in bounds])
        return cls.make(local, x._mesh, placements, x._global_shape)

    # -- the distributed view ------------------------------------------------------------------------
    @property
    def shape(self) -> list:
        return list(self._global_shape)

    @property
    def ndim(self) -> int:
        return len(self._global_shape)

    def dim(self) -> int:
        return len(self._global_shape)

    @property
    def size(self) -> int:
        return math.prod(self._global_shape)

    def numel(self):
        return oarlock.to_tensor(math.prod(self._global_shape), dtype="int64")

    def __len__(self):
        if not self._global_shape:
            raise TypeError("len() of a 0-d tensor")
        return self._global_shape[0]

    @property
    def placements(self) -> list:
        return list(self._placements)

    @property
    def process_mesh(self):
        return self._mesh

    def is_dist(self) -> bool:
        return True

    def _local_value(self) -> Tensor:
        """This rank's piece (a plain Tensor sharing storage and autograd history with this tensor)."""
        return self._local

    @property
    def _local_shape(self) -> list:
        return self._local.shape

    def _is_initialized(self) -> bool:
        return self._mesh.contains(_rank())

    def backward(self, grad_tensor=None, retain_graph=False):
        """Tensor.backward; on a rank outside the mesh (an empty piece) the backward still runs, seeded with an
        empty gradient, so a cross-mesh reshard on the way (a pipeline stage's output) gets its gradient."""
        if isinstance(grad_tensor, DistTensor):
            grad_tensor = grad_tensor._local
        if not self._mesh.contains(_rank()):
            if self._local.stop_gradient:      # nothing here needs a gradient (no chain to a cross-mesh move)
                return None
            if grad_tensor is None:
                grad_tensor = oarlock.zeros(self._local.shape, dtype=self._local.dtype)
        return self._local.backward(grad_tensor, retain_graph)

    def detach(self):
        return DistTensor.make(self._local.detach(), self._mesh, self._placements, self._global_shape)

    def clone(self):
        return DistTensor.make(self._local.clone(), self._mesh, self._placements, self._global_shape)

    def __repr__(self):
        return (f"DistTensor(shape={self.shape}, dtype={self._dtype.name}, place={self._place!r}, "
                f"stop_gradient={self.stop_gradient}, process_mesh={self._mesh}, placements={self._placements},\n"
                f"       local {self._local!r})")

    __str__ = __repr__


def _rank() -> int:
    import oarlock.distributed as dist
    return dist.get_rank()
