"""reshard(dist_tensor, mesh, placements) (Paddle's paddle.distributed.reshard), differentiable.

On one mesh the data moves as reshard_local.py describes. Between meshes:
- the same processes in another shape: nothing moves when every process's piece is already the one it
  needs; otherwise the tensor is replicated on the source mesh and cut for the target;
- meshes of one shape over other processes: the pieces are resharded on the source mesh, then the process
  at each mesh coordinate sends its piece to the target's process at that coordinate (point to point). This is
  differentiable (how a pipeline moves activations between stages): the backward sends each gradient piece the
  other way. A rank of the source mesh only learns that gradient by running backward too, so every rank calls
  loss.backward(): ranks outside a mesh compute nothing but keep the autograd chain (spmd.py's _empty_outputs)
  down to this move, whose backward then receives the gradient;
- other meshes: an error (no rule, as Paddle).

Gradients have Paddle's global meaning: the gradient of a tensor with placements p is laid out as p with
Partial read as Replicate (the gradient of a sum's terms is the gradient of the sum). So the backward of a
reshard src -> dst is the reshard of the gradient from dst' to src' (P -> R -> ...), e.g. S -> R (all-gather)
has the backward R -> S (a local slice), R -> P has none (R -> R), P -> S has S -> R (all-gather)."""

from __future__ import annotations

import oarlock
import oarlock.distributed as dist
from oarlock import PyLayer

from oarlock_autoparallel.dtensor import DistTensor
from oarlock_autoparallel.mesh import ProcessMesh
from oarlock_autoparallel.placements import Partial, Replicate, check_placements
from oarlock_autoparallel.reshard_local import region, reshard_local


def gradient_placements(placements) -> list:
    """The placements of a gradient: Partial becomes Replicate."""
    return [Replicate() if isinstance(p, Partial) else p for p in placements]


class _Reshard(PyLayer):
    """Local piece src -> dst on one mesh; backward: the gradient dst' -> src'."""

    @staticmethod
    def forward(ctx, local, mesh, src, dst, global_shape, rank):
        ctx.plan = (mesh, src, dst, global_shape, rank)
        return reshard_local(local, mesh, src, dst, global_shape, rank)

    @staticmethod
    def backward(ctx, grad):
        mesh, src, dst, global_shape, rank = ctx.plan
        return reshard_local(grad, mesh, gradient_placements(dst), gradient_placements(src), global_shape, rank)


class _GatherUnsummed(PyLayer):
    """Local piece src -> dst on one mesh for an input whose gradient is not yet summed over the mesh dims
    `unsummed` (src Shard there, dst Replicate: a ZeRO-3 parameter gathered for an op); backward: the gradient,
    Partial on those dims, reduce-scattered back to src (instead of an all-reduce and a slice)."""

    @staticmethod
    def forward(ctx, local, mesh, src, dst, global_shape, rank, unsummed):
        ctx.plan = (mesh, src, dst, global_shape, rank, unsummed)
        return reshard_local(local, mesh, src, dst, global_shape, rank)

    @staticmethod
    def backward(ctx, grad):
        mesh, src, dst, global_shape, rank, unsummed = ctx.plan
        partial = [Partial() if m in unsummed else p for m, p in enumerate(gradient_placements(dst))]
        return reshard_local(grad, mesh, partial, gradient_placements(src), global_shape, rank)


def gather_unsummed(dist_tensor, placements, unsummed: set):
    """reshard on the tensor's own mesh for an op input whose gradient the op leaves unsummed over the mesh dims
    `unsummed` where it goes from Shard to Replicate (spmd.py skips its gradient sum there); other dims as
    reshard. Returns the local piece."""
    mesh, src = dist_tensor._mesh, dist_tensor._placements
    dims = {m for m in unsummed if src[m].is_shard() and placements[m].is_replicated()}
    rank = dist.get_rank()
    if not dims or not mesh.contains(rank):
        return reshard(dist_tensor, mesh, placements)._local
    return _GatherUnsummed.apply(dist_tensor._local, mesh, src, list(placements), dist_tensor.shape, rank, dims)


def _on_mesh(local, mesh, src, dst, global_shape, rank):
    if src == dst or not mesh.contains(rank):
        return local
    return _Reshard.apply(local, mesh, src, dst, global_shape, rank)


def _pieces_match(src_mesh, src, dst_mesh, dst, global_shape) -> bool:
    if any(isinstance(p, Partial) for p in (*src, *dst)):
        return False
    return all(region(src_mesh, src, global_shape, src_mesh.coordinate(r))
               == region(dst_mesh, dst, global_shape, dst_mesh.coordinate(r)) for r in src_mesh.process_ids)


def _peers(rank, src_mesh, dst_mesh):
    """(the dst process this rank's piece goes to, the src process this rank's piece comes from); None where
    this rank is not in that mesh. Pieces pair up by mesh coordinate (the meshes have one shape)."""
    src_ids, dst_ids = src_mesh.process_ids, dst_mesh.process_ids
    to = dst_ids[src_ids.index(rank)] if rank in src_ids else None
    frm = src_ids[dst_ids.index(rank)] if rank in dst_ids else None
    return to, frm


def _exchange(piece, to, frm, rank, shape, dtype):
    """Send `piece` to process `to` and receive a tensor of `shape` from process `frm` (None: that side is
    skipped; this rank itself: no message). Returns the received (or kept) tensor, or None."""
    tasks, out = [], None
    if to is not None:
        if to == rank:
            out = piece.detach()
        else:
            tasks.append(dist.isend(piece.detach().clone(), to))
    if frm is not None and frm != rank:
        out = oarlock.empty(shape, dtype=dtype)
        tasks.append(dist.irecv(out, frm))
    for task in tasks:
        task.wait()
    return out


class _Move(PyLayer):
    """The piece at each mesh coordinate sent from src_mesh's process to dst_mesh's; backward: the gradient
    piece sent back. A rank outside dst_mesh returns an empty piece (its gradient is ignored), a rank outside
    src_mesh returns a zero gradient for its (empty) input."""

    @staticmethod
    def forward(ctx, local, src_mesh, dst_mesh, received_shape, rank):
        to, frm = _peers(rank, src_mesh, dst_mesh)
        ctx.plan = (to, frm, rank, list(local.shape), local.dtype)
        out = _exchange(local, to, frm, rank, received_shape, local.dtype)
        return out if out is not None else empty_local(local.dtype)

    @staticmethod
    def backward(ctx, grad):
        to, frm, rank, shape, dtype = ctx.plan
        back = _exchange(grad, frm, to, rank, shape, dtype)      # the same messages, the other way
        return back if back is not None else oarlock.zeros(shape, dtype=dtype)


def reshard(dist_tensor, mesh, placements):
    """The tensor laid out on `mesh` with `placements` (one per mesh dimension)."""
    if not isinstance(dist_tensor, DistTensor):
        raise TypeError(f"reshard(): argument 'dist_tensor' must be a distributed tensor (from shard_tensor / "
                        f"dtensor_from_local), got {type(dist_tensor).__name__}")
    if not isinstance(mesh, ProcessMesh):
        raise TypeError(f"reshard(): argument 'mesh' must be a ProcessMesh, got {type(mesh).__name__}")
    shape = dist_tensor.shape
    dst = check_placements(placements, mesh, len(shape), "reshard()")
    src_mesh, src, local = dist_tensor._mesh, dist_tensor._placements, dist_tensor._local
    rank = dist.get_rank()
    if mesh == src_mesh:
        return DistTensor.make(_on_mesh(local, mesh, src, dst, shape, rank), mesh, dst, shape)
    if sorted(mesh.process_ids) == sorted(src_mesh.process_ids):
        if _pieces_match(src_mesh, src, mesh, dst, shape):
            return DistTensor.make(local, mesh, dst, shape)
        full = _on_mesh(local, src_mesh, src, [Replicate()] * src_mesh.ndim, shape, rank)
        return DistTensor.make(_on_mesh(full, mesh, [Replicate()] * mesh.ndim, dst, shape, rank), mesh, dst, shape)
    if mesh.shape == src_mesh.shape:
        moved = _on_mesh(local, src_mesh, src, dst, shape, rank)
        coord = mesh.coordinate(rank)
        received = None if coord is None else [hi - lo for lo, hi in region(mesh, dst, shape, coord)]
        if not (src_mesh.contains(rank) or mesh.contains(rank)):
            return DistTensor.make(empty_local(local.dtype), mesh, dst, shape)
        return DistTensor.make(_Move.apply(moved, src_mesh, mesh, received, rank), mesh, dst, shape)
    raise ValueError(f"reshard(): no rule moves a tensor from mesh {src_mesh} to mesh {mesh}: they have other "
                     f"processes and other shapes ({src_mesh.shape} vs {mesh.shape}); supported: one mesh, meshes "
                     f"of the same processes, or meshes of the same shape")


def empty_local(dtype):
    """The local piece of a rank outside the mesh: an empty tensor."""
    return oarlock.zeros([0], dtype=dtype)
