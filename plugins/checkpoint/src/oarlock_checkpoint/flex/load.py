"""load_state_dict: fill the given tensors in place from a checkpoint saved under any layout.

Every rank states the boxes it holds (its requests); all ranks then compute
the same plan (plan.py): each file is read by one rank, and the pieces others
need move in one all-to-all per round. With an unchanged layout each rank
reads its own file and nothing moves. Every shard read is checked against
its checksum before any of it is used.
"""

from __future__ import annotations

import numpy as np

from oarlock_checkpoint._arrays import NUMPY_DTYPE
from oarlock_checkpoint.flex import layout, pending
from oarlock_checkpoint.flex.aoa import build_mapping
from oarlock_checkpoint.flex.boxes import relative, shape_of, slices
from oarlock_checkpoint.flex.datafile import CHECKSUM, DataFile, checksum, raw_bytes
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

    coordinator_rank, offload, mw_name_compatibility and safetensors are accepted for Paddle's
    signature: reading needs no coordinator, data is staged in host memory anyway, names are
    taken as they are, and the data format is read from the checkpoint itself."""
    pending.wait_async_save()   # a background save to this directory must finish first
    team = team_for(process_group, WHERE)

    def describe():
        shards, objects = flatten(state_dict, WHERE)
        source, data_format = layout.open_source(path, unique_id, WHERE)
        round_bytes()   # a bad OARLOCK_CHECKPOINT_ROUND_BYTES fails every rank here
        absent = [key for key in objects if key not in source.objects]
        if absent:   # plain values are per rank: checked here, where a failure reaches every rank
            raise KeyError(f"{WHERE}: {source.description} has no value for {', '.join(map(repr, absent))}")
        mine = [Request(s.key, s.box, s.global_shape, s.dtype) for s in shards.values()]
        return (shards, objects, source, data_format), mine

    (shards, objects, source, data_format), requests = team.gather_checked(describe, WHERE)
    budget = round_bytes()
    mapping = build_mapping(aoa_config, {k: (t.shape, t.dtype) for k, t in source.tensors.items()},
                            _destination(requests))
    _check(mapping, source, requests)
    rounds = make_plan(source, requests, mapping, WHERE, budget)
    targets = {key: _Target(shard) for key, shard in shards.items() if key not in mapping.created}
    files = {}
    for reads in rounds:
        _run_round(reads, team, targets, files, source, data_format)
    for target in targets.values():
        target.finish()
    put_objects(state_dict, {key: source.objects[key] for key in objects})
    return None


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
    """Where loaded pieces land: the tensor's own host buffer when it has one (CPU), else a staging
    array copied into the tensor at the end."""

    def __init__(self, shard):
        self.shard = shard
        data = getattr(shard.tensor, "_data", None)
        self.direct = type(data) is np.ndarray and data.flags.writeable and data.flags.c_contiguous
        self.buffer = data if self.direct else np.empty(shape_of(shard.box), NUMPY_DTYPE[shard.dtype])

    def put(self, dst_box: tuple, value: np.ndarray) -> None:
        self.buffer[slices(relative(dst_box, self.shard.box))] = value

    def finish(self) -> None:
        if not self.direct:
            self.shard.tensor.set_value(self.buffer)


def _apply(transfer, piece: np.ndarray, targets: dict) -> None:
    value = piece.transpose(transfer.perm) if transfer.perm != tuple(range(piece.ndim)) else piece
    for dtype in transfer.casts:
        value = value.astype(NUMPY_DTYPE[dtype])
    targets[transfer.dst_key].put(transfer.dst_box, value)


def _read(read, targets, files, source, data_format, rank) -> np.ndarray | None:
    """The shard's values, checked against its checksum; read straight into the target tensor when the
    shard is exactly what this rank needs (an unchanged layout), in which case None is returned."""
    dtype, shape = np.dtype(NUMPY_DTYPE[read.dtype]), shape_of(read.shard_box)
    only = read.transfers[0] if len(read.transfers) == 1 else None
    target = targets[only.dst_key] if only is not None and only.needer == rank else None
    straight = (target is not None and target.direct and only.src_box == read.shard_box
                and only.dst_box == target.shard.box and not only.casts and only.perm == tuple(range(len(shape)))
                and target.buffer.dtype == dtype)
    reader = files.get(read.file) or files.setdefault(read.file, DataFile(source.file_path(read.file), data_format))
    array = reader.read(read.key, dtype, shape, target.buffer if straight else None)
    if read.checksum is not None and checksum(array) != read.checksum:
        raise ValueError(f"{WHERE}: tensor {read.key!r} in {source.file_path(read.file)!r} fails its {CHECKSUM} "
                         f"checksum (stored {read.checksum}, read {checksum(array)}): the file was damaged after it "
                         f"was saved")
    return None if straight else array


def _run_round(reads, team, targets, files, source, data_format) -> None:
    me = team.rank

    def read_mine():
        outgoing = [[] for _ in range(team.size)]
        for read in reads:
            if read.reader != me:
                continue
            array = _read(read, targets, files, source, data_format, me)
            if array is None:
                continue
            for t in read.transfers:
                piece = array[slices(relative(t.src_box, read.shard_box))]
                if t.needer == me:
                    _apply(t, piece, targets)
                else:
                    outgoing[t.needer].append(raw_bytes(np.ascontiguousarray(piece)))
        return outgoing, None

    outgoing, _ = team.gather_checked(read_mine, WHERE)   # a failed read stops every rank, not just this one
    remote = [(read, t) for read in reads for t in read.transfers if t.needer != read.reader]
    if not remote:
        return
    sizes = [0] * team.size
    for read, t in remote:
        if t.needer == me:
            sizes[read.reader] += t.nbytes
    incoming = team.exchange([np.concatenate(o) if o else np.empty(0, np.uint8) for o in outgoing], sizes)
    offsets = [0] * team.size
    for read, t in remote:
        if t.needer != me:
            continue
        start = offsets[read.reader]
        offsets[read.reader] += t.nbytes
        data = incoming[read.reader][start:start + t.nbytes]
        _apply(t, data.view(NUMPY_DTYPE[read.dtype]).reshape(shape_of(t.src_box)), targets)
