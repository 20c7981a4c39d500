"""load_state_dict: fill the given tensors in place from a checkpoint saved under any layout.

Every rank states the boxes it holds (its requests); all ranks then compute
the same plan (plan.py): each file is read by one rank, and the pieces others
need move in one all-to-all per round. With an unchanged layout each rank
reads its own file and nothing moves.

All or nothing: every shard read is checked (its checksum, dtype, shape and
place in the file; a pickle that unpickles) before any of it is used, and
pieces gather in host staging buffers, not in the target tensors. Each rank's
reading and placing runs inside a collective that shares failures
(Team.gather_checked), so a damaged file anywhere stops every rank; only once
every rank holds every piece do the ranks copy their staging buffers into the
targets. A failed load leaves every target tensor as it was, on every rank.
"""

from __future__ import annotations

import numpy as np

from oarlock.plugin_api import array_of

from oarlock_checkpoint._arrays import NUMPY_DTYPE
from oarlock_checkpoint.flex import layout, pending
from oarlock_checkpoint.flex.aoa import build_mapping
from oarlock_checkpoint.flex.boxes import relative, shape_of, slices
from oarlock_checkpoint.flex.datafile import DataFile, raw_bytes
from oarlock_checkpoint.flex.plan import Request, make_plan, round_bytes
from oarlock_checkpoint.flex.state import flatten, put_objects
from oarlock_checkpoint.flex.team import team_for

WHERE = "load_state_dict()"


def load_state_dict(state_dict, path, process_group=None, coordinator_rank=0, unique_id=None, offload=False,
                    mw_name_compatibility=True, aoa_config=None, safetensors=False) -> None:
    """Fill `state_dict` (Tensors, ShardedWeights and plain values, nested dicts allowed) in place from
    the checkpoint at `path`: a directory save_state_dict wrote (checkpoint `unique_id`, the newest
    complete one when None), a Hugging Face style directory of .safetensors files, or one
    .safetensors file. The layout may differ from the saved one (other rank counts, other shard
    axes); `aoa_config={"aoa_statements": [...]}` maps other structures (renames, splits, fused
    QKV, ...). Every rank of `process_group` calls it.

    All or nothing: no target is written before every rank has read and checked every shard it
    reads (file sizes, dtypes, shapes, XXH3-64 checksums, readable pickles); a damaged, truncated or
    missing file raises on every rank, naming the file, and leaves every target as it was. Peak host
    memory besides the targets themselves: one staging copy of this rank's target tensors (tensors
    on an accelerator need that host copy anyway), plus one round of shards read and pieces
    received (OARLOCK_CHECKPOINT_ROUND_BYTES, 1 GiB by default, or the largest shard when that is
    larger), plus, for pickle (.distcp) checkpoints, the arrays not yet used of each data file this
    rank has begun (a pickle is read whole).

    coordinator_rank, offload, mw_name_compatibility and safetensors are accepted for Paddle's
    signature: reading needs no coordinator, data is staged in host memory anyway, names are
    taken as they are, and the data format is read from the checkpoint itself."""
    _load(state_dict, path, process_group, unique_id, aoa_config, staged=True)


def load_fresh(state_dict, path, unique_id=None, aoa_config=None) -> None:
    """load_state_dict into tensors only the caller holds (merge's new ones), which a failed load
    leaves half filled, unseen: pieces go straight into their host memory, with no staging copy."""
    _load(state_dict, path, None, unique_id, aoa_config, staged=False)


def _load(state_dict, path, process_group, unique_id, aoa_config, staged: bool) -> None:
    pending.wait_async_save()   # a background save to this directory must finish first
    team = team_for(process_group, WHERE)

    def describe():
        shards, objects = flatten(state_dict, WHERE)
        source, data_format = layout.open_source(path, unique_id, WHERE)
        round_bytes()   # a bad OARLOCK_CHECKPOINT_ROUND_BYTES fails every rank here
        absent = [key for key in objects if key not in source.objects]
        if absent:   # plain values are per rank: checked here, where a failure reaches every rank
            raise KeyError(f"{WHERE}: {source.description} has no value for {', '.join(map(repr, absent))}")
        mine = [Request(s.key, s.box, s.global_shape, s.dtype, name) for name, s in shards.items()]
        return (shards, objects, source, data_format), mine

    (shards, objects, source, data_format), requests = team.gather_checked(describe, WHERE)
    budget = round_bytes()
    mapping = build_mapping(aoa_config, {k: (t.shape, t.dtype) for k, t in source.tensors.items()},
                            _destination(requests))
    _check(mapping, source, requests)
    rounds = make_plan(source, requests, mapping, WHERE, budget)
    targets = {name: _Target(shard, staged) for name, shard in shards.items() if shard.key not in mapping.created}
    loader = _Loader(team, targets, source, data_format)
    for reads in rounds:
        loader.run_round(reads)
    loader.finish()   # returns on every rank or raises on every rank
    for target in targets.values():
        target.commit()
    put_objects(state_dict, {key: source.objects[key] for key in objects})


def _destination(requests: list) -> dict:
    """{key: (global shape, dtype)} over every rank's requests; ranks must agree on both."""
    out, first = {}, {}
    for rank, mine in enumerate(requests):
        for r in mine:
            seen = out.setdefault(r.key, (r.global_shape, r.dtype))
            first.setdefault(r.key, rank)
            if seen != (r.global_shape, r.dtype):
                raise ValueError(f"{WHERE}: rank {first[r.key]} holds {r.key!r} as {seen[1]} of global shape "
                                 f"{list(seen[0])} but rank {rank} as {r.dtype} of global shape "
                                 f"{list(r.global_shape)}")
    return out


def _check(mapping, source, requests) -> None:
    """Errors every rank finds alike (they depend only on shared inputs), before anything is read."""
    missing = mapping.missing
    if missing:
        raise KeyError(f"{WHERE}: {source.description} has nothing for {', '.join(map(repr, missing))}; map them "
                       f"from other keys with aoa_config, or keep their current values with '_ -> key' statements")
    for key, (_, dtype) in _destination(requests).items():
        if key not in mapping.created and mapping.dtype_of(key) != dtype:
            raise TypeError(f"{WHERE}: {key!r} is {mapping.dtype_of(key)} in {source.description} but {dtype} in "
                            f"the state_dict; nothing is cast silently: add the aoa statement "
                            f"\"{key} -> {key}, dtype='{dtype}'\" to convert it")


class _Target:
    """Where the loaded pieces of one box gather: a staging array, copied into the tensor by
    commit() once every rank has everything; unstaged (a fresh tensor), the tensor's own host
    buffer when it has one (CPU). The box of a flat range is its span of the 1-D tensor, reshaped."""

    def __init__(self, shard, staged: bool):
        self.shard = shard
        data = getattr(shard.tensor, "_data", None)
        usable = type(data) is np.ndarray and data.flags.writeable and data.flags.c_contiguous
        self.host = shard.values(data) if usable else None
        self.buffer = self.host if self.host is not None and not staged else \
            np.empty(shape_of(shard.box), NUMPY_DTYPE[shard.dtype])

    def put(self, dst_box: tuple, value: np.ndarray) -> None:
        self.buffer[slices(relative(dst_box, self.shard.box))] = value

    def commit(self) -> None:
        if self.buffer is self.host:
            return
        if self.host is not None:
            np.copyto(self.host, self.buffer)   # in place: views of the tensor and its holders see the values
        elif self.shard.span is not None:   # a span of a device tensor, written in place like the rest of it
            tensor = self.shard.tensor
            self.shard.values(array_of(tensor))[...] = tensor.place.backend.xp.asarray(self.buffer)
        else:
            self.shard.tensor.set_value(self.buffer)


def _apply(transfer, piece: np.ndarray, targets: dict) -> None:
    value = piece.transpose(transfer.perm) if transfer.perm != tuple(range(piece.ndim)) else piece
    for dtype in transfer.casts:
        value = value.astype(NUMPY_DTYPE[dtype])
    targets[transfer.dst_name].put(transfer.dst_box, value)


class _Loader:
    """Runs the plan's rounds on this rank: read this rank's shards, send the pieces others need,
    place what arrives. Every local step (reading, placing) runs inside Team.gather_checked, so an
    error on one rank is raised on all of them at that collective instead of leaving the others
    waiting in the next; pieces received in one round are placed in the next round's step (or in
    finish)."""

    def __init__(self, team, targets: dict, source, data_format: str):
        self.team, self.targets, self.source, self.data_format = team, targets, source, data_format
        self.files = {}
        self.received = []   # (transfer, piece) from the last exchange, still to be placed

    def run_round(self, reads: list) -> None:
        def step():
            self._place_received()
            return self._read_mine(reads), None

        outgoing, _ = self.team.gather_checked(step, WHERE)
        self._exchange(reads, outgoing)

    def finish(self) -> None:
        """Place the last pieces; returns on every rank once every rank holds all it needs."""
        self.team.gather_checked(lambda: (self._place_received(), None), WHERE)

    def _place_received(self) -> None:
        received, self.received = self.received, []
        for transfer, piece in received:
            _apply(transfer, piece, self.targets)

    def _read_mine(self, reads: list) -> list:
        """Read this rank's shards of the round, place the pieces it needs itself; returns the bytes
        for each other rank."""
        me, outgoing = self.team.rank, [[] for _ in range(self.team.size)]
        for read in reads:
            if read.reader != me:
                continue
            array = self._read(read)
            if array is None:
                continue
            for t in read.transfers:
                piece = array[slices(relative(t.src_box, read.shard_box))]
                if t.needer == me:
                    _apply(t, piece, self.targets)
                else:
                    outgoing[t.needer].append(raw_bytes(np.ascontiguousarray(piece)))
        return outgoing

    def _read(self, read) -> np.ndarray | None:
        """The shard's values, checked; read straight into its target's buffer when the shard is
        exactly what this rank needs (an unchanged layout), in which case None is returned."""
        dtype, shape = np.dtype(NUMPY_DTYPE[read.dtype]), shape_of(read.shard_box)
        only = read.transfers[0] if len(read.transfers) == 1 else None
        target = self.targets[only.dst_name] if only is not None and only.needer == self.team.rank else None
        straight = (target is not None and only.src_box == read.shard_box and only.dst_box == target.shard.box
                    and not only.casts and only.perm == tuple(range(len(shape))) and target.buffer.dtype == dtype)
        reader = self.files.get(read.file)
        if reader is None:
            reader = self.files[read.file] = DataFile(self.source.file_path(read.file), self.data_format, WHERE,
                                                      flex=self.source.unique_id is not None)
        array = reader.read(read.name, dtype, shape, target.buffer if straight else None, read.checksum)
        return None if straight else array

    def _exchange(self, reads: list, outgoing: list) -> None:
        """One all-to-all of the round's pieces (every rank knows every size from the shared plan)."""
        me, size = self.team.rank, self.team.size
        remote = [(read, t) for read in reads for t in read.transfers if t.needer != read.reader]
        if not remote:
            return
        sizes = [0] * size
        for read, t in remote:
            if t.needer == me:
                sizes[read.reader] += t.nbytes
        incoming = self.team.exchange([np.concatenate(o) if o else np.empty(0, np.uint8) for o in outgoing], sizes)
        offsets = [0] * size
        for read, t in remote:
            if t.needer != me:
                continue
            start = offsets[read.reader]
            offsets[read.reader] += t.nbytes
            data = incoming[read.reader][start:start + t.nbytes]
            self.received.append((t, data.view(NUMPY_DTYPE[read.dtype]).reshape(shape_of(t.src_box))))
