"""The load plan: which rank reads which file, and which n-d pieces then move to which rank.

Every rank computes the same plan from the same inputs (the checkpoint's
metadata and every rank's requests), so the plan itself is never sent. A
piece is the intersection of a request (mapped onto source tensors by the AoA
mapping) with one saved shard; it travels as the raw bytes of its box of the
shard, in the source dtype and layout, and the receiving rank transposes and
casts it into place.
"""

from __future__ import annotations

import os
from typing import NamedTuple

import numpy as np

from oarlock_checkpoint._arrays import NUMPY_DTYPE
from oarlock_checkpoint.flex.boxes import intersect, volume



def round_bytes() -> int:
    """The most bytes a rank holds in one round (shards it read plus pieces it receives):
    OARLOCK_CHECKPOINT_ROUND_BYTES, 1 GiB by default. A shard larger than that is a round of its own."""
    value = os.environ.get("OARLOCK_CHECKPOINT_ROUND_BYTES", str(1 << 30))
    if not value.isdigit() or int(value) <= 0:
        raise ValueError(f"load_state_dict(): OARLOCK_CHECKPOINT_ROUND_BYTES must be a positive number of bytes, "
                         f"got {value!r}")
    return int(value)


class Request(NamedTuple):
    key: str
    box: tuple            # the box of the global tensor this rank's tensor holds
    global_shape: tuple
    dtype: str
    name: str             # the requesting rank's name for the box (its target; key@i for a flat range's boxes)


class Transfer(NamedTuple):
    needer: int
    src_box: tuple        # in the source tensor's global coordinates, inside the shard
    dst_name: str         # the needer's Request.name
    dst_box: tuple        # in the destination tensor's global coordinates, inside the needer's request
    perm: tuple
    casts: tuple
    nbytes: int


class ShardRead(NamedTuple):
    reader: int
    file: str
    key: str
    name: str             # the shard's name in the file
    shard_box: tuple
    dtype: str
    checksum: str | None
    transfers: list


def _dst_box(piece, src_box: tuple) -> tuple:
    """The part of piece.dst_box that src_box (inside piece.src_box) lands on."""
    out = []
    for axis, (start, _) in enumerate(piece.dst_box):
        src_axis = piece.perm[axis]
        lo, hi = src_box[src_axis]
        first = start + lo - piece.src_box[src_axis][0]
        out.append((first, first + hi - lo))
    return tuple(out)


def make_plan(source, requests: list, mapping, where: str, budget: int) -> list:
    """Rounds of ShardReads (each round bounded by `budget` bytes read or received per rank), from
    `requests[rank]` = that rank's list of Request."""
    reads = {}
    for rank, mine in enumerate(requests):
        for request in mine:
            if request.key in mapping.created:
                continue
            covered = 0
            for piece in mapping.pieces(request.key, request.box):
                source_tensor = source.tensors[piece.src_key]
                itemsize = np.dtype(NUMPY_DTYPE[source_tensor.dtype]).itemsize
                for shard in source_tensor.shards:
                    part = intersect(piece.src_box, shard.box)
                    if part is None:
                        continue
                    name = shard.name_in_file(piece.src_key)
                    read = reads.get((shard.file, name))
                    if read is None:
                        read = reads[(shard.file, name)] = ShardRead(
                            -1, shard.file, piece.src_key, name, shard.box, source_tensor.dtype, shard.checksum, [])
                    read.transfers.append(Transfer(rank, part, request.name, _dst_box(piece, part), piece.perm,
                                                   piece.casts, volume(part) * itemsize))
                    covered += volume(part)
            if covered != volume(request.box):
                raise ValueError(f"{where}: {source.description} holds only {covered} of the {volume(request.box)} "
                                 f"elements rank {rank} needs of {request.key!r} (box {list(request.box)}): its "
                                 f"metadata does not cover the tensor")
    assigned = _assign_readers(source, reads, len(requests))
    return _rounds(assigned, len(requests), budget)


def _assign_readers(source, reads: dict, size: int) -> list:
    """Each file is read by one rank: the rank that wrote it when that rank needs something from it
    (an unchanged layout then reads only its own file), else the least loaded rank that needs it."""
    by_file = {}
    for read in reads.values():
        by_file.setdefault(read.file, []).append(read)
    load, reader_of = [0] * size, {}
    sizes = {file: sum(volume(r.shard_box) for r in rs) for file, rs in by_file.items()}
    for file in sorted(by_file, key=lambda f: (-sizes[f], f)):
        needers = {t.needer for read in by_file[file] for t in read.transfers}
        writer = source.files.get(file, {}).get("rank")
        reader = writer if writer in needers else min(needers, key=lambda r: (load[r], r))
        reader_of[file] = reader
        load[reader] += sizes[file]
    return [read._replace(reader=reader_of[read.file]) for _, read in sorted(reads.items())]


def _rounds(reads: list, size: int, budget: int) -> list:
    rounds, current = [], []
    held = [0] * size   # bytes a rank holds in this round: shards it read plus pieces it receives
    for read in reads:
        adds = [0] * size
        adds[read.reader] += volume(read.shard_box) * np.dtype(NUMPY_DTYPE[read.dtype]).itemsize
        for t in read.transfers:
            if t.needer != read.reader:
                adds[t.needer] += t.nbytes
        if current and any(h + a > budget for h, a in zip(held, adds)):
            rounds.append(current)
            current, held = [], [0] * size
        current.append(read)
        held = [h + a for h, a in zip(held, adds)]
    if current:
        rounds.append(current)
    return rounds
