"""TFRecord framing, the container of TensorBoard event files: each record is

    uint64 length | uint32 masked CRC-32C of the length | data | uint32 masked CRC-32C of the data

all little-endian. Readers check both CRCs, so a torn write at the end of a file is detected.
"""

from __future__ import annotations

import struct

from oarlock_tensorboard.crc32c import masked_crc32c


def frame(data: bytes) -> bytes:
    """One record holding `data`."""
    length = struct.pack("<Q", len(data))
    return b"".join((length, struct.pack("<I", masked_crc32c(length)), data,
                     struct.pack("<I", masked_crc32c(data))))
