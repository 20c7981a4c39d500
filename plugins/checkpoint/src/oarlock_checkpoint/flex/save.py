"""save_state_dict: every rank writes the shards it was assigned into its own data file, and the
coordinator writes the metadata last.

Order of events, which makes a crash at any point harmless:
1. every rank describes its shards; all ranks agree on the id and on one
   writer for each box (a replicated box goes to the holder with the fewest
   bytes so far), and check that each tensor's boxes tile it exactly;
2. the coordinator removes an older checkpoint of the same id (its metadata
   first), then everyone writes its data file under a temporary name,
   fsyncs it and renames it into place, computing a checksum per tensor;
3. the coordinator collects the checksums (sync: a gather; async: each rank's
   `.done` record) and only then writes `U.metadata` the same way.
Until step 3 ends, id U has no metadata and load rejects it as incomplete.

format="paddle" writes Paddle 3.2's own layout instead (paddle_format.py): Paddle's pickled
`R_U.distcp` data files and the pickled `U.metadata`, so paddle.distributed.load_state_dict reads
the checkpoint; the same steps and order, without checksums (Paddle's metadata has no place for them).
"""

from __future__ import annotations

import os
import time

import numpy as np

from oarlock_checkpoint import safetensors as st
from oarlock.plugin_api import array_of

from oarlock_checkpoint.flex import cow, layout, paddle_format, pending, staging
from oarlock_checkpoint.flex.boxes import intersect, offset_of, shape_of, volume
from oarlock_checkpoint.flex.datafile import data_file_name, write_data_file
from oarlock_checkpoint.flex.state import flatten
from oarlock_checkpoint.flex.team import team_for

WHERE = "save_state_dict()"
_POLL = 0.002


FORMATS = ("oarlock", "paddle")


def save_state_dict(state_dict, path, process_group=None, coordinator_rank=0, unique_id=None, async_save=False,
                    safetensors=None, format="oarlock") -> None:
    """Save a (sharded) state dict into the directory `path` as checkpoint `unique_id` (the next free
    id when None). Every rank of `process_group` (the whole job when None) calls it. Values are
    Tensors (whole, replicated), ShardedWeights (one box of a global tensor) or plain values (kept
    from the coordinator). safetensors=False writes pickled .distcp data files instead of .safetensors
    ones (the default, None: safetensors for format="oarlock", pickle for "paddle").
    format="paddle" writes Paddle 3.2's own FlexCheckpoint (pickled `U.metadata` and Paddle's
    `R_U.distcp` files), which paddle.distributed.load_state_dict reads: Tensors and ShardedWeights
    only (Paddle's format has no plain values), at most one box of a tensor per rank, no checksums.
    async_save=True returns at once and the files are written in the background with the values of
    this moment: a thread writes from the tensors themselves, copying a tensor first when an oarlock
    op is about to write it (OARLOCK_ASYNC_SAVE=cow, the default; see cow.py), or from copies taken
    before returning (=copy), or a forked process does (=fork). The next save, load,
    wait_async_save() or the end of the program waits for it."""
    pending.wait_async_save()
    team = team_for(process_group, WHERE)
    if not isinstance(coordinator_rank, int) or not 0 <= coordinator_rank < team.size:
        raise ValueError(f"{WHERE}: coordinator_rank must be a rank of the group, in [0, {team.size}), got "
                         f"{coordinator_rank!r}")
    path = os.fspath(path)
    coordinator = team.rank == coordinator_rank

    def describe():
        layout.check_unique_id(unique_id, WHERE)
        _check_format(format, safetensors)
        shards, objects = flatten(state_dict, WHERE)
        if format == "paddle":
            _check_paddle_state(shards, objects)
        if async_save:
            pending.mode()   # a bad OARLOCK_ASYNC_SAVE fails every rank here, before anything is written
        if format == "oarlock" and safetensors is not False:
            _check_safetensors_dtypes(shards)
        if coordinator:
            os.makedirs(path, exist_ok=True)
        mine = {name: (s.key, s.dtype, s.global_shape, s.box, _nbytes(s)) for name, s in shards.items()}
        if not coordinator:
            return (shards, objects), (mine, unique_id, None, False)
        proposal = _next_id(path) if unique_id is None else None
        taken = bool(layout.leftovers(path, unique_id if unique_id is not None else proposal))
        return (shards, objects), (mine, unique_id, proposal, taken)

    (shards, objects), described = team.gather_checked(describe, WHERE)
    uid = _agree_on_id(described, coordinator_rank)
    plan = _assign_writers([d[0] for d in described])   # the same on every rank, or the same error
    data_format = "paddle" if format == "paddle" else "pickle" if safetensors is False else "safetensors"
    if described[coordinator_rank][3]:   # an older checkpoint (or remains) of this id is in the way
        if coordinator:
            _clear(path, uid)
        team.barrier()   # nobody writes before it is gone

    mine = {name for rank, name in plan["writer"].values() if rank == team.rank}
    names = [name for name in shards if name in mine]   # in the state dict's order, as Paddle's files are
    arrays = {name: shards[name].values(_host(shards[name].tensor)) for name in names}
    # the CPU tensors whose own memory the writer would read (the others' host arrays are copies already)
    live = {name: a for name, a in arrays.items() if _owns(shards[name].tensor, a)}
    how = pending.mode() if async_save else None
    snapshot = None
    if how == "copy":   # a thread writes: take private copies now
        arrays.update(staging.snapshot(live))
    elif how == "cow":   # a thread writes from the tensors themselves, guarded against training's writes
        # a flat range's boxes are parts of one tensor, which a guard (one per tensor) cannot share: copied now
        parts = {name: a for name, a in live.items() if shards[name].span is not None}
        arrays.update(staging.snapshot(parts))
        snapshot = cow.Snapshot({name: (shards[name].tensor, a) for name, a in live.items() if name not in parts})
        arrays.update(snapshot.sources)
    name = data_file_name(team.rank, uid, data_format) if names else None
    mapping = paddle_format.flat_mapping(state_dict) if format == "paddle" else None
    finish = _Finish(path, uid, team.size, data_format, plan, objects, coordinator, mapping)
    tensor_names = {name: shards[name].tensor.name for name in names}

    def write() -> dict:
        record = {"rank": team.rank, "file": name, "checksum": {}, "bytes": 0}
        if name is not None:
            record["checksum"] = write_data_file(os.path.join(path, name), arrays, data_format, tensor_names)
            record["bytes"] = os.stat(os.path.join(path, name)).st_size
        return record

    if async_save:
        def job():
            try:
                _recorded(write, path, team.rank, uid)
            finally:
                if snapshot is not None:   # written or failed: no guard outlives the save
                    snapshot.close()
            finish.from_files(_timeout(team))
        if snapshot is not None and cow.precopy_enabled() and data_format == "safetensors":
            snapshot.start_precopy(st.encode_header(live, None)[1])   # the writer's order
        pending.start(job, f"checkpoint {uid} in {path!r}", fork=how == "fork")
        return None
    try:
        record = write()
    except Exception as exc:   # every rank must learn of it, or the others would wait in the gather
        record = {"rank": team.rank, "error": f"{type(exc).__name__}: {exc}"}
    finish.from_records(team.gather_all(record))
    team.barrier()   # return only once the metadata is in place on the coordinator
    return None


def _check_format(format, safetensors) -> None:
    if format not in FORMATS:
        raise ValueError(f"{WHERE}: format must be one of {list(FORMATS)}, got {format!r}")
    if safetensors not in (None, True, False):
        raise TypeError(f"{WHERE}: safetensors must be True, False or None, got {safetensors!r}")
    if format == "paddle" and safetensors:
        raise ValueError(f"{WHERE}: format='paddle' writes Paddle's pickled .distcp files (what "
                         f"paddle.distributed.load_state_dict reads by default); pass safetensors=False or None")


def _check_paddle_state(shards: dict, objects: dict) -> None:
    """What Paddle's layout can hold: Tensors only, one box of a tensor per rank (its file is keyed by
    tensor key)."""
    if objects:
        raise TypeError(f"{WHERE}: format='paddle' holds only Tensors and ShardedWeights (Paddle's "
                        f"save_state_dict refuses other values), but {', '.join(map(repr, objects))} "
                        f"{'is a plain value' if len(objects) == 1 else 'are plain values'}; save them with "
                        f"format='oarlock' or separately")
    split = sorted({s.key for name, s in shards.items() if name != s.key})
    if split:
        raise ValueError(f"{WHERE}: format='paddle' stores one box of a tensor per rank, but the flattened "
                         f"range of {', '.join(map(repr, split))} covers several boxes on this rank; save with "
                         f"format='oarlock', which stores each box")


def _check_safetensors_dtypes(shards: dict) -> None:
    stored = set(st.DTYPES.values())
    for key, shard in shards.items():
        if shard.dtype not in stored:
            raise TypeError(f"{WHERE}: {key!r} is {shard.dtype}, which safetensors files cannot hold (they hold "
                            f"{', '.join(sorted(stored))}); pass safetensors=False to write pickled .distcp files")


def _nbytes(shard) -> int:
    return volume(shard.box) * np.dtype(shard.tensor.dtype.np).itemsize


def _host(tensor) -> np.ndarray:
    """The tensor's values as a C-contiguous host array (the tensor's own buffer on the CPU)."""
    array = np.asarray(tensor)
    return array if array.flags.c_contiguous else np.ascontiguousarray(array)


def _owns(tensor, array: np.ndarray) -> bool:
    """Whether `array` is `tensor`'s own memory (a CPU tensor), which training may still write."""
    own = array_of(tensor)
    return type(own) is np.ndarray and np.shares_memory(own, array)


def _next_id(path: str) -> int:
    if not os.path.isdir(path):
        return 0
    complete, partial = layout.checkpoint_ids(path)
    return max(complete | partial, default=-1) + 1


def _agree_on_id(described: list, coordinator_rank: int) -> int:
    asked = {d[1] for d in described}
    if len(asked) > 1:
        raise ValueError(f"{WHERE}: the ranks passed different unique_id values: "
                         f"{[d[1] for d in described]} (rank order); every rank must pass the same")
    asked = asked.pop()
    return asked if asked is not None else described[coordinator_rank][2]


def _assign_writers(per_rank: list) -> dict:
    """{"writer": {(key, box): (rank, name)}, "tensors": {key: (dtype, global shape, [(box, rank, name), ...])}}:
    one writer per distinct box (`name`: the box's name in the writer's file); a box held by several ranks
    goes to the one with the fewest bytes so far."""
    tensors, holders = {}, {}
    for rank, shards in enumerate(per_rank):
        for name, (key, dtype, global_shape, box, nbytes) in shards.items():
            known = tensors.setdefault(key, (dtype, tuple(global_shape), rank))
            if known[:2] != (dtype, tuple(global_shape)):
                raise ValueError(f"{WHERE}: rank {known[2]} saves {key!r} as {known[0]} of global shape "
                                 f"{list(known[1])} but rank {rank} as {dtype} of global shape {list(global_shape)}")
            holders.setdefault((key, tuple(box)), []).append((rank, nbytes, name))
    load = [0] * len(per_rank)
    writer_of_box = {}
    # boxes only one rank has first, then the replicated ones, largest first, each to the least loaded holder
    for (key, box), ranks in sorted(holders.items(), key=lambda item: (len(item[1]) > 1, -item[1][0][1], item[0])):
        rank, _, name = min(ranks, key=lambda r: (load[r[0]], r[0]))
        writer_of_box[(key, box)] = (rank, name)
        load[rank] += ranks[0][1]
    out = {key: (dtype, shape, []) for key, (dtype, shape, _) in tensors.items()}
    for (key, box), (rank, name) in sorted(writer_of_box.items()):
        out[key][2].append((box, rank, name))
    for key, (_, shape, boxes) in out.items():
        _check_tiling(key, shape, [box for box, _, _ in boxes])
    return {"writer": writer_of_box, "tensors": out}


def _check_tiling(key: str, shape: tuple, boxes: list) -> None:
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            if intersect(a, b) is not None:
                raise ValueError(f"{WHERE}: two ranks hold different, overlapping shards of {key!r}: "
                                 f"offset {list(offset_of(a))} shape {list(shape_of(a))} and offset "
                                 f"{list(offset_of(b))} shape {list(shape_of(b))}")
    covered, total = sum(volume(b) for b in boxes), volume(tuple((0, n) for n in shape))
    if covered != total:
        raise ValueError(f"{WHERE}: the shards of {key!r} cover {covered} of its {total} elements (global shape "
                         f"{list(shape)}); every element must be held by some rank")


def _clear(path: str, uid: int) -> None:
    """Remove checkpoint `uid` (metadata first, so it is never complete-looking with new data) and
    the remains of an interrupted save of that id."""
    meta = layout.metadata_path(path, uid)
    if os.path.exists(meta):
        os.unlink(meta)
    for name in layout.leftovers(path, uid):
        os.unlink(os.path.join(path, name))


def _timeout(team) -> float:
    group = team.group
    return float(getattr(group, "timeout", None) or os.environ.get("OARLOCK_COLLECTIVE_TIMEOUT") or 1800)


def _recorded(write, path: str, rank: int, uid: int) -> dict:
    """Run the write and leave its result (or error) in this rank's .done record for the coordinator."""
    done = layout.done_path(path, rank, uid)
    try:
        record = write()
    except Exception as exc:
        layout.write_record(done, {"rank": rank, "error": f"{type(exc).__name__}: {exc}"})
        raise
    layout.write_record(done, record)
    return record


class _Finish:
    """The coordinator's last step: the metadata, built from every writer's record."""

    def __init__(self, path, uid, world_size, data_format, plan, objects, coordinator, mapping=None):
        self.path, self.uid, self.world_size, self.data_format = path, uid, world_size, data_format
        self.plan, self.objects, self.coordinator, self.mapping = plan, objects, coordinator, mapping

    def from_records(self, records: list) -> None:
        failed = [f"rank {r['rank']}: {r['error']}" for r in records if "error" in r]
        if failed:
            raise RuntimeError(f"{WHERE}: checkpoint {self.uid} in {self.path!r} was not completed; "
                               + "; ".join(failed))
        if self.coordinator:
            self._write_metadata(records)

    def from_files(self, timeout: float) -> None:
        """Async: the coordinator waits for every rank's .done record, then writes the metadata."""
        if not self.coordinator:
            return
        writers = range(self.world_size)
        deadline, records = time.monotonic() + timeout, {}
        while len(records) < len(writers):
            for r in writers:
                done = layout.done_path(self.path, r, self.uid)
                if r not in records and os.path.exists(done):
                    records[r] = layout.read_record(done)
            if len(records) < len(writers):
                if time.monotonic() > deadline:
                    missing = [r for r in writers if r not in records]
                    raise TimeoutError(f"ranks {missing} did not finish writing within {timeout:.0f} s")
                time.sleep(_POLL)
        self.from_records([records[r] for r in writers])
        for r in writers:
            os.unlink(layout.done_path(self.path, r, self.uid))

    def _write_metadata(self, records: list) -> None:
        by_rank = {r["rank"]: r for r in records}
        if self.data_format == "paddle":
            tensors = {key: (dtype, shape, [(box, rank, by_rank[rank]["file"]) for box, rank, _ in boxes])
                       for key, (dtype, shape, boxes) in self.plan["tensors"].items()}
            paddle_format.write_metadata(layout.metadata_path(self.path, self.uid),
                                         paddle_format.build_metadata(tensors, self.mapping))
            return
        tensors = {}
        for key, (dtype, shape, boxes) in self.plan["tensors"].items():
            tensors[key] = {"dtype": dtype, "global_shape": list(shape), "shards": [
                _shard_entry(key, box, by_rank[rank], name) for box, rank, name in boxes]}
        files = {r["file"]: {"rank": r["rank"], "bytes": r["bytes"]} for r in records if r.get("file")}
        layout.write_record(layout.metadata_path(self.path, self.uid),
                            layout.metadata_body(self.uid, self.world_size, self.data_format, tensors,
                                                 self.objects, files))


def _shard_entry(key: str, box: tuple, record: dict, name: str) -> dict:
    """One shard's metadata; "name" (its name in the file) only where it is not the tensor's key (a box of
    a flattened range)."""
    entry = {"offset": list(offset_of(box)), "shape": list(shape_of(box)), "file": record["file"],
             "checksum": record["checksum"][name]}
    if name != key:
        entry["name"] = name
    return entry
