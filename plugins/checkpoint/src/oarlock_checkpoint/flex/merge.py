"""merge_sharded_state_dict: a FlexCheckpoint (or any checkpoint load_state_dict reads) as one
unsharded Hugging Face style directory: `model-0000i-of-0000N.safetensors` plus
`model.safetensors.index.json`, which the safetensors library (and transformers) load directly.

Files are filled one at a time, so the memory needed is one file's share of the
tensors, not the whole model. The index is written last: a directory without
it is an unfinished merge.
"""

from __future__ import annotations

import json
import os


import oarlock
from oarlock_checkpoint import safetensors as st
from oarlock_checkpoint._files import atomic_write
from oarlock_checkpoint.flex import layout
from oarlock_checkpoint.flex.datafile import durable
from oarlock_checkpoint.flex.load import load_fresh

WHERE = "merge_sharded_state_dict()"


def merge_sharded_state_dict(load_path, save_path, prefix=None, safetensor_prefix="model", unique_id=None,
                             offload=False, aoa_config=None, safetensors=False, file_num=1) -> None:
    """Write the whole tensors of the checkpoint at `load_path` (id `unique_id`, the newest complete
    when None) into `file_num` safetensors files under `save_path`, split by bytes in key order.
    `prefix` keeps only keys starting with "prefix." and strips it; aoa_config is applied while
    loading. offload and safetensors are accepted for Paddle's signature (data is staged on the host
    and the input format is read from the checkpoint)."""
    if not isinstance(file_num, int) or isinstance(file_num, bool) or file_num < 1:
        raise ValueError(f"{WHERE}: file_num must be a positive int, got {file_num!r}")
    if not isinstance(safetensor_prefix, str) or not safetensor_prefix:
        raise ValueError(f"{WHERE}: safetensor_prefix must be a non-empty str, got {safetensor_prefix!r}")
    source, _ = layout.open_source(load_path, unique_id, WHERE)
    keys = _keys(source, prefix, WHERE)
    if len(keys) < file_num:
        raise ValueError(f"{WHERE}: file_num={file_num} is more files than the {len(keys)} tensors to write")
    groups = _split_by_bytes(keys, source, file_num)
    os.makedirs(save_path, exist_ok=True)
    weight_map, total = {}, 0
    for i, group in enumerate(groups):
        tensors = _empty_tensors(group, source)
        load_fresh(tensors, load_path, unique_id=source.unique_id, aoa_config=aoa_config)
        name = f"{safetensor_prefix}-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        renamed = _strip(tensors, prefix)
        if _is_writer():
            st.save_file(renamed, os.path.join(save_path, name), durable=durable())
        weight_map.update(dict.fromkeys(renamed, name))
        total += sum(source.tensors[key].nbytes for key in group)
    if _is_writer():
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        with atomic_write(os.path.join(save_path, f"{safetensor_prefix}.safetensors.index.json"), WHERE,
                          durable=durable()) as f:
            f.write((json.dumps(index, indent=2) + "\n").encode())


def load_merged_state_dict(path, prefix=None, unique_id=None, offload=False, aoa_config=None,
                           safetensors=False) -> dict:
    """{key: whole Tensor} of every tensor in the checkpoint (only keys under "prefix.", with the prefix
    stripped, when prefix is given). Every rank of a job gets the whole tensors."""
    where = "load_merged_state_dict()"
    source, _ = layout.open_source(path, unique_id, where)
    tensors = _empty_tensors(_keys(source, prefix, where), source)
    load_fresh(tensors, path, unique_id=source.unique_id, aoa_config=aoa_config)
    return _strip(tensors, prefix)


def _keys(source, prefix, where: str) -> list:
    keys = [k for k in source.tensors if prefix is None or k.startswith(f"{prefix}.")]
    if not keys:
        raise ValueError(f"{where}: {source.description} has no tensor" +
                         (f" whose key starts with {prefix + '.'!r}" if prefix is not None else ""))
    return keys


def _empty_tensors(keys: list, source) -> dict:
    return {key: oarlock.empty(list(source.tensors[key].shape), dtype=source.tensors[key].dtype) for key in keys}


def _strip(tensors: dict, prefix) -> dict:
    return {key[len(prefix) + 1:] if prefix is not None else key: t for key, t in tensors.items()}


def _split_by_bytes(keys: list, source, file_num: int) -> list:
    sizes = [source.tensors[k].nbytes for k in keys]
    total, groups, current, done = sum(sizes), [], [], 0
    for i, (key, size) in enumerate(zip(keys, sizes)):
        current.append(key)
        done += size
        left_keys, left_files = len(keys) - i - 1, file_num - len(groups) - 1
        # close the file at its share of the bytes, keeping at least one key for each file still to come
        if left_files and (done >= total * (len(groups) + 1) / file_num or left_keys == left_files):
            groups.append(current)
            current = []
    groups.append(current)
    return groups


def _is_writer() -> bool:
    distributed = oarlock.distributed
    return not hasattr(distributed, "get_rank") or distributed.get_rank() == 0
