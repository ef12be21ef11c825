"""vLLM's byte-string keys and block hashes as kvoffload's integer keys, and back.

vLLM names an offloaded chunk by ``OffloadKey`` bytes (block hash + 4-byte group index) and a
block by its hash bytes; kvoffload's manager, policies and error messages use ``int`` keys. The
translation is the big-endian integer of the bytes, which is exact: the way back needs only the
byte length, the same for every key of one engine.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload


class KeyCodec:
    """Translates vLLM keys (bytes) to ints and back; learns the key length from the first key."""

    def __init__(self) -> None:
        self.length: int | None = None

    def to_int(self, key: bytes) -> int:
        if self.length is None:
            self.length = len(key)
        elif len(key) != self.length:
            raise ValueError(
                f"vLLM key of {len(key)} bytes ({key.hex()}), earlier keys had {self.length}: "
                "one engine must use one block-hash function"
            )
        return int.from_bytes(key, "big")

    def to_bytes(self, key: int) -> bytes:
        if self.length is None:
            raise ValueError(f"key {key:#x} translated back before any vLLM key was seen")
        return key.to_bytes(self.length, "big")


class HashesAsInts(Sequence[int]):
    """A live view of a vLLM request's ``block_hashes`` (bytes) as ints, for kvoffload's scheduler.

    A view rather than a copy: vLLM appends hashes as the request grows, and the scheduler reads
    only the few it needs per step."""

    def __init__(self, hashes: Sequence[bytes]) -> None:
        self._hashes = hashes

    def __len__(self) -> int:
        return len(self._hashes)

    @overload
    def __getitem__(self, index: int) -> int: ...

    @overload
    def __getitem__(self, index: slice) -> list[int]: ...

    def __getitem__(self, index: int | slice) -> int | list[int]:
        if isinstance(index, slice):
            return [int.from_bytes(h, "big") for h in self._hashes[index]]
        return int.from_bytes(self._hashes[index], "big")

    def __iter__(self) -> Iterator[int]:
        return (int.from_bytes(h, "big") for h in self._hashes)
