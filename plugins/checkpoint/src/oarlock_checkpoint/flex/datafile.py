"""The per-rank data files of a FlexCheckpoint: written durably with an XXH3-64 checksum per tensor,
read one tensor at a time.

"safetensors" files (the default) let a reader fetch one tensor's bytes
without touching the rest; "pickle" files (Paddle's .distcp, safetensors=False)
are read whole on first use. Checksums are XXH3-64 (about 20 GB/s, against
4 GB/s for zlib's CRC-32, so verifying costs little next to reading), computed
beside the writing, piece by piece (an async save's live source may change once
its piece is written: see cow.py). While writing, the kernel is asked to start
writing each chunk back to the disk (Linux sync_file_range), so the fsync at the
end has little left to do.
"""

from __future__ import annotations

import ctypes
import os

import numpy as np
import xxhash

from oarlock_checkpoint import pickle_format, safetensors
from oarlock_checkpoint._arrays import OARLOCK_NAME
from oarlock_checkpoint._files import atomic_write
from oarlock_checkpoint.flex.threads import Beside

FORMATS = {"safetensors": ".safetensors", "pickle": ".distcp"}
CHECKSUM = "xxh3-64"
_CHUNK = 64 << 20   # bytes per write call, each followed by a writeback request
_SYNC_FILE_RANGE_WRITE = 2
_HASH_ASIDE = 1 << 20   # bytes: smaller pieces are hashed in the writing thread


def durable() -> bool:
    """fsync data and metadata (the default). OARLOCK_CHECKPOINT_FSYNC=0 skips it: a killed process
    still never leaves a complete-looking partial checkpoint (renames are atomic), but a power loss
    or kernel crash may."""
    return os.environ.get("OARLOCK_CHECKPOINT_FSYNC", "1") != "0"


def _writeback_starter():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        start = libc.sync_file_range
    except (OSError, AttributeError):   # not Linux: the final fsync does all the work
        return lambda fd, offset, length: None
    start.argtypes = (ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint)
    return lambda fd, offset, length: start(fd, offset, length, _SYNC_FILE_RANGE_WRITE)


_start_writeback = _writeback_starter()


def raw_bytes(array: np.ndarray) -> np.ndarray:
    """The C-order bytes of a C-contiguous array as a uint8 array (no copy)."""
    return array.reshape(-1).view(np.uint8)


def checksum(array: np.ndarray) -> str:
    return xxhash.xxh3_64_hexdigest(raw_bytes(array))


def write_data_file(path, arrays: dict, data_format: str) -> dict:
    """Write {key: values} to `path` (temporary name, fsync, rename) and return {key: checksum hex} of
    each tensor's bytes. A value is a C-contiguous numpy array, or a live source (cow.Source: dtype,
    shape and nbytes like an array, stream(consume) handing over its bytes piece by piece, whole()
    giving them as one array), whose bytes are hashed piece by piece as they are written, since they
    may not stay put after."""
    sync = durable()
    if data_format != "safetensors":   # pickled files need every array at once
        arrays = {key: value if isinstance(value, np.ndarray) else value.whole() for key, value in arrays.items()}
        with Beside() as beside:
            sums = {key: beside.start(checksum, array) for key, array in arrays.items()}
            with atomic_write(path, "save_state_dict()", durable=sync) as f:
                pickle_format.write(arrays, f)
            return {key: hashed() for key, hashed in sums.items()}
    header, layout = safetensors.encode_header(arrays, {"format": "oarlock-flexcheckpoint"})
    sums, unflushed = {}, [0]
    with Beside() as beside, atomic_write(path, "save_state_dict()", durable=sync) as f:
        f.write(len(header).to_bytes(8, "little"))
        f.write(header)
        for key in layout:
            hasher = xxhash.xxh3_64()

            def consume(piece, hasher=hasher):
                # the hash runs beside the write (xxhash releases the GIL); tiny pieces are not worth the handoff
                hashed = beside.start(hasher.update, piece) if len(piece) >= _HASH_ASIDE else hasher.update(piece)
                f.write(piece)
                unflushed[0] += len(piece)
                if sync and unflushed[0] >= _CHUNK:
                    f.flush()
                    _start_writeback(f.fileno(), 0, 0)   # 0, 0: everything written so far
                    unflushed[0] = 0
                if hashed is not None:
                    hashed()

            value = arrays[key]
            if isinstance(value, np.ndarray):
                data = raw_bytes(value)
                for start in range(0, len(data), _CHUNK):
                    consume(data[start:start + _CHUNK])
            else:
                value.stream(consume)
            sums[key] = hasher.hexdigest()
    return sums


class DataFile:
    """Reads tensors from one data file; `read` checks what it finds against what the metadata
    promised, so a file swapped or damaged under the metadata is reported, not misread."""

    def __init__(self, path: str, data_format: str):
        self.path, self.format = path, data_format
        self._entries = self._start = self._arrays = None

    def read(self, key: str, dtype: np.dtype, shape: tuple, out: np.ndarray | None = None) -> np.ndarray:
        """The tensor `key` as an array of `dtype` and `shape`, read into `out` when given (a
        C-contiguous array of that dtype and shape)."""
        if self.format == "pickle":
            return self._read_pickled(key, dtype, shape, out)
        if self._entries is None:
            with open(self.path, "rb") as f:
                self._entries, _, self._start = safetensors.read_header(f, self.path)
        entry = self._entries.get(key)
        if entry is None:
            raise ValueError(f"load_state_dict(): {self.path!r} has no tensor {key!r}, but the checkpoint's metadata "
                             f"says it does: the file was replaced or damaged")
        stored = safetensors.DTYPES.get(entry["dtype"], entry["dtype"])
        if tuple(entry["shape"]) != tuple(shape) or stored != _name(dtype):
            raise ValueError(f"load_state_dict(): {self.path!r} holds {key!r} as {stored} {entry['shape']}, but the "
                             f"metadata says {_name(dtype)} {list(shape)}: the file was replaced or damaged")
        if out is None:
            out = np.empty(shape, dtype)
        begin, end = entry["data_offsets"]
        with open(self.path, "rb") as f:
            f.seek(self._start + begin)
            if f.readinto(raw_bytes(out)) != end - begin:
                raise ValueError(f"load_state_dict(): {self.path!r} ends inside tensor {key!r}: the file is truncated")
        return out

    def _read_pickled(self, key, dtype, shape, out):
        if self._arrays is None:
            self._arrays = pickle_format.load(self.path, return_numpy=True, weights_only=True)
        array = self._arrays.get(key)
        if array is None or array.dtype != dtype or array.shape != tuple(shape):
            found = "nothing" if array is None else f"{_name(array.dtype)} {list(array.shape)}"
            raise ValueError(f"load_state_dict(): {self.path!r} holds {found} under {key!r}, but the metadata says "
                             f"{_name(dtype)} {list(shape)}: the file was replaced or damaged")
        if out is None:
            return array
        out[...] = array
        return out


def _name(dtype) -> str:
    return OARLOCK_NAME.get(np.dtype(dtype), str(dtype))


def data_file_name(rank: int, unique_id: int, data_format: str) -> str:
    return f"{rank}_{unique_id}{FORMATS[data_format]}"
