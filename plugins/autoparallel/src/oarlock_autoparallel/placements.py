"""Placements: how a distributed tensor lies on one mesh dimension (Paddle's paddle.distributed.Shard /
Replicate / Partial and ReduceType, with their equality, repr and is_* queries).

Shard(d): tensor dimension d is split over the mesh dimension in chunks of ceil(size / n) (the last chunks
take what is left, possibly nothing: Paddle 3's BalancedSplit, clamped at zero where it would go negative).
Several mesh dimensions may shard the same tensor dimension ([Shard(0), Shard(0)]): the split follows the
mesh dimensions in order, outer first (the outer mesh dimension splits the tensor, each inner one splits
its piece again), as torch's DTensor does. Replicate(): every rank holds the whole. Partial(reduce_type):
every rank holds a piece; the tensor is their reduction (a sum unless reduce_type says otherwise)."""

from __future__ import annotations

import enum


class ReduceType(enum.IntEnum):
    """Paddle's paddle.distributed.ReduceType (its values are Paddle's)."""

    kRedSum = 0
    kRedMax = 1
    kRedMin = 2
    kRedProd = 3
    kRedAvg = 4
    kRedAny = 5
    kRedAll = 6


class Placement:
    """The base of Shard, Replicate and Partial (Paddle's paddle.distributed.Placement)."""

    __slots__ = ()

    def is_shard(self, dim: int | None = None) -> bool:
        return False

    def is_replicated(self) -> bool:
        return False

    def is_partial(self) -> bool:
        return False

    def __ne__(self, other):
        return not self == other


class Shard(Placement):
    """Shard(dim): tensor dimension `dim` is split over the mesh dimension."""

    __slots__ = ("dim",)

    def __init__(self, dim: int):
        if not isinstance(dim, int) or isinstance(dim, bool):
            raise TypeError(f"Shard(): argument 'dim' must be an int tensor dimension, got {type(dim).__name__} "
                            f"{dim!r}")
        self.dim = dim

    def get_dim(self) -> int:
        return self.dim

    def is_shard(self, dim: int | None = None) -> bool:
        return dim is None or dim == self.dim

    def __eq__(self, other):
        return isinstance(other, Shard) and other.dim == self.dim

    def __hash__(self):
        return hash(("Shard", self.dim))

    def __repr__(self):
        return f"Shard(dim={self.dim})"


class Replicate(Placement):
    """Replicate(): every rank of the mesh dimension holds the whole tensor."""

    __slots__ = ()

    def is_replicated(self) -> bool:
        return True

    def __eq__(self, other):
        return isinstance(other, Replicate)

    def __hash__(self):
        return hash("Replicate")

    def __repr__(self):
        return "Replicate()"


_REDUCE_NAMES = {ReduceType.kRedSum: "SUM", ReduceType.kRedMax: "MAX", ReduceType.kRedMin: "MIN",
                 ReduceType.kRedProd: "PROD", ReduceType.kRedAvg: "AVG", ReduceType.kRedAny: "ANY",
                 ReduceType.kRedAll: "ALL"}


class Partial(Placement):
    """Partial(reduce_type=ReduceType.kRedSum): the tensor is the reduction of the ranks' pieces."""

    __slots__ = ("_reduce_type",)

    def __init__(self, reduce_type=ReduceType.kRedSum):
        try:
            self._reduce_type = ReduceType(int(reduce_type))
        except (TypeError, ValueError):
            raise ValueError(f"Partial(): argument 'reduce_type' must be a ReduceType "
                             f"({', '.join(ReduceType.__members__)}), got {reduce_type!r}") from None

    def reduce_type(self) -> ReduceType:
        return self._reduce_type

    def is_partial(self) -> bool:
        return True

    def __eq__(self, other):
        return isinstance(other, Partial) and other._reduce_type == self._reduce_type

    def __hash__(self):
        return hash(("Partial", int(self._reduce_type)))

    def __repr__(self):
        return f"Partial(reduce_type={_REDUCE_NAMES[self._reduce_type]})"


def chunk_bounds(size: int, parts: int, index: int) -> tuple:
    """[start, stop) of piece `index` of `size` split in `parts` (ceil-sized chunks, the last ones short)."""
    chunk = -(-size // parts) if parts else 0
    return min(index * chunk, size), min((index + 1) * chunk, size)


def check_placements(placements, mesh, ndim: int, what: str) -> list:
    """The placements as a list, after checking they fit `mesh` and a tensor of `ndim` dimensions; errors name
    `what` (the calling function) and what was accepted."""
    if not isinstance(placements, (list, tuple)) or not all(isinstance(p, Placement) for p in placements):
        raise TypeError(f"{what}: argument 'placements' must be a list of Shard / Replicate / Partial, got "
                        f"{placements!r}")
    if len(placements) != mesh.ndim:
        raise ValueError(f"{what}: argument 'placements' has {len(placements)} entries {list(placements)}, but the "
                         f"mesh has {mesh.ndim} dimensions (shape {mesh.shape}): give one placement per mesh "
                         f"dimension")
    for p in placements:
        if isinstance(p, Shard) and not -ndim <= p.dim < max(ndim, 0):
            raise ValueError(f"{what}: placement {p!r} is beyond the tensor's {ndim} dimensions (accepted: Shard(d) "
                             f"with 0 <= d < {ndim})")
    return [Shard(p.dim % ndim) if isinstance(p, Shard) else p for p in placements]
