"""``FileTier``: a local disk tier in one preallocated file of fixed-size slots.

Slot ``s`` starts at byte ``s * slot_bytes``; it holds a record (kvoffload.tiers.record: header
with key and CRC-32, then the chunk) padded to a multiple of 4 KiB. The file is opened with
O_DIRECT where the file system allows it (page cache bypassed; every transfer is one aligned
buffer of a whole slot), else buffered. Writes are ``os.pwrite``, reads ``os.preadv``, both from
per-thread page-aligned buffers; the calls run on the driver's thread pool, never in the sans-IO
core, which decides slots and eviction (kvoffload.tiers.index.LocalTierIndex).
"""

from __future__ import annotations

import mmap
import os
import threading
from collections.abc import Sequence

from kvoffload.tiers.protocol import CORRUPT, FAULT, OK, TierJob
from kvoffload.tiers.record import HEADER_BYTES, pack_header, verify

ALIGN = 4096


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


class FileTier:
    """The I/O side of one file tier (thread-safe: every thread has its own aligned buffer)."""

    def __init__(self, path: str, num_slots: int, chunk_bytes: int, direct: bool = True, writer: int = 0) -> None:
        if num_slots < 1 or chunk_bytes < 1:
            raise ValueError(f"file tier {path}: num_slots and chunk_bytes must be >= 1")
        self.path = path
        self.num_slots = num_slots
        self.chunk_bytes = chunk_bytes
        self.slot_bytes = _aligned(HEADER_BYTES + chunk_bytes)
        self.writer = writer
        self.direct = False
        flags = os.O_RDWR | os.O_CREAT
        fd = -1
        if direct and hasattr(os, "O_DIRECT"):
            try:
                fd = os.open(path, flags | os.O_DIRECT, 0o600)
                self.direct = True
            except OSError:
                fd = -1
        if fd < 0:
            fd = os.open(path, flags, 0o600)
        self.fd = fd
        size = num_slots * self.slot_bytes
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError:
            os.ftruncate(fd, size)
        self._local = threading.local()
        if self.direct and not self._probe_direct():
            os.close(self.fd)
            self.fd = os.open(path, flags, 0o600)
            self.direct = False

    def _probe_direct(self) -> bool:
        # Some file systems accept O_DIRECT at open and refuse the first transfer (EINVAL).
        try:
            os.preadv(self.fd, [self._buffer()], 0)
        except OSError:
            return False
        return True

    def _buffer(self) -> mmap.mmap:
        buffer = getattr(self._local, "buffer", None)
        if buffer is None:
            buffer = mmap.mmap(-1, self.slot_bytes)  # page-aligned, as O_DIRECT needs
            self._local.buffer = buffer
        return buffer

    def write(self, job: TierJob, payloads: Sequence[memoryview], corrupt: Sequence[bool]) -> tuple[str, ...]:
        """Write each payload with its header into its slot; ``corrupt`` flips a byte after the
        checksum was computed (fault injection)."""
        buffer = self._buffer()
        view = memoryview(buffer)
        results = []
        for key, slot, payload, flip in zip(job.keys, job.slots, payloads, corrupt, strict=True):
            try:
                view[:HEADER_BYTES] = pack_header(key, payload, self.writer)
                view[HEADER_BYTES : HEADER_BYTES + len(payload)] = payload
                if flip:
                    view[HEADER_BYTES] ^= 0xFF
                written = os.pwrite(self.fd, view, slot * self.slot_bytes)
                results.append(OK if written == self.slot_bytes else FAULT)
            except OSError:
                results.append(FAULT)
        return tuple(results)

    def read(self, job: TierJob, outs: Sequence[memoryview]) -> tuple[tuple[str, ...], int]:
        """Read each slot, verify key and checksum, copy verified payloads into ``outs``."""
        buffer = self._buffer()
        view = memoryview(buffer)
        results = []
        for key, slot, out in zip(job.keys, job.slots, outs, strict=True):
            try:
                read = os.preadv(self.fd, [buffer], slot * self.slot_bytes)
            except OSError:
                results.append(FAULT)
                continue
            if read != self.slot_bytes:
                results.append(CORRUPT)
                continue
            result, _ = verify(view, key, len(out))
            if result == OK:
                out[:] = view[HEADER_BYTES : HEADER_BYTES + len(out)]
            results.append(result)
        return tuple(results), 0

    def close(self, remove: bool = False) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if remove and os.path.exists(self.path):
            os.unlink(self.path)
