"""The "safetensors" checkpoint format (.safetensors), written and read here without the
safetensors library.

Layout of a file: an 8-byte little-endian unsigned header size N; N bytes of
UTF-8 JSON mapping each tensor name to {"dtype", "shape", "data_offsets":
[begin, end]} (offsets into the data area), plus an optional "__metadata__"
map of str to str; the JSON is padded with spaces to a multiple of 8 bytes;
then the data area: each tensor's raw little-endian bytes, C order, packed
with no gaps. We lay tensors out by decreasing item size so each starts
aligned to its item size, and keep the caller's key order in the header.

A file holds a flat dict of str -> tensor and no code, so loading an
untrusted file is safe. The reader checks the header (sizes, offsets that
tile the data area exactly, known dtypes) before reading any data.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Mapping

import numpy as np

from oarlock import Tensor
from oarlock_checkpoint._arrays import NUMPY_DTYPE, OARLOCK_NAME, cpu_tensor, from_little_endian, host_array
from oarlock_checkpoint._arrays import little_endian_bytes
from oarlock_checkpoint._files import atomic_write, reject_unknown_options

__all__ = ["save_file", "load_file", "load_metadata", "save", "load", "SUFFIXES", "DTYPES"]

SUFFIXES = (".safetensors",)
# safetensors dtype -> oarlock dtype name. (safetensors has no complex128: saving one is an error.)
DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
          "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "I64": "int64", "I32": "int32",
          "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool", "C64": "complex64"}
# dtypes oarlock has no Tensor dtype for: numpy arrays only (save from numpy, load with return_numpy=True)
_NUMPY_ONLY = {"U16": np.dtype(np.uint16), "U32": np.dtype(np.uint32), "U64": np.dtype(np.uint64)}
_TO_NUMPY = {**{code: NUMPY_DTYPE[name] for code, name in DTYPES.items()}, **_NUMPY_ONLY}
_FROM_NUMPY = {dtype: code for code, dtype in _TO_NUMPY.items()}
_METADATA = "__metadata__"
_MAX_HEADER = 100 * 1024 * 1024  # the safetensors library's own limit
_ALIGN = 8


# -- writing ----------------------------------------------------------------------------------------
def host_arrays(tensors, where: str) -> dict[str, np.ndarray]:
    if not isinstance(tensors, Mapping):
        raise TypeError(f"{where}: safetensors holds a flat dict of str -> Tensor (or numpy array), got "
                        f"{type(tensors).__name__}; save other objects with the pickle format (a .pdparams path)")
    arrays = {}
    for key, value in tensors.items():
        if not isinstance(key, str) or key == _METADATA:
            raise TypeError(f"{where}: every key must be a str other than {_METADATA!r}, got {key!r}")
        if not isinstance(value, (Tensor, np.ndarray)):
            nested = " (safetensors holds a flat dict of tensors: flatten nested containers into " \
                     "'a.b'-style keys, or use the pickle format)" if isinstance(value, (Mapping, list, tuple)) else ""
            raise TypeError(f"{where}: the value for key {key!r} must be a Tensor or numpy array, got "
                            f"{type(value).__name__}{nested}")
        array = host_array(value)
        if array.dtype not in _FROM_NUMPY:
            name = OARLOCK_NAME.get(array.dtype, str(array.dtype))
            raise TypeError(f"{where}: the tensor {key!r} has dtype {name}, which safetensors cannot store; "
                            f"it stores {', '.join(DTYPES.values())} (and uint16/uint32/uint64 numpy arrays)")
        arrays[key] = array
    return arrays


def _check_metadata(metadata, where: str):
    if metadata is None:
        return None
    if not isinstance(metadata, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                                    for k, v in metadata.items()):
        raise TypeError(f"{where}: metadata must be a dict of str -> str (or None), got {metadata!r:.120}")
    return dict(metadata)


def encode_header(arrays: dict[str, np.ndarray], metadata) -> tuple[bytes, list[str]]:
    """The padded JSON header and the order of the tensors in the data area."""
    layout = sorted(arrays, key=lambda k: -arrays[k].dtype.itemsize)  # stable: equal sizes keep key order
    offsets, position = {}, 0
    for key in layout:
        offsets[key] = [position, position + arrays[key].nbytes]
        position += arrays[key].nbytes
    header = {} if metadata is None else {_METADATA: metadata}
    for key, array in arrays.items():
        header[key] = {"dtype": _FROM_NUMPY[array.dtype], "shape": list(array.shape), "data_offsets": offsets[key]}
    encoded = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return encoded + b" " * (-len(encoded) % _ALIGN), layout


def save_file(tensors, filename, metadata=None, durable: bool = False) -> None:
    """Write a dict of str -> Tensor or numpy array to `filename`, with optional str -> str metadata.
    durable=True fsyncs the file and its directory before returning."""
    where = "safetensors.save_file()"
    arrays = host_arrays(tensors, where)
    header, layout = encode_header(arrays, _check_metadata(metadata, where))
    with atomic_write(filename, where, durable) as f:
        f.write(struct.pack("<Q", len(header)))
        f.write(header)
        for key in layout:
            f.write(little_endian_bytes(arrays[key]))


# -- reading ----------------------------------------------------------------------------------------
def _bad(path, why: str) -> ValueError:
    return ValueError(f"{path!r} is not a valid safetensors file: {why}")


def read_header(f, path) -> tuple[dict, dict | None, int]:
    """(entries, metadata, start of the data area), checked against the file size."""
    size = os.fstat(f.fileno()).st_size
    raw = f.read(8)
    if len(raw) < 8:
        raise _bad(path, f"it has {size} bytes, fewer than the 8-byte header size")
    n = struct.unpack("<Q", raw)[0]
    if n > min(_MAX_HEADER, size - 8):
        raise _bad(path, f"the header size field says {n} bytes, but the file has {size - 8} bytes after it")
    try:
        header = json.loads(f.read(n).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _bad(path, f"the header is not UTF-8 JSON ({exc})") from None
    if not isinstance(header, dict):
        raise _bad(path, f"the header is a JSON {type(header).__name__}, not an object")
    metadata = header.pop(_METADATA, None)
    if metadata is not None and not (isinstance(metadata, dict) and
                                     all(isinstance(v, str) for v in metadata.values())):
        raise _bad(path, f"{_METADATA} must map str to str, got {metadata!r:.120}")
    _check_entries(header, size - 8 - n, path)
    return header, metadata, 8 + n


def _check_entries(entries: dict, data_size: int, path) -> None:
    spans = []
    for key, entry in entries.items():
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
            raise _bad(path, f"the entry for {key!r} must have exactly dtype, shape and data_offsets, "
                             f"got {entry!r:.120}")
        code, shape, span = entry["dtype"], entry["shape"], entry["data_offsets"]
        if code not in _TO_NUMPY:
            raise _bad(path, f"tensor {key!r} has dtype {code!r}; this reader knows {', '.join(_TO_NUMPY)}")
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            raise _bad(path, f"tensor {key!r} has shape {shape!r}; a shape is a list of non-negative ints")
        if not (isinstance(span, list) and len(span) == 2 and all(type(o) is int for o in span)):
            raise _bad(path, f"tensor {key!r} has data_offsets {span!r}; expected [begin, end]")
        expected = math.prod(shape) * _TO_NUMPY[code].itemsize
        if span[1] - span[0] != expected:
            raise _bad(path, f"tensor {key!r} spans {span[1] - span[0]} bytes, but dtype {code} and shape {shape} "
                             f"need {expected}")
        spans.append((span[0], span[1], key))
    position = 0
    for begin, end, key in sorted(spans):
        if begin != position:
            raise _bad(path, f"tensor {key!r} starts at byte {begin} of the data area, expected {position} "
                             f"(tensors must tile the data area without gaps or overlaps)")
        position = end
    if position != data_size:
        raise _bad(path, f"the tensors cover {position} bytes but the data area has {data_size}")


def _read_entry(f, start: int, key: str, entry: dict, return_numpy: bool, path):
    code = entry["dtype"]
    if not return_numpy and code in _NUMPY_ONLY:
        raise TypeError(f"safetensors load: tensor {key!r} in {path!r} has dtype {code}, which oarlock Tensors do "
                        f"not have; load with return_numpy=True to get numpy arrays")
    begin, end = entry["data_offsets"]
    buffer = np.empty(end - begin, dtype=np.uint8)  # writable, so the array needs no extra copy
    f.seek(start + begin)
    if f.readinto(buffer) != end - begin:
        raise _bad(path, f"the data of tensor {key!r} is cut short")
    array = from_little_endian(buffer, _TO_NUMPY[code], entry["shape"])
    return array if return_numpy else cpu_tensor(array)


def load_file(filename, return_numpy: bool = False) -> dict:
    """The tensors of a safetensors file, in header order: cpu Tensors, or numpy arrays with
    return_numpy=True."""
    path = os.fspath(filename)
    with open(path, "rb") as f:
        entries, _, start = read_header(f, path)
        return {key: _read_entry(f, start, key, entry, return_numpy, path) for key, entry in entries.items()}


def load_metadata(filename) -> dict:
    """The "__metadata__" map of a safetensors file ({} when it has none)."""
    path = os.fspath(filename)
    with open(path, "rb") as f:
        return read_header(f, path)[1] or {}


# -- the CheckpointFormat entry points (oarlock.save / oarlock.load) -------------------------------------
def _paddle_flag(safetensors, where: str) -> None:
    """Paddle's save/load option safetensors=True says what this format is anyway; False contradicts it."""
    if safetensors is not True:
        raise ValueError(f"{where}: safetensors={safetensors!r} for a path the safetensors format handles; pass "
                         f"format='pickle' for a pickle file")


def save(obj, path, metadata=None, safetensors=True, **options) -> None:
    """`oarlock.save(state_dict, "m.safetensors", metadata=None)`: a flat dict of str -> Tensor/array."""
    reject_unknown_options("save() to safetensors", options, ["metadata", "safetensors"])
    _paddle_flag(safetensors, "save() to safetensors")
    save_file(obj, path, metadata)


def load(path, return_numpy: bool = False, safetensors=True, **options) -> dict:
    """`oarlock.load("m.safetensors", return_numpy=False)`: a dict of Tensors (or numpy arrays)."""
    reject_unknown_options("load() from safetensors", options, ["return_numpy", "safetensors"])
    _paddle_flag(safetensors, "load() from safetensors")
    return load_file(path, return_numpy)
