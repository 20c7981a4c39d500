"""Where a resilient checkpoint's files live, and how a copy of them is written and verified.

A checkpoint saved by oarlock.distributed.resilience.save(state_dict, path, step) is a FlexCheckpoint
whose unique id is the step, spread over one directory per rank, each standing for that rank's local disk:

    path/rank{r}/{r}_{step}.safetensors   rank r's data file (FlexCheckpoint's name)
    path/rank0/{step}.metadata            the coordinator's metadata
    path/rank{r}/{step}.rng.json          rank r's random generators (oarlock's, numpy's, Python's)
    path/rank{r}/{step}.manifest.json     every file of the checkpoint: owner rank, size, SHA-256

The manifest is written last and is the same on every rank. A copy of rank r's files (a *replica*) has
the same file names plus the manifest, so any directory holding them is a source a restore can read:
the buddy's memory store (recovery_replicas), a mirror directory, or the rank's own directory.
Every file is verified against the manifest's SHA-256 before it is used.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil

MANIFEST = ".manifest.json"
RNG = ".rng.json"
_STEP = re.compile(r"^(?:\d+_)?(\d+)\.")   # "3_40.safetensors", "40.metadata", "40.rng.json" -> 40


def rank_dir(path: str, rank: int) -> str:
    """The directory standing for rank `rank`'s local disk."""
    return os.path.join(path, f"rank{rank}")


def manifest_name(step: int) -> str:
    return f"{step}{MANIFEST}"


def rng_name(rank: int, step: int) -> str:
    return f"{rank}_{step}{RNG}"


def file_step(name: str) -> int | None:
    match = _STEP.match(name)
    return int(match.group(1)) if match else None


def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_atomic(path: str, data: bytes) -> None:
    """Write `path` through a temporary file renamed into place (fsynced): a reader sees all or nothing."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def copy_atomic(source: str, target: str) -> None:
    tmp = f"{target}.{os.getpid()}.tmp"
    shutil.copyfile(source, tmp)
    with open(tmp, "rb+") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, target)


def write_manifest(directory: str, manifest: dict) -> None:
    write_atomic(os.path.join(directory, manifest_name(manifest["step"])),
                 json.dumps(manifest, sort_keys=True).encode())


def read_manifest(path: str) -> dict | None:
    """The manifest at `path`, or None when it is missing or not a manifest (a damaged one is no source)."""
    try:
        with open(path, "rb") as fh:
            data = json.loads(fh.read())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("files"), dict) or not isinstance(data.get("step"), int):
        return None
    return data


def manifests_in(directory: str) -> dict:
    """{step: manifest} of the complete copies (manifest present and readable) in `directory`."""
    found = {}
    try:
        names = os.listdir(directory)
    except OSError:
        return found
    for name in names:
        if name.endswith(MANIFEST) and (manifest := read_manifest(os.path.join(directory, name))) is not None:
            found[manifest["step"]] = manifest
    return found


def prune(directory: str, keep_steps: set) -> None:
    """Remove the checkpoint files of every step of `directory` not in `keep_steps` (manifests first, so a
    half-removed step is never taken for a complete one)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    old = [name for name in names if (step := file_step(name)) is not None and step not in keep_steps]
    for name in sorted(old, key=lambda item: not item.endswith(MANIFEST)):
        try:
            os.remove(os.path.join(directory, name))
        except OSError:
            pass
