"""Paddle 3.2's own FlexCheckpoint layout, read and written (paddle.distributed.save_state_dict /
load_state_dict; paddle/distributed/flex_checkpoint/dcp/{metadata,save_state_dict,utils}.py).

A checkpoint with id U is `U.metadata`, paddle.save of a `Metadata` dataclass:

    state_dict_metadata  {key: [LocalTensorMetadata(global_offset, local_shape, dtype, global_shape), ...]}
    storage_metadata     {LocalTensorIndex(tensor_key, global_offset): "R_U.distcp"}
    flat_mapping         {key: (the nested dict keys it was flattened from)}

plus `R_U.distcp` per rank that wrote something: paddle.save of {key: Tensor} (a state dict: ndarrays
and a name table; bfloat16 as uint16 bits), or a safetensors file under that name (safetensors=True).
Each (key, offset) box is stored once, by the first rank that holds it. Paddle's files carry no
checksums: shards are checked for dtype and shape only.

The metadata is read by safe_pickle's restricted machine, which admits exactly the three dataclasses
below under Paddle's module name, created empty and filled with their own fields; every value is then
checked here (ints, tuples, strings, known dtypes, files named R_U.distcp), so a hostile file cannot
run code and a malformed one is a clear error. It is written with Paddle's spelling of the classes,
byte for byte what paddle.save writes for the same Metadata.
"""

from __future__ import annotations

import io
import pickle
import re
from collections.abc import Mapping
from dataclasses import dataclass

from oarlock import Tensor

from oarlock_checkpoint._arrays import NUMPY_DTYPE
from oarlock_checkpoint._files import atomic_write
from oarlock_checkpoint.flex.boxes import box_of
from oarlock_checkpoint.flex.datafile import DamagedFile, durable
from oarlock_checkpoint.flex.sharded import ShardedWeight
from oarlock_checkpoint.safe_pickle import safe_load

MODULE = "paddle.distributed.flex_checkpoint.dcp.metadata"
DATA_FILE = re.compile(r"^(\d+)_(\d+)\.distcp$")
PICKLE_MAGIC = b"\x80"   # a pickle of protocol 2 or later starts with PROTO; our own metadata is JSON


@dataclass
class LocalTensorMetadata:
    """The location of a local tensor in the global tensor (Paddle's class, same fields and order)."""

    global_offset: tuple
    local_shape: tuple
    dtype: str
    global_shape: tuple | None = None


@dataclass(frozen=True)
class LocalTensorIndex:
    """The identifier of a local tensor (Paddle's class)."""

    tensor_key: str
    global_offset: tuple


@dataclass
class Metadata:
    """Paddle's checkpoint metadata."""

    state_dict_metadata: dict = None
    storage_metadata: dict = None
    flat_mapping: dict = None


RECORDS = {(MODULE, cls.__name__): cls for cls in (LocalTensorMetadata, LocalTensorIndex, Metadata)}
_SPELLING = {cls: key for key, cls in RECORDS.items()}


def is_paddle_metadata(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(1) == PICKLE_MAGIC


# -- writing ------------------------------------------------------------------------------------------------
class _Pickler(pickle._Pickler):
    """pickle's pure-Python pickler, spelling the three classes as Paddle's module (which need not be
    importable here, and is not these classes where real Paddle is)."""

    def save_global(self, obj, name=None):
        spelled = _SPELLING.get(obj)
        if spelled is None:
            return super().save_global(obj, name)
        module, qualname = spelled
        self.save(module)
        self.save(qualname)
        self.write(pickle.STACK_GLOBAL)
        self.memoize(obj)


def dumps(metadata: Metadata) -> bytes:
    """What paddle.save(metadata, path) writes (pickle protocol 4)."""
    buffer = io.BytesIO()
    _Pickler(buffer, 4).dump(metadata)
    return buffer.getvalue()


def write_metadata(path: str, metadata: Metadata) -> None:
    with atomic_write(path, "save_state_dict()", durable=durable()) as f:
        f.write(dumps(metadata))


def flat_mapping(state_dict) -> dict:
    """Paddle's flat_mapping: {flat key: the nested dict keys leading to it} for each Tensor and
    ShardedWeight (a ShardedWeight is stored under its own key)."""
    mapping = {}

    def visit(path: tuple, mapping_or_value):
        if isinstance(mapping_or_value, Mapping):
            for name, value in mapping_or_value.items():
                visit((*path, name), value)
        elif isinstance(mapping_or_value, ShardedWeight):
            mapping[mapping_or_value.key] = path
        elif isinstance(mapping_or_value, Tensor):
            mapping[".".join(path)] = path

    visit((), state_dict)
    return mapping


def build_metadata(tensors: dict, mapping: dict) -> Metadata:
    """Metadata of the boxes `tensors` lists: {key: (dtype, global shape, [(box, rank, file), ...])} in the
    state dict's order; storage entries go rank by rank, as Paddle's gather of the ranks' entries."""
    state, storage = {}, {}
    by_rank = {}
    for key, (dtype, shape, boxes) in tensors.items():
        state[key] = []
        for box, rank, file in boxes:
            offset, local = tuple(lo for lo, _ in box), tuple(hi - lo for lo, hi in box)
            # a whole tensor: one tuple for both shapes, as in Paddle (pickle then writes a reference)
            whole = local if local == tuple(shape) else tuple(shape)
            state[key].append(LocalTensorMetadata(offset, local, dtype, whole))
            by_rank.setdefault(rank, []).append((LocalTensorIndex(key, offset), file))
    for rank in sorted(by_rank):
        storage.update(by_rank[rank])
    same = {key: key for key in state}   # the key objects themselves, so pickle refers back to them as Paddle's does
    return Metadata(state, storage, {same.get(key, key): path for key, path in mapping.items()})


# -- reading ------------------------------------------------------------------------------------------------
def read_metadata(path: str, where: str) -> Metadata:
    """The Metadata in `path`, unpickled by the restricted machine and checked field by field."""
    source = f"{where}: {path!r}"
    try:
        with open(path, "rb") as f:
            metadata = safe_load(f, source=source, records=RECORDS)
    except pickle.UnpicklingError as exc:
        reason = str(exc).removeprefix(f"{source}: ")
        raise DamagedFile(f"{source} is not readable Paddle FlexCheckpoint metadata: {reason}", path, reason) from None
    problem = _problem(metadata)
    if problem is not None:
        reason = f"is not Paddle FlexCheckpoint metadata: {problem}; the file is damaged or not a checkpoint"
        raise DamagedFile(f"{source} {reason}", path, reason)
    return metadata


def _ints(value, size=None) -> bool:
    return (isinstance(value, (tuple, list)) and all(type(v) is int and v >= 0 for v in value)
            and (size is None or len(value) == size))


def _built(record, *fields) -> bool:
    """Whether BUILD gave the record these fields (a crafted file may leave them out)."""
    return all(field in record.__dict__ for field in fields)


def _problem(metadata) -> str | None:
    """Why `metadata` is not what Paddle writes, or None."""
    if type(metadata) is not Metadata:
        return f"it holds a {type(metadata).__name__}, not a Metadata"
    state, storage = metadata.state_dict_metadata, metadata.storage_metadata
    if type(state) is not dict or type(storage) is not dict:
        return "state_dict_metadata and storage_metadata must be dicts"
    for key, entries in state.items():
        if type(key) is not str or type(entries) is not list or not entries:
            return f"state_dict_metadata[{key!r:.80}] must be a non-empty list under a str key"
        for entry in entries:
            if type(entry) is not LocalTensorMetadata or not _built(entry, "global_offset", "local_shape", "dtype"):
                return f"state_dict_metadata[{key!r}] holds a {type(entry).__name__}, not a LocalTensorMetadata"
            rank = len(entry.local_shape) if _ints(entry.local_shape) else -1
            shape = entry.__dict__.get("global_shape")
            if (rank < 0 or not _ints(entry.global_offset, rank) or entry.dtype not in NUMPY_DTYPE
                    or not (shape is None or _ints(shape, rank))):
                return (f"the entry of {key!r} has offset {entry.global_offset!r:.80}, "
                        f"shape {entry.local_shape!r:.80}, "
                        f"dtype {entry.dtype!r:.40} and global shape {shape!r:.80}")
    for index, file in storage.items():
        if (type(index) is not LocalTensorIndex or not _built(index, "tensor_key", "global_offset")
                or type(file) is not str or DATA_FILE.match(file) is None):
            return f"storage_metadata maps {index!r:.100} to {file!r:.100} (it maps a LocalTensorIndex to 'R_U.distcp')"
        if index.tensor_key not in state or not _ints(index.global_offset):
            return f"storage_metadata names {index!r:.100}, which state_dict_metadata does not describe"
    return None


def tensors_of(metadata: Metadata, unique_id: int, where: str, path: str) -> dict:
    """{key: (dtype, global shape, [(box, file), ...])}: each box once, with the file storing it."""
    out = {}
    for key, entries in metadata.state_dict_metadata.items():
        dtypes = {entry.dtype for entry in entries}
        if len(dtypes) > 1:
            raise _damaged(path, where, f"gives {key!r} several dtypes ({', '.join(sorted(dtypes))})")
        shapes = {tuple(entry.global_shape) for entry in entries if entry.__dict__.get("global_shape") is not None}
        if len(shapes) > 1:
            raise _damaged(path, where, f"gives {key!r} several global shapes {sorted(shapes)}")
        # files from before global_shape was recorded: the extent of the boxes (Paddle's compute_global_shape)
        shape = shapes.pop() if shapes else _extent(entries)
        boxes, seen = [], set()
        for entry in entries:
            box = box_of(tuple(entry.global_offset), tuple(entry.local_shape))
            if any(hi > n for (_, hi), n in zip(box, shape)):
                raise _damaged(path, where, f"places a box of {key!r} at offset {list(entry.global_offset)} with shape "
                                            f"{list(entry.local_shape)}, outside its global shape {list(shape)}")
            if box in seen:
                continue
            seen.add(box)
            file = metadata.storage_metadata.get(LocalTensorIndex(key, tuple(entry.global_offset)))
            if file is None:
                raise _damaged(path, where, f"names no data file for {key!r} at offset {list(entry.global_offset)}")
            if int(DATA_FILE.match(file).group(2)) != unique_id:
                raise _damaged(path, where, f"stores {key!r} in {file!r}, a file of another checkpoint id")
            boxes.append((box, file))
        out[key] = (dtypes.pop(), shape, boxes)
    return out


def _extent(entries) -> tuple:
    """The global shape of files from before global_shape was recorded (Paddle's compute_global_shape)."""
    return tuple(max(e.global_offset[d] + e.local_shape[d] for e in entries)
                 for d in range(len(entries[0].local_shape)))


def _damaged(path: str, where: str, reason: str) -> DamagedFile:
    reason = f"{reason}: the metadata is damaged"
    return DamagedFile(f"{where}: {path!r} {reason}", path, reason)
