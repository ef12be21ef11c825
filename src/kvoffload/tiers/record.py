"""The on-tier header of one chunk: magic, writer id, key, payload length and a checksum.

The checksum is XXH3-64 of the payload seeded with the chunk's key, so a slot holding another
key's chunk, a torn write or a flipped byte is detected on read and reported as ``corrupt``:
never served. (XXH3 runs at memory speed; CRC-32 from zlib halved the tiers' throughput.)
"""

from __future__ import annotations

import struct

import xxhash

from kvoffload.offload.types import OffloadKey
from kvoffload.tiers.protocol import CORRUPT, OK

MAGIC = b"KVT2"
HEADER = struct.Struct("<4sIQQQ")  # magic, writer id, key, payload length, checksum
HEADER_BYTES = HEADER.size
_MASK64 = (1 << 64) - 1


def checksum(key: OffloadKey, payload: bytes | memoryview) -> int:
    return xxhash.xxh3_64_intdigest(payload, seed=key & _MASK64)


def pack_header(key: OffloadKey, payload: bytes | memoryview, writer: int) -> bytes:
    return HEADER.pack(MAGIC, writer, key & _MASK64, len(payload), checksum(key, payload))


def verify_header(header: bytes | memoryview, key: OffloadKey, payload: bytes | memoryview) -> tuple[str, int]:
    """``(OK | CORRUPT, writer id)`` for ``payload`` read back with ``header`` as ``key``'s chunk."""
    if len(header) < HEADER_BYTES:
        return CORRUPT, -1
    magic, writer, stored_key, length, digest = HEADER.unpack_from(header)
    if magic != MAGIC or stored_key != key & _MASK64 or length != len(payload):
        return CORRUPT, writer
    return (OK if checksum(key, payload) == digest else CORRUPT), writer


def verify(record: bytes | memoryview, key: OffloadKey, payload_bytes: int) -> tuple[str, int]:
    """The same for a record laid out as header then payload (the Redis value)."""
    if len(record) != HEADER_BYTES + payload_bytes:
        return CORRUPT, -1
    view = memoryview(record)
    return verify_header(view[:HEADER_BYTES], key, view[HEADER_BYTES:])
