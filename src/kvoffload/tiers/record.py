"""The on-tier format of one chunk: a fixed header (magic, key, writer, length, checksum) + payload.

The checksum is CRC-32 over the key and the payload, so a slot holding another key's chunk, a
torn write or a flipped byte is detected on read and reported as ``corrupt``: never served.
"""

from __future__ import annotations

import struct
import zlib

from kvoffload.offload.types import OffloadKey
from kvoffload.tiers.protocol import CORRUPT, OK

MAGIC = b"KVT1"
HEADER = struct.Struct("<4sIQQI4x")  # magic, writer id, key, payload length, crc32
HEADER_BYTES = HEADER.size
_KEY = struct.Struct("<Q")
_MASK64 = (1 << 64) - 1


def checksum(key: OffloadKey, payload: bytes | memoryview) -> int:
    return zlib.crc32(payload, zlib.crc32(_KEY.pack(key & _MASK64)))


def pack_header(key: OffloadKey, payload: bytes | memoryview, writer: int) -> bytes:
    return HEADER.pack(MAGIC, writer, key & _MASK64, len(payload), checksum(key, payload))


def verify(record: bytes | memoryview, key: OffloadKey, payload_bytes: int) -> tuple[str, int]:
    """``(OK | CORRUPT, writer id)`` for a record that should hold ``key`` with a payload of
    ``payload_bytes`` (the payload starts at ``HEADER_BYTES``)."""
    if len(record) < HEADER_BYTES + payload_bytes:
        return CORRUPT, -1
    magic, writer, stored_key, length, crc = HEADER.unpack_from(record)
    if magic != MAGIC or stored_key != key & _MASK64 or length != payload_bytes:
        return CORRUPT, writer
    payload = memoryview(record)[HEADER_BYTES : HEADER_BYTES + payload_bytes]
    return (OK if checksum(key, payload) == crc else CORRUPT), writer
