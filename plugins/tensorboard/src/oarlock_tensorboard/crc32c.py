"""CRC-32C (Castagnoli), the checksum of TFRecord framing, and TensorFlow's masked form of it.

google_crc32c (a C extension) is used when it is importable; otherwise a byte-at-a-time loop over a
256-entry table, fast enough for the few hundred bytes of a typical summary record.
"""

from __future__ import annotations

_POLY = 0x82F63B78  # the Castagnoli polynomial, bit-reflected
_MASK_DELTA = 0xA282EAD8


def _make_table() -> tuple:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ _POLY if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


_TABLE = _make_table()


def _crc32c_table(data: bytes) -> int:
    crc, table = 0xFFFFFFFF, _TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


try:
    from google_crc32c import value as _crc32c_native
except ImportError:  # the optional C extension is absent: the table does it
    _crc32c_native = None


def crc32c(data: bytes) -> int:
    """The CRC-32C of `data` as an unsigned 32-bit integer (crc32c(b"123456789") == 0xE3069283)."""
    return _crc32c_native(bytes(data)) if _crc32c_native is not None else _crc32c_table(data)


def masked_crc32c(data: bytes) -> int:
    """TensorFlow's masked CRC (a rotation plus a constant), so that a CRC of data that holds CRCs stays
    well distributed: what TFRecord files store."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF
