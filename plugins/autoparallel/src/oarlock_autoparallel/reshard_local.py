"""The data movement of a reshard on one mesh, on this rank's local piece (plain Tensors, no autograd).

A reshard from placements `src` to `dst` runs in four steps, each with the cheapest collective over the
group of one mesh dimension (never a gather to one rank):
1. gather: a mesh dimension sharding a tensor dimension that the target does not shard the same way (or
   only after a mesh dimension that changes) is all-gathered, innermost first; when the target shards
   another tensor dimension on that mesh dimension next, one all-to-all does both at once;
2. partial: a Partial mesh dimension becomes the target's Shard(d) by a reduce-scatter when d is ready to
   be split there, else Replicate by an all-reduce;
3. slice: target shards still missing are cut locally, outer mesh dimension first;
4. Replicate -> Partial: the rank at index 0 of the mesh dimension keeps the value, the others hold the
   reduction's identity (zeros for a sum), as Paddle's r_to_p.
Uneven sizes follow placements.chunk_bounds (pieces are padded to the chunk size for the collective, then
trimmed)."""

from __future__ import annotations

import oarlock
import oarlock.distributed as dist

from oarlock_autoparallel.placements import Partial, Replicate, ReduceType, Shard, chunk_bounds


def region(mesh, placements, global_shape, coord) -> list:
    """[start, stop) per tensor dimension of the piece at mesh coordinate `coord` (outer mesh dims split
    first)."""
    bounds = [[0, n] for n in global_shape]
    for axis, p in enumerate(placements):
        if isinstance(p, Shard):
            start, stop = bounds[p.dim]
            lo, hi = chunk_bounds(stop - start, mesh.shape[axis], coord[axis])
            bounds[p.dim] = [start + lo, start + hi]
    return bounds


def cut(x, dim: int, start: int, stop: int):
    """x[..., start:stop, ...] on `dim`, as a fresh tensor."""
    index = tuple(slice(None) for _ in range(dim)) + (slice(start, stop),)
    return x[index].clone()


def _pad(x, dim: int, length: int):
    """x padded with zeros on `dim` to `length`."""
    missing = length - x.shape[dim]
    if missing == 0:
        return x
    shape = list(x.shape)
    shape[dim] = missing
    return oarlock.concat([x, oarlock.zeros(shape, dtype=x.dtype)], axis=dim)


def _shard_list(placements, dim: int) -> list:
    return [axis for axis, p in enumerate(placements) if isinstance(p, Shard) and p.dim == dim]


def _gather(x, dim: int, extent: int, n: int, group):
    """All-gather the pieces of `dim` (total `extent`, ceil chunks over n ranks) and join them."""
    chunk = -(-extent // n)
    pieces: list = []
    dist.all_gather(pieces, _pad(x, dim, chunk), group=group)
    sizes = [hi - lo for lo, hi in (chunk_bounds(extent, n, j) for j in range(n))]
    return oarlock.concat([cut(p, dim, 0, size) for p, size in zip(pieces, sizes)], axis=dim)


def _all_to_all(x, gather_dim: int, gather_extent: int, split_dim: int, n: int, index: int, group):
    """One all-to-all: my piece of `gather_dim` is replaced by the whole of it, and `split_dim` is cut in n
    (this rank keeps chunk `index`)."""
    split_extent = x.shape[split_dim]
    sends = [cut(x, split_dim, *chunk_bounds(split_extent, n, j)) for j in range(n)]
    mine = chunk_bounds(split_extent, n, index)
    recvs = []
    for j in range(n):
        shape = list(x.shape)
        lo, hi = chunk_bounds(gather_extent, n, j)
        shape[gather_dim], shape[split_dim] = hi - lo, mine[1] - mine[0]
        recvs.append(oarlock.empty(shape, dtype=x.dtype))
    dist.alltoall(recvs, sends, group=group)
    return oarlock.concat(recvs, axis=gather_dim)


def _identity_like(x, reduce_type):
    if reduce_type == ReduceType.kRedSum:
        return oarlock.zeros_like(x)
    if reduce_type == ReduceType.kRedProd:
        return oarlock.ones_like(x)
    return x


def reshard_local(x, mesh, src: list, dst: list, global_shape: list, rank: int):
    """This rank's piece for placements `dst`, from its piece `x` for placements `src` (same mesh)."""
    coord = mesh.coordinate(rank)
    if coord is None or src == dst:
        return x
    cur = list(src)
    ndim = len(global_shape)

    def extent(dim, axis):   # the length of `dim` of the piece before mesh dim `axis` splits it
        before = [p if i != axis else Replicate() for i, p in enumerate(cur)]
        lo, hi = region(mesh, before, global_shape, coord)[dim]
        return hi - lo

    # 1. gather what the target does not keep, innermost first
    for dim in range(ndim):
        have, want = _shard_list(cur, dim), _shard_list(dst, dim)
        keep = 0
        while keep < min(len(have), len(want)) and have[keep] == want[keep]:
            keep += 1
        for axis in reversed(have[keep:]):
            n, group = mesh.shape[axis], mesh.group_of(axis, rank)
            target = dst[axis]
            if (axis == have[-1] and isinstance(target, Shard) and target.dim != dim
                    and _shard_list(cur, target.dim) == _shard_list(dst, target.dim)[:_shard_list(dst, target.dim)
                                                                                 .index(axis)]):
                x = _all_to_all(x, dim, extent(dim, axis), target.dim, n, coord[axis], group)
                cur[axis] = target
            else:
                x = _gather(x, dim, extent(dim, axis), n, group)
                cur[axis] = Replicate()
            have = _shard_list(cur, dim)
    # 2. resolve Partial mesh dims the target does not keep Partial (outer first, so reduce-scatters nest)
    for axis, p in enumerate(cur):
        if not isinstance(p, Partial) or dst[axis] == p:
            continue
        n, group, op = mesh.shape[axis], mesh.group_of(axis, rank), dist.ReduceOp(int(p.reduce_type()))
        target = dst[axis]
        if (isinstance(target, Shard) and op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG, dist.ReduceOp.MAX,
                                                 dist.ReduceOp.MIN)
                and _shard_list(cur, target.dim) == _shard_list(dst, target.dim)[:_shard_list(dst, target.dim)
                                                                             .index(axis)]):
            length = x.shape[target.dim]
            chunk = -(-length // n)
            padded = _pad(x, target.dim, chunk * n)
            blocks = [cut(padded, target.dim, j * chunk, (j + 1) * chunk) for j in range(n)]
            out = oarlock.empty(blocks[0].shape, dtype=x.dtype)
            dist.reduce_scatter(out, blocks, op=op, group=group)
            lo, hi = chunk_bounds(length, n, coord[axis])
            x = cut(out, target.dim, 0, hi - lo)
            cur[axis] = target
        else:
            x = x.clone()
            dist.all_reduce(x, op=op, group=group)
            cur[axis] = Replicate()
    # 3. cut the target's shards still missing, outer mesh dim first
    for dim in range(ndim):
        for axis in _shard_list(dst, dim):
            if cur[axis] != dst[axis]:
                lo, hi = chunk_bounds(x.shape[dim], mesh.shape[axis], coord[axis])
                x = cut(x, dim, lo, hi)
                cur[axis] = dst[axis]
    # 4. Replicate -> Partial
    for axis, p in enumerate(dst):
        if isinstance(p, Partial) and cur[axis] != p:
            if coord[axis] != 0:
                x = _identity_like(x, p.reduce_type())
            cur[axis] = p
    return x
