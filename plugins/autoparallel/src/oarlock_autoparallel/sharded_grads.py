"""Gradients kept sharded (ShardingStage2 / ZeRO stage 2): each rank reduces and keeps only its shard of a
parameter's gradient over the sharding mesh dim.

A parameter replicated on the sharding (data-parallel) mesh dim normally has its gradient summed there by the
forward's gradient sync (spmd._sync_gradients: an all-reduce in backward). For a parameter registered here that
sum is skipped (spmd.deferred_sum_dims), so after backward each rank's local gradient is its share of the
batch; a callback queued for the end of the backward then reduce-scatters it (Partial -> Shard on that mesh
dim, reshard's P -> S) and leaves as the parameter's .grad a DistTensor holding only this rank's shard, laid
out like the optimizer states of ShardingStage1 (so the update runs on the shard with no further traffic and
the parameter is all-gathered back, see spmd.py's in-place ops).

Gradient accumulation: a shard already there when the next backward reaches the parameter is set aside
(the parameter's gradient hook) and added to the next shard."""

from __future__ import annotations

import weakref

import oarlock
from oarlock.autograd import queue_callback

from oarlock_autoparallel.dtensor import DistTensor
from oarlock_autoparallel.placements import Partial

# id(local piece) -> (a weak reference to the piece, mesh dims whose gradient sum is deferred): weak, so a model
# dropped with its optimizer is freed; the reference also tells a reused id from the registered piece
_DEFERRED: dict[int, tuple] = {}


def defer_gradient_sum(local, dims: set) -> None:
    """The gradient of `local` (a parameter's piece) is summed over mesh `dims` later, not by the ops' gradient
    sync: by ShardedGradients' reduce-scatter (stage 2) or by the backward of its gather (stage 3)."""
    _DEFERRED[id(local)] = (weakref.ref(local), set(dims))


def deferred_sum_dims(local) -> set:
    """The mesh dims over which the gradient of `local` (a parameter's piece) is summed later, not in backward."""
    entry = _DEFERRED.get(id(local))
    return entry[1] if entry is not None and entry[0]() is local else set()


class ShardedGradients:
    """Keeps the gradients of `params` as shards over mesh dim `axis` (placements from `placements_of(param)`)."""

    def __init__(self, params, axis_of, placements_of):
        self._params, self._pending, self._queued = [], {}, False
        for p in params:
            if not isinstance(p, DistTensor) or p.stop_gradient:
                continue
            axis, target = axis_of(p), placements_of(p)
            if not p.placements[axis].is_replicated() or target[axis].is_replicated():
                continue      # already split on that dim (its gradient is too), or too small to split
            self._params.append((p, axis, target))
            defer_gradient_sum(p._local, {axis})
            p._local.register_hook(self._make_hook(p))

    def _make_hook(self, param):
        def hook(grad):
            if isinstance(_grad_of(param), DistTensor):       # last backward's shard: add it afterwards
                self._pending[id(param)] = param._local._grad
                param._local._grad = None
            if not self._queued:
                self._queued = True
                queue_callback(self._reduce_scatter)
            return None
        return hook

    def clear(self) -> None:
        """Drop the gradient shards (the optimizer's clear_grad: the next backward starts from nothing, which is
        what zeroing them would give; .grad reads None until then)."""
        for p, _, _ in self._params:
            if isinstance(_grad_of(p), DistTensor):
                p._local._grad = None
        self._pending.clear()

    def _reduce_scatter(self):
        self._queued = False
        from oarlock_autoparallel.reshard import reshard
        with oarlock.no_grad():
            for p, axis, target in self._params:
                g = _grad_of(p)
                if g is None or isinstance(g, DistTensor):
                    continue
                partial = list(p.placements)
                partial[axis] = Partial()
                shard = reshard(DistTensor.make(g, p.process_mesh, partial, p.shape), p.process_mesh, target)
                before = self._pending.pop(id(p), None)
                if before is not None:
                    shard = DistTensor.make(shard._local + before._local, p.process_mesh, target, p.shape)
                p._local._grad = shard


def _grad_of(param):
    """The gradient slot of the parameter's piece (unset until a first gradient: None)."""
    return getattr(param._local, "_grad", None)
