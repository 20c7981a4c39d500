"""`oarlock checkpoint info | verify | merge`: look into a FlexCheckpoint directory from the shell.

info    the ids in a directory (complete, or the remains of an interrupted save) and one checkpoint's
        ranks, files, tensors and bytes
verify  read every shard of one checkpoint and check it against its recorded checksum; every damaged
        shard is one FAILED line naming its file and what is wrong (exit status 1)
merge   write its whole tensors as a Hugging Face style directory (merge_sharded_state_dict)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np

from oarlock_checkpoint._arrays import NUMPY_DTYPE
from oarlock_checkpoint.flex import layout
from oarlock_checkpoint.flex.boxes import shape_of
from oarlock_checkpoint.flex.datafile import CHECKSUM, DamagedFile, DataFile

HELP = "inspect, verify or merge a FlexCheckpoint (save_state_dict's directory)"


def configure(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    info = actions.add_parser("info", help="the checkpoint ids in PATH and one checkpoint's ranks, files and size")
    verify = actions.add_parser("verify", help="read every shard of a checkpoint and check its checksum "
                                               "(exit status 1 if any fails)")
    merge = actions.add_parser("merge", help="write the whole tensors as a Hugging Face style directory "
                                             "(model-0000i-of-0000N.safetensors + model.safetensors.index.json)")
    for sub in (info, verify, merge):
        sub.add_argument("path", help="the checkpoint directory (or a Hugging Face style directory)")
        sub.add_argument("--id", type=int, default=None, metavar="N",
                         help="checkpoint id (default: the newest complete one)")
    info.add_argument("--tensors", action="store_true", help="list every tensor with its dtype, shape and shards")
    merge.add_argument("out", help="the directory to write")
    merge.add_argument("--files", type=int, default=1, metavar="K", help="number of safetensors files (default 1)")
    merge.add_argument("--prefix", default=None, help='keep only keys under "PREFIX." and strip it')
    merge.add_argument("--safetensor-prefix", default="model", help='file name prefix (default "model")')


def run(args: argparse.Namespace) -> int:
    with warnings.catch_warnings(record=True) as caught:   # shown as plain notes, not Python warnings
        warnings.simplefilter("always")
        status = _run(args)
    for warning in caught:
        print(f"note: {warning.message}", file=sys.stderr)
    return status


def _run(args: argparse.Namespace) -> int:
    where = f"oarlock checkpoint {args.action}"
    try:
        if args.action == "merge":
            from oarlock_checkpoint.flex.merge import merge_sharded_state_dict
            start = time.perf_counter()
            merge_sharded_state_dict(args.path, args.out, prefix=args.prefix, safetensor_prefix=args.safetensor_prefix,
                                     unique_id=args.id, file_num=args.files)
            print(f"wrote {args.out} in {time.perf_counter() - start:.1f} s")
            return 0
        if args.action == "info":
            return _info(args, *layout.open_source(args.path, args.id, where))
        return _verify(*layout.open_source(args.path, args.id, where, check_files=False))
    except (OSError, ValueError, TypeError, KeyError) as exc:
        if isinstance(exc, DamagedFile) and args.action == "verify":   # the metadata: nothing else can be checked
            print(f"FAILED {exc.path}: {exc.reason}")
            return 1
        message = str(exc).strip("'\"") if isinstance(exc, KeyError) else str(exc)
        print(message if message.startswith(where) else f"{where}: {message}", file=sys.stderr)
        return 2


def _size(nbytes: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.2f} {unit}"
    return f"{nbytes} bytes"


def _info(args, source, data_format) -> int:
    if os.path.isdir(args.path):
        complete, partial = layout.checkpoint_ids(args.path)
        if complete or partial:
            line = f"{args.path}: complete ids {sorted(complete) or 'none'}"
            if partial:
                line += f"; interrupted saves {sorted(partial)} (" + "; ".join(
                    f"{uid}: {', '.join(layout.leftovers(args.path, uid))}" for uid in sorted(partial)) + ")"
            print(line)
    total = sum(t.nbytes for t in source.tensors.values())
    checked = f"{CHECKSUM} checksums" if _has_checksums(source) else "no checksums"
    ranks = "" if source.world_size is None else f"saved by {source.world_size} rank(s), "
    print(f"{source.description}: {ranks}{len(source.tensors)} tensors, {_size(total)} in {len(source.files)} "
          f"{data_format} file(s), {checked}; {len(source.objects)} plain value(s)")
    if args.tensors:
        width = max((len(k) for k in source.tensors), default=3)
        for key, tensor in source.tensors.items():
            print(f"  {key:<{width}}  {tensor.dtype:<13} {list(tensor.shape)!s:<20} {len(tensor.shards)} shard(s)")
        for key, value in source.objects.items():
            print(f"  {key:<{width}}  = {value!r}")
    return 0


def _has_checksums(source) -> bool:
    """oarlock's FlexCheckpoints carry one per shard; Hugging Face directories and Paddle's checkpoints none."""
    return any(shard.checksum is not None for tensor in source.tensors.values() for shard in tensor.shards)


def _verify(source, data_format) -> int:
    start, failures, shards, nbytes, files = time.perf_counter(), [], 0, 0, {}
    problems = layout.file_problems(source)   # missing or resized files: none of their shards is read
    for key, tensor in source.tensors.items():
        dtype = np.dtype(NUMPY_DTYPE[tensor.dtype])
        for shard in tensor.shards:
            what = f"{key!r} in {shard.file} (offset {[lo for lo, _ in shard.box]})"
            if shard.file in problems:
                failures.append(f"{what}: the file {problems[shard.file]}")
                continue
            reader = files.setdefault(shard.file, DataFile(source.file_path(shard.file), data_format,
                                                           "oarlock checkpoint verify", source.unique_id is not None))
            try:
                array = reader.read(shard.name_in_file(key), dtype, shape_of(shard.box), expected=shard.checksum)
            except DamagedFile as exc:
                failures.append(f"{what}: {exc.reason}")
                continue
            except OSError as exc:   # unreadable rather than damaged (permissions, I/O errors)
                failures.append(f"{what}: cannot be read ({exc})")
                continue
            shards += 1
            nbytes += array.nbytes
    for failure in failures:
        print(f"FAILED {failure}")
    verdict = f"{len(failures)} shard(s) FAILED" if failures else \
        "all checksums match" if _has_checksums(source) else "no checksums to compare (dtypes and shapes match)"
    print(f"{source.description}: read {shards} shard(s), {_size(nbytes)} from {len(files)} file(s) in "
          f"{time.perf_counter() - start:.1f} s: {verdict}")
    return 1 if failures else 0
