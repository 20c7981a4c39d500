"""The per-rank data files of a FlexCheckpoint: written durably with an XXH3-64 checksum per tensor,
read one tensor at a time, checked as read: any damage (a bad header, a pickle that does not
unpickle, a tensor of the wrong dtype or shape, a checksum mismatch) is a DamagedFile naming the file.

"safetensors" files (the default) let a reader fetch one tensor's bytes
without touching the rest; "pickle" files (.distcp, safetensors=False)
are read whole on first use. "paddle" files are Paddle 3.2's own .distcp
(paddle.save of the rank's state dict: Paddle's pickle layout, bfloat16 as
uint16 bits, float8 as int8 bits; or a safetensors file under that name),
written without checksums in the file, read as Paddle's metadata describes them.
Checksums are XXH3-64 (about 20 GB/s, against
4 GB/s for zlib's CRC-32, so verifying costs little next to reading), computed
beside the writing, piece by piece (an async save's live source may change once
its piece is written: see cow.py). While writing, the kernel is asked to start
writing each chunk back to the disk (Linux sync_file_range), so the fsync at the
end has little left to do.
"""

from __future__ import annotations

import ctypes
import os
import pickle

import numpy as np
import xxhash

from oarlock_checkpoint import pickle_format, safetensors
from oarlock_checkpoint._arrays import NUMPY_DTYPE, OARLOCK_NAME
from oarlock_checkpoint.paddle_layout import NAME_TABLE
from oarlock_checkpoint._files import atomic_write
from oarlock_checkpoint.flex.threads import Beside

FORMATS = {"safetensors": ".safetensors", "pickle": ".distcp", "paddle": ".distcp"}
# Paddle's numpy form of the dtypes numpy itself lacks (paddle_save.numpy_form): read back as the metadata says
_PADDLE_BITS = {NUMPY_DTYPE["bfloat16"]: np.dtype(np.uint16), NUMPY_DTYPE["float8_e4m3fn"]: np.dtype(np.int8),
                NUMPY_DTYPE["float8_e5m2"]: np.dtype(np.int8)}
CHECKSUM = "xxh3-64"
_FORMAT = "oarlock-flexcheckpoint"   # in the __metadata__ of a safetensors data file
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


def _paddle_payload(arrays: dict, names: dict) -> dict:
    """paddle.save's state-dict layout of {key: array}: Paddle's numpy forms, then the name table."""
    payload = {key: array.view(_PADDLE_BITS.get(array.dtype, array.dtype)) for key, array in arrays.items()}
    payload[NAME_TABLE] = {key: names.get(key) or f"generated_tensor_{i}" for i, key in enumerate(arrays)}
    return payload


def write_data_file(path, arrays: dict, data_format: str, names: dict | None = None) -> dict:
    """Write {key: values} to `path` (temporary name, fsync, rename) and return {key: checksum hex} of
    each tensor's bytes. A value is a C-contiguous numpy array, or a live source (cow.Source: dtype,
    shape and nbytes like an array, stream(consume) handing over its bytes piece by piece, whole()
    giving them as one array), whose bytes are hashed piece by piece as they are written, since they
    may not stay put after. `names` gives the Tensor names Paddle's files list beside the arrays
    ("paddle" format)."""
    sync = durable()
    if data_format != "safetensors":   # pickled files need every array at once
        arrays = {key: value if isinstance(value, np.ndarray) else value.whole() for key, value in arrays.items()}
        with Beside() as beside:
            sums = {key: beside.start(checksum, array) for key, array in arrays.items()}
            with atomic_write(path, "save_state_dict()", durable=sync) as f:
                if data_format == "paddle":
                    pickle.dump(_paddle_payload(arrays, names or {}), f, protocol=4)   # as Paddle's _legacy_save
                else:
                    pickle_format.write(arrays, f)
            return {key: hashed() for key, hashed in sums.items()}
    header, layout = safetensors.encode_header(arrays, {"format": _FORMAT})
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


class DamagedFile(ValueError):
    """A checkpoint file that does not hold what the checkpoint says it does: damaged, truncated or
    replaced. `path` is the file; `reason` says what was found, for reports that name the file
    their own way (`oarlock checkpoint verify`)."""

    def __init__(self, message: str, path: str, reason: str):
        super().__init__(message)
        self.path, self.reason = path, reason


class DataFile:
    """Reads tensors from one data file; `read` checks what it finds against what the metadata
    promised (dtype, shape, place in the file, checksum), so a file swapped or damaged under the
    metadata raises DamagedFile naming it, never misreads. A pickle file is unpickled whole on first
    use (through the restricted unpickler) and each array is let go of once read: every tensor of a
    file is read once."""

    def __init__(self, path: str, data_format: str, where: str = "load_state_dict()", flex: bool = True):
        self.path, self.format, self.where = path, data_format, where
        self.flex = flex   # a FlexCheckpoint's own file (not a Hugging Face one): its header names the format
        self._entries = self._start = self._arrays = None
        self._broken = None   # why the header or the pickle could not be read: every later read fails alike

    def read(self, key: str, dtype: np.dtype, shape: tuple, out: np.ndarray | None = None,
             expected: str | None = None) -> np.ndarray:
        """The tensor `key` as an array of `dtype` and `shape`, read into `out` when given (a
        C-contiguous array of that dtype and shape) and checked against the checksum `expected`
        (hex) when given."""
        if self._broken is not None:
            raise self._damaged(self._broken)
        if self.format == "paddle" and self._arrays is None and self._entries is None:
            self._choose_paddle_content()
        array = self._read_pickled(key, dtype, shape, out) if self.format in ("pickle", "paddle") else \
            self._read_safetensors(key, dtype, shape, out)
        if expected is not None and (found := checksum(array)) != expected:
            raise DamagedFile(f"{self.where}: tensor {key!r} in {self.path!r} fails its {CHECKSUM} checksum (stored "
                              f"{expected}, read {found}): the file was damaged after it was saved", self.path,
                              f"stored {expected}, read {found}: the {CHECKSUM} checksum does not match (the file "
                              f"was damaged after it was saved)")
        return array

    def _choose_paddle_content(self) -> None:
        """Paddle's .distcp is a pickle, or with safetensors=True a safetensors file (no format mark)."""
        with open(self.path, "rb") as f:
            pickled = f.read(1) == b"\x80"
        if not pickled:
            self.format, self.flex = "safetensors", False

    def _damaged(self, reason: str) -> DamagedFile:
        return DamagedFile(f"{self.where}: {self.path!r} {reason}", self.path, reason)

    def _broken_by(self, reason: str) -> DamagedFile:
        self._broken = reason
        return self._damaged(reason)

    def _header(self) -> dict:
        if self._entries is None:
            with open(self.path, "rb") as f:
                try:
                    entries, metadata, self._start = safetensors.read_header(f, self.path)
                except ValueError as exc:   # safetensors names the file first; the reason is the rest
                    raise self._broken_by(str(exc).removeprefix(f"{self.path!r} ")) from None
            fmt = (metadata or {}).get("format")
            if self.flex and fmt != _FORMAT:
                raise self._broken_by(f"has format {fmt!r} in its header, not {_FORMAT!r}: the file was damaged or "
                                      f"replaced")
            self._entries = entries
        return self._entries

    def _read_safetensors(self, key, dtype, shape, out):
        entry = self._header().get(key)
        if entry is None:
            raise self._damaged(f"has no tensor {key!r}, but the checkpoint's metadata says it does: the file was "
                                f"replaced or damaged")
        stored = safetensors.DTYPES.get(entry["dtype"], entry["dtype"])
        if tuple(entry["shape"]) != tuple(shape) or stored != _name(dtype):
            raise self._damaged(f"holds {key!r} as {stored} {entry['shape']}, but the metadata says {_name(dtype)} "
                                f"{list(shape)}: the file was replaced or damaged")
        if out is None:
            out = np.empty(shape, dtype)
        begin, end = entry["data_offsets"]
        with open(self.path, "rb") as f:
            f.seek(self._start + begin)
            if f.readinto(raw_bytes(out)) != end - begin:
                raise self._damaged(f"ends inside tensor {key!r}: the file is truncated")
        return out

    def _read_pickled(self, key, dtype, shape, out):
        if self._arrays is None:
            self._arrays = self._unpickle()
        array = self._arrays.pop(key, None)   # read once: let go of it
        if (self.format == "paddle" and isinstance(array, np.ndarray) and array.dtype != dtype
                and _PADDLE_BITS.get(np.dtype(dtype)) == array.dtype):
            array = array.view(dtype)   # Paddle's numpy form of bfloat16 / float8
        if not isinstance(array, np.ndarray) or array.dtype != dtype or array.shape != tuple(shape):
            found = f"{_name(array.dtype)} {list(array.shape)}" if isinstance(array, np.ndarray) else \
                "nothing" if array is None else f"a {type(array).__name__}"
            raise self._damaged(f"holds {found} under {key!r}, but the metadata says {_name(dtype)} {list(shape)}: "
                                f"the file was replaced or damaged")
        if out is None:
            return array
        out[...] = array
        return out

    def _unpickle(self) -> dict:
        try:   # weights_only: safe_pickle's restricted unpickler, which builds data and runs nothing
            arrays = pickle_format.load(self.path, return_numpy=True, weights_only=True)
        except OSError:   # unreadable (missing, no permission): not damage, and says so itself
            raise
        except Exception as exc:   # UnpicklingError (UnsafePickleError included), or a MemoryError from a
            # damaged length: every one means these bytes are not the data file that was saved
            detail = str(exc).removeprefix(f"load(): {self.path!r}: ")   # this error names the file already
            if not isinstance(exc, pickle.UnpicklingError):
                detail = f"{type(exc).__name__}: {detail}; the file is damaged"
            raise self._broken_by(f"cannot be unpickled: {detail}") from None
        if not isinstance(arrays, dict):
            raise self._broken_by(f"holds a pickled {type(arrays).__name__}, not the dict of arrays of a data file: "
                                  f"the file is damaged or not a FlexCheckpoint data file")
        return arrays


def _name(dtype) -> str:
    return OARLOCK_NAME.get(np.dtype(dtype), str(dtype))


def data_file_name(rank: int, unique_id: int, data_format: str) -> str:
    return f"{rank}_{unique_id}{FORMATS[data_format]}"
