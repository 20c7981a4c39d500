"""Damage for the FlexCheckpoint fault tests and their MPI job script: bit flips spread over a file
(its header region included), and the exact bits of target tensors, to tell "left as it was" from
"partly overwritten"."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import numpy as np

import oarlock.distributed as dist

FLIPS = 25   # per file
HEADER_FLIPS = 9   # of them, in the header region (safetensors' JSON header, the pickle's opening records)


def header_bytes(path: Path) -> int:
    """The size of a data file's header region: safetensors' size field and JSON header; for a pickle
    (.distcp) the opcodes before the first tensor's bytes, about the first 80 bytes."""
    if path.suffix == ".safetensors":
        return 8 + int.from_bytes(path.read_bytes()[:8], "little")
    return 80


def flip_points(path: Path) -> list:
    """FLIPS (offset, bit) pairs: HEADER_FLIPS spread over the header region, the rest over the remainder."""
    size, head = path.stat().st_size, header_bytes(path)
    offsets = [*np.linspace(0, head - 1, HEADER_FLIPS).astype(int),
               *np.linspace(head, size - 1, FLIPS - HEADER_FLIPS).astype(int)]
    return [(int(offset), i % 8) for i, offset in enumerate(offsets)]


@contextmanager
def flipped(path: Path, offset: int, bit: int):
    """`path` with one bit flipped, restored afterwards."""
    data = path.read_bytes()
    damaged = bytearray(data)
    damaged[offset] ^= 1 << bit
    path.write_bytes(bytes(damaged))
    try:
        yield
    finally:
        path.write_bytes(data)


def tensor_bits(state: dict) -> dict:
    """{key: the raw bytes of each tensor} of a (flat) state dict of Tensors and ShardedWeights."""
    out = {}
    for key, value in state.items():
        if isinstance(value, dist.ShardedWeight):
            value = value.local_tensor
        if hasattr(value, "numpy"):
            out[key] = np.ascontiguousarray(value.numpy()).tobytes()
    return out
