"""``FileTier``: a local disk tier in one preallocated file of fixed-size slots.

Slot ``s`` starts at byte ``s * slot_bytes``: the chunk (padded to 4 KiB), then a 4 KiB trailer
holding the header (kvoffload.tiers.record: key, length, XXH3 checksum). The file is opened with
O_DIRECT where the file system allows it (page cache bypassed), else buffered. A chunk whose CPU
block is page-aligned and a whole number of 4 KiB pages (pinned CPU tensors are) moves with no
copy: ``os.pwritev([chunk, trailer])`` and ``os.preadv`` straight into the promotion's CPU block,
which is write-pending (unreadable) until the checksum matched. Other chunks go through a
per-thread aligned bounce buffer with one ``os.pwrite``/``os.preadv``. The calls run on the
driver's thread pool, never in the sans-IO core, which decides slots and eviction
(kvoffload.tiers.index.LocalTierIndex).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import threading
from collections.abc import Sequence

from kvoffload.tiers.protocol import CORRUPT, FAULT, OK, TierJob
from kvoffload.tiers.record import HEADER_BYTES, pack_header, verify_header

ALIGN = 4096


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _page_aligned(view: memoryview) -> bool:
    return not view.readonly and ctypes.addressof(ctypes.c_char.from_buffer(view)) % ALIGN == 0


class FileTier:
    """The I/O side of one file tier (thread-safe: every thread has its own aligned buffers)."""

    def __init__(self, path: str, num_slots: int, chunk_bytes: int, direct: bool = True, writer: int = 0) -> None:
        if num_slots < 1 or chunk_bytes < 1:
            raise ValueError(f"file tier {path}: num_slots and chunk_bytes must be >= 1")
        self.path = path
        self.num_slots = num_slots
        self.chunk_bytes = chunk_bytes
        self.payload_bytes = _aligned(chunk_bytes)
        self.slot_bytes = self.payload_bytes + ALIGN
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
            os.preadv(self.fd, [self._buffers()[1]], 0)
        except OSError:
            return False
        return True

    def _buffers(self) -> tuple[memoryview, memoryview]:
        """This thread's page-aligned (slot, trailer) buffers."""
        buffers = getattr(self._local, "buffers", None)
        if buffers is None:
            buffers = (memoryview(mmap.mmap(-1, self.slot_bytes)), memoryview(mmap.mmap(-1, ALIGN)))
            self._local.buffers = buffers
        return buffers

    def _zero_copy(self, view: memoryview) -> bool:
        if len(view) != self.payload_bytes:
            return False
        return not self.direct or _page_aligned(view)

    def write(self, job: TierJob, payloads: Sequence[memoryview], corrupt: Sequence[bool]) -> tuple[str, ...]:
        """Write each chunk and its header into its slot; ``corrupt`` writes the chunk with one
        byte flipped after the checksum was taken (fault injection; the CPU block is untouched)."""
        slot_buffer, trailer = self._buffers()
        results = []
        for key, slot, payload, flip in zip(job.keys, job.slots, payloads, corrupt, strict=True):
            offset = slot * self.slot_bytes
            header = pack_header(key, payload, self.writer)
            try:
                if flip or not self._zero_copy(payload):
                    slot_buffer[: len(payload)] = payload
                    if flip:
                        slot_buffer[0] ^= 0xFF
                    slot_buffer[self.payload_bytes : self.payload_bytes + HEADER_BYTES] = header
                    written = os.pwrite(self.fd, slot_buffer, offset)
                else:
                    trailer[:HEADER_BYTES] = header
                    written = os.pwritev(self.fd, [payload, trailer], offset)
                results.append(OK if written == self.slot_bytes else FAULT)
            except OSError:
                results.append(FAULT)
        return tuple(results)

    def read(self, job: TierJob, outs: Sequence[memoryview]) -> tuple[tuple[str, ...], int]:
        """Read each slot into ``outs`` (the promotion's write-pending CPU blocks) and verify key
        and checksum; a chunk that does not match is ``corrupt`` and must not be served."""
        slot_buffer, trailer = self._buffers()
        results = []
        for key, slot, out in zip(job.keys, job.slots, outs, strict=True):
            offset = slot * self.slot_bytes
            try:
                if self._zero_copy(out):
                    read = os.preadv(self.fd, [out, trailer], offset)
                    header = trailer
                else:
                    read = os.preadv(self.fd, [slot_buffer], offset)
                    out[:] = slot_buffer[: len(out)]
                    header = slot_buffer[self.payload_bytes :]
            except OSError:
                results.append(FAULT)
                continue
            results.append(verify_header(header, key, out)[0] if read == self.slot_bytes else CORRUPT)
        return tuple(results), 0

    def close(self, remove: bool = False) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if remove and os.path.exists(self.path):
            os.unlink(self.path)
