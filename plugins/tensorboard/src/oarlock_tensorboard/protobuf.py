"""The protobuf wire format, just what event files need: each function encodes one field of a message
(its key, then its value), and a message is the concatenation of its fields' bytes.

Proto3 semantics: a caller leaves out fields that hold their default, as protoc-generated code does.
"""

from __future__ import annotations

import struct

import numpy as np

_VARINT, _FIXED64, _LENGTH_DELIMITED, _FIXED32 = 0, 1, 2, 5


def varint(value: int) -> bytes:
    """Base-128 varint; negative numbers as their 64-bit two's complement (ten bytes), as int64 fields are."""
    value &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _key(field: int, wire_type: int) -> bytes:
    return varint((field << 3) | wire_type)


def int_field(field: int, value: int) -> bytes:
    """int32, int64, uint64, bool or enum."""
    return _key(field, _VARINT) + varint(int(value))


def double_field(field: int, value: float) -> bytes:
    return _key(field, _FIXED64) + struct.pack("<d", value)


def float_field(field: int, value: float) -> bytes:
    # numpy rounds to float32 (out-of-range values become inf) where struct.pack would raise
    return _key(field, _FIXED32) + np.asarray(value, dtype="<f4").tobytes()


def bytes_field(field: int, value: bytes | str) -> bytes:
    """string (UTF-8), bytes or an embedded message (its encoded fields)."""
    if isinstance(value, str):
        value = value.encode("utf-8")
    return _key(field, _LENGTH_DELIMITED) + varint(len(value)) + value


def packed_doubles_field(field: int, values) -> bytes:
    """repeated double, packed (proto3's default encoding for repeated scalars)."""
    return bytes_field(field, np.asarray(values, dtype="<f8").tobytes())


def packed_floats_field(field: int, values) -> bytes:
    """repeated float, packed."""
    return bytes_field(field, np.asarray(values, dtype="<f4").tobytes())
