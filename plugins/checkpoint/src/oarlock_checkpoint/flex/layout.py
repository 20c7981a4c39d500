"""What a checkpoint directory holds, and how its completeness is judged.

A FlexCheckpoint with unique id U is complete exactly when `U.metadata`
exists: the coordinator renames it into place only after every rank's data
file is on disk (see save.py). Data files, `.done` records or temporary files
of an id without metadata are the remains of an interrupted save. The
metadata is JSON (safe to read, easy to inspect) with its own CRC-32.

A `U.metadata` that is a pickle, not JSON, is Paddle 3.2's own FlexCheckpoint (paddle_format.py):
its tensors are read from Paddle's `R_U.distcp` files, without checksums (Paddle writes none).

Loading also accepts a Hugging Face style directory (`*.safetensors` files,
with or without `model.safetensors.index.json`) or a single .safetensors
file: each tensor is then one whole shard of its file.
"""

from __future__ import annotations

import json
import math
import os
import re
import warnings
import zlib
from typing import NamedTuple

import numpy as np

from oarlock_checkpoint import safetensors
from oarlock_checkpoint._arrays import NUMPY_DTYPE
from oarlock_checkpoint._files import atomic_write
from oarlock_checkpoint.flex.boxes import box_of, whole
from oarlock_checkpoint.flex import paddle_format
from oarlock_checkpoint.flex.datafile import CHECKSUM, DamagedFile, durable

FORMAT = "oarlock-flexcheckpoint"
VERSION = 1
METADATA = ".metadata"
DONE = ".done"
_SEAL = "record_crc32"   # the CRC-32 of a record's own JSON (compact, sorted keys, without this entry)
_ID = re.compile(r"^(?:\d+_)?(\d+)(?:\.metadata|\.safetensors|\.distcp|\.done)(?:\.[0-9a-f]+\.tmp)?$")


class Shard(NamedTuple):
    box: tuple
    file: str
    checksum: str | None    # XXH3-64 hex; None where the files carry none (Hugging Face directories)
    name: str | None = None   # its name in the file where that is not the tensor's key (a flat range's box)

    def name_in_file(self, key: str) -> str:
        return key if self.name is None else self.name


class SourceTensor(NamedTuple):
    dtype: str
    shape: tuple
    shards: list

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * np.dtype(NUMPY_DTYPE[self.dtype]).itemsize


class Source:
    """The tensors and plain values a checkpoint holds, and where each shard lives."""

    def __init__(self, directory: str, tensors: dict, objects: dict, files: dict, description: str,
                 unique_id: int | None = None, world_size: int | None = None):
        self.directory, self.tensors, self.objects, self.files = directory, tensors, objects, files
        self.description = description   # for error messages: "checkpoint 3 in /ckpt"
        self.unique_id = unique_id       # None for safetensors files that are not a FlexCheckpoint
        self.world_size = world_size     # the ranks that saved it (None: not a FlexCheckpoint)

    def file_path(self, name: str) -> str:
        return os.path.join(self.directory, name)


# -- ids ----------------------------------------------------------------------------------------------------
def checkpoint_ids(directory: str) -> tuple[set, set]:
    """(complete ids, ids with only the remains of an interrupted save)."""
    complete, seen = set(), set()
    for name in os.listdir(directory):
        match = _ID.match(name)
        if match:
            uid = int(match.group(1))
            seen.add(uid)
            if name.endswith(METADATA):
                complete.add(uid)
    return complete, seen - complete


def leftovers(directory: str, unique_id: int) -> list:
    """The files of id `unique_id` (data, records, temporaries, metadata) found in `directory`."""
    return sorted(name for name in os.listdir(directory)
                  if (match := _ID.match(name)) and int(match.group(1)) == unique_id)


def metadata_path(directory: str, unique_id: int) -> str:
    return os.path.join(directory, f"{unique_id}{METADATA}")


def done_path(directory: str, rank: int, unique_id: int) -> str:
    return os.path.join(directory, f"{rank}_{unique_id}{DONE}")


# -- writing ------------------------------------------------------------------------------------------------
def _sealed(body: dict) -> bytes:
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return json.dumps({_SEAL: f"{zlib.crc32(text.encode()):08x}", **body}, sort_keys=True).encode()


def _unseal(raw: bytes, path: str) -> dict:
    try:
        content = json.loads(raw)
        stored = content.pop(_SEAL)
    except (ValueError, KeyError, AttributeError, TypeError):
        raise _damaged_record(path, "is not a readable FlexCheckpoint record (damaged JSON)") from None
    text = json.dumps(content, sort_keys=True, separators=(",", ":"))
    if f"{zlib.crc32(text.encode()):08x}" != stored:
        raise _damaged_record(path, "fails its CRC-32 check: the file was damaged after it was written")
    return content


def _damaged_record(path: str, reason: str) -> DamagedFile:
    return DamagedFile(f"{path!r} {reason}", path, reason)


def write_record(path: str, body: dict) -> None:
    """A small JSON file (metadata or a rank's .done record), durably and atomically."""
    with atomic_write(path, "save_state_dict()", durable=durable()) as f:
        f.write(_sealed(body))


def read_record(path: str) -> dict:
    with open(path, "rb") as f:
        return _unseal(f.read(), path)


def metadata_body(unique_id: int, world_size: int, data_format: str, tensors: dict, objects: dict,
                  files: dict) -> dict:
    return {"format": FORMAT, "version": VERSION, "unique_id": unique_id, "world_size": world_size,
            "checksum": CHECKSUM, "data_format": data_format, "tensors": tensors, "objects": objects, "files": files}


# -- reading ------------------------------------------------------------------------------------------------
def open_source(path, unique_id, where: str, check_files: bool = True) -> tuple:
    """(Source, data format) of the checkpoint at `path`: a FlexCheckpoint directory (id `unique_id`,
    the newest complete one when None), a Hugging Face style directory or one .safetensors file.
    check_files=True raises DamagedFile for the first data file whose size is not the recorded one
    (see file_problems)."""
    path = os.fspath(path)
    if os.path.isfile(path) and path.endswith(".safetensors"):
        return _huggingface(os.path.dirname(path) or ".", [os.path.basename(path)], where), "safetensors"
    if not os.path.isdir(path):
        raise FileNotFoundError(f"{where}: no checkpoint at {path!r} (give the directory save_state_dict wrote, a "
                                f"Hugging Face style directory or a .safetensors file)")
    complete, partial = checkpoint_ids(path)
    if complete or partial:
        return _flex(path, _choose_id(path, unique_id, complete, partial, where), where, check_files)
    names = sorted(n for n in os.listdir(path) if n.endswith(".safetensors"))
    if not names:
        raise FileNotFoundError(f"{where}: {path!r} holds no checkpoint: no *.metadata of a FlexCheckpoint and no "
                                f"*.safetensors files")
    return _huggingface(path, names, where), "safetensors"


def check_unique_id(unique_id, where: str) -> None:
    if unique_id is not None and (not isinstance(unique_id, int) or isinstance(unique_id, bool) or unique_id < 0):
        raise ValueError(f"{where}: unique_id must be a non-negative int or None, got {unique_id!r}")


def _choose_id(path: str, unique_id, complete: set, partial: set, where: str) -> int:
    check_unique_id(unique_id, where)
    if unique_id is not None:
        if unique_id in complete:
            return unique_id
        if unique_id in partial:
            raise ValueError(f"{where}: checkpoint {unique_id} in {path!r} is incomplete: its save did not finish "
                             f"(found {', '.join(leftovers(path, unique_id))} but no {unique_id}{METADATA}); load "
                             f"an earlier one: complete ids are {sorted(complete) or 'none'}")
        raise FileNotFoundError(f"{where}: {path!r} has no checkpoint {unique_id}; complete ids are "
                                f"{sorted(complete) or 'none'}")
    if not complete:
        raise ValueError(f"{where}: {path!r} holds only incomplete checkpoints (ids {sorted(partial)}): every save "
                         f"there was interrupted before its metadata was written")
    newest = max(complete)
    newer = sorted(uid for uid in partial if uid > newest)
    if newer:
        warnings.warn(f"{where}: loading checkpoint {newest} from {path!r}; the newer checkpoint(s) {newer} are "
                      f"incomplete (interrupted saves) and were skipped", stacklevel=3)
    return newest


def _flex(path: str, unique_id: int, where: str, check_files: bool) -> tuple:
    meta_file = metadata_path(path, unique_id)
    if paddle_format.is_paddle_metadata(meta_file):
        return _paddle(path, unique_id, meta_file, where, check_files), "paddle"
    try:
        body = read_record(meta_file)
    except DamagedFile as exc:
        raise DamagedFile(f"{where}: {exc}", exc.path, exc.reason) from None
    if body.get("format") != FORMAT or body.get("version") != VERSION:
        raise ValueError(f"{where}: {meta_file!r} is not version {VERSION} FlexCheckpoint metadata (format "
                         f"{body.get('format')!r}, version {body.get('version')!r})")
    tensors = {key: SourceTensor(entry["dtype"], tuple(entry["global_shape"]),
                                 [Shard(box_of(s["offset"], s["shape"]), s["file"], s["checksum"], s.get("name"))
                                  for s in entry["shards"]])
               for key, entry in body["tensors"].items()}
    source = Source(path, tensors, body["objects"], body["files"], f"checkpoint {unique_id} in {path!r}", unique_id,
                    body["world_size"])
    _check_files(source, where, check_files)
    return source, body["data_format"]


def _paddle(path: str, unique_id: int, meta_file: str, where: str, check_files: bool) -> Source:
    """The Source of a checkpoint Paddle's save_state_dict wrote (or ours with format="paddle")."""
    metadata = paddle_format.read_metadata(meta_file, where)
    tensors, files = {}, {}
    for key, (dtype, shape, boxes) in paddle_format.tensors_of(metadata, unique_id, where, meta_file).items():
        tensors[key] = SourceTensor(dtype, tuple(shape), [Shard(box, file, None) for box, file in boxes])
        for _, file in boxes:
            files[file] = {"rank": int(paddle_format.DATA_FILE.match(file).group(1)), "bytes": None}
    world = max((info["rank"] for info in files.values()), default=-1) + 1
    source = Source(path, tensors, {}, files, f"Paddle checkpoint {unique_id} in {path!r}", unique_id, world)
    _check_files(source, where, check_files)
    return source


def _check_files(source: Source, where: str, check: bool) -> None:
    problems = file_problems(source) if check else {}
    if problems:
        name, reason = next(iter(problems.items()))
        file = source.file_path(name)
        raise DamagedFile(f"{where}: data file {file!r} of {source.description} {reason}", file, reason)


def file_problems(source: Source) -> dict:
    """{file name: why} for each data file of a FlexCheckpoint that is missing or not of the size its
    metadata records (Paddle's metadata records no sizes)."""
    problems = {}
    for name, info in source.files.items():
        file = source.file_path(name)
        size = os.stat(file).st_size if os.path.exists(file) else None
        if size is None or (info.get("bytes") is not None and size != info["bytes"]):
            state = "is missing" if size is None else f"has {size} bytes, expected {info['bytes']}"
            problems[name] = f"{state}: the checkpoint was damaged or partly deleted after it was saved"
    return problems


def _huggingface(directory: str, names: list, where: str) -> Source:
    """Each tensor of each file as one whole shard. With an index json, only the files it names."""
    indexes = [n for n in os.listdir(directory) if n.endswith(".safetensors.index.json")]
    if len(names) > 1 and len(indexes) == 1:
        with open(os.path.join(directory, indexes[0]), encoding="utf-8") as f:
            weight_map = json.load(f).get("weight_map", {})
        names = sorted(set(weight_map.values()))
    tensors, files = {}, {}
    for name in names:
        file = os.path.join(directory, name)
        with open(file, "rb") as f:
            entries, _, _ = safetensors.read_header(f, file)
        files[name] = {"rank": None, "bytes": os.stat(file).st_size}
        for key, entry in entries.items():
            if key in tensors:
                raise ValueError(f"{where}: tensor {key!r} is in both {tensors[key].shards[0].file!r} and {name!r} "
                                 f"of {directory!r}")
            dtype = safetensors.DTYPES.get(entry["dtype"])
            if dtype is None:
                raise TypeError(f"{where}: tensor {key!r} in {file!r} has dtype {entry['dtype']}, which oarlock "
                                f"tensors do not have")
            tensors[key] = SourceTensor(dtype, tuple(entry["shape"]), [Shard(whole(entry["shape"]), name, None)])
    return Source(directory, tensors, {}, files, f"the safetensors files in {directory!r}")
