"""The on-tier record of one chunk: a header (magic, writer id, the full key, payload length and
a checksum), then the chunk.

The checksum is XXH3-128 of the chunk's *scope* (its namespace and cache salt, see
:class:`Namespace`), its full key and its payload. A record read back under another key (even one
that shares its low 64 bits), another model, layout, rank or salt, a torn write or a flipped byte
does not verify: it is ``corrupt`` and never served. The header also carries the key bytes
themselves, so a mismatched key is found without hashing. (XXH3 runs at memory speed; CRC-32
from zlib halved the tiers' throughput.)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import xxhash

from kvoffload.offload.types import OffloadKey
from kvoffload.tiers.protocol import CORRUPT, OK, TierConfigError

MAGIC = b"KVT3"
# magic, writer id, key length, reserved (0), payload length, XXH3-128 digest; the key bytes follow.
FIXED_HEADER = struct.Struct("<4sIHHQ16s")
SCOPE_VERSION = b"3"


def key_bytes(key: OffloadKey) -> bytes:
    """The full key as big-endian signed bytes (one more byte than its magnitude needs, so that
    every int has exactly one spelling)."""
    return key.to_bytes(key.bit_length() // 8 + 1, "big", signed=True)


def header_bytes(key: OffloadKey) -> int:
    """The size of ``key``'s record header."""
    return FIXED_HEADER.size + len(key_bytes(key))


def _field(part: bytes) -> bytes:
    # Length-prefixed (a netstring), so no value of one part can spell another part's boundary.
    return b"%d:%s," % (len(part), part)


@dataclass(frozen=True)
class Namespace:
    """Whose chunks these are: the model, the KV layout and the tensor-parallel rank.

    With the request's cache salt it makes a chunk's *scope* (:meth:`scope`): Redis key names start
    with it and every record's checksum covers it, so chunks of another model, layout, rank or
    tenant are never shared, and a value copied under another scope is refused on read.
    """

    model: str = "model"
    layout: str = "layout"
    rank: int = 0

    def __post_init__(self) -> None:
        for name in ("model", "layout"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise TierConfigError(f"tier namespace: {name} must be a non-empty string, got {value!r}")
        if not isinstance(self.rank, int) or isinstance(self.rank, bool) or self.rank < 0:
            raise TierConfigError(f"tier namespace: rank must be an integer >= 0, got {self.rank!r}")

    def scope(self, salt: str) -> bytes:
        """``kvoffload``, the format version, model, layout, rank and ``salt``, each length-prefixed."""
        parts = (b"kvoffload", SCOPE_VERSION, self.model.encode(), self.layout.encode(), b"tp%d" % self.rank,
                 salt.encode())
        return b"".join(_field(part) for part in parts)


def checksum(scope: bytes, raw_key: bytes, payload: bytes | memoryview) -> bytes:
    digest = xxhash.xxh3_128()
    digest.update(_field(scope) + _field(raw_key))
    digest.update(payload)
    return digest.digest()


def pack_header(scope: bytes, key: OffloadKey, payload: bytes | memoryview, writer: int) -> bytes:
    raw_key = key_bytes(key)
    fixed = FIXED_HEADER.pack(MAGIC, writer, len(raw_key), 0, len(payload), checksum(scope, raw_key, payload))
    return fixed + raw_key


def verify_header(
    header: bytes | memoryview, scope: bytes, key: OffloadKey, payload: bytes | memoryview
) -> tuple[str, int]:
    """``(OK | CORRUPT, writer id)`` for ``payload`` read back with ``header`` as ``key``'s chunk
    in ``scope``."""
    raw_key = key_bytes(key)
    if len(header) < FIXED_HEADER.size + len(raw_key):
        return CORRUPT, -1
    magic, writer, key_length, reserved, length, digest = FIXED_HEADER.unpack_from(header)
    stored_key = bytes(header[FIXED_HEADER.size : FIXED_HEADER.size + len(raw_key)])
    if magic != MAGIC or reserved or key_length != len(raw_key) or stored_key != raw_key or length != len(payload):
        return CORRUPT, writer
    return (OK if checksum(scope, raw_key, payload) == digest else CORRUPT), writer
