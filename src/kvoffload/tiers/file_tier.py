"""``FileTier``: a local disk tier in one preallocated, locked file of fixed-size slots.

The file starts with a 4 KiB header page (``KVTFILE3`` and, as JSON, the model, KV layout, rank,
chunk size, slot count and this opening's generation). Slot ``s`` starts at byte
``4096 + s * slot_bytes``: the chunk (padded to 4 KiB), then a 4 KiB trailer holding the record
header (kvoffload.tiers.record: full key, length, XXH3-128 checksum over scope, key and chunk,
where the scope is the namespace, the request's cache salt and the generation).

Opening takes an exclusive ``flock`` (a second tier on the same file is refused), refuses a file
that is not a tier file or belongs to another model, layout, rank or chunk size, and refuses a
size the file system cannot hold (``posix_fallocate``; no sparse file that fills the disk later).
An opened tier starts empty: the header is rewritten with a new generation, so no record of an
earlier run verifies. The file is opened with O_DIRECT where the file system allows it (page
cache bypassed), else buffered. A chunk whose CPU block is page-aligned and a whole number of
4 KiB pages (pinned CPU tensors are) moves with no copy: ``os.pwritev([chunk, trailer])`` and
``os.preadv`` straight into the promotion's CPU block, which is write-pending (unreadable) until
the checksum matched. Other chunks go through a per-thread aligned bounce buffer. The calls run on
the driver's thread pool, never in the sans-IO core, which decides slots and eviction
(kvoffload.tiers.index.LocalTierIndex).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import mmap
import os
import secrets
import threading
from collections.abc import Sequence

from kvoffload.tiers.health import Availability
from kvoffload.tiers.protocol import CORRUPT, FAULT, OK, TierConfigError, TierJob
from kvoffload.tiers.record import Namespace, header_bytes, pack_header, verify_header

ALIGN = 4096
FILE_MAGIC = b"KVTFILE3"
# The header fields that must match for a file to be reused (the slot count may change).
IDENTITY_FIELDS = ("model", "layout", "rank", "chunk_bytes")


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _page_aligned(view: memoryview) -> bool:
    return not view.readonly and ctypes.addressof(ctypes.c_char.from_buffer(view)) % ALIGN == 0


def _positive_int(path: str, name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise TierConfigError(f"file tier {path}: {name}={value!r} must be an integer >= 1")
    return value


class FileTier:
    """The I/O side of one file tier (thread-safe: every thread has its own aligned buffers).

    Raises :class:`TierConfigError` (one line naming the file and what is wrong, nothing left
    behind) for a bad size, a file another tier holds, a file of another model, layout, rank or
    chunk size, or a size larger than the free space.
    """

    def __init__(
        self,
        path: str,
        num_slots: int,
        chunk_bytes: int,
        direct: bool = True,
        writer: int = 0,
        namespace: Namespace | None = None,
    ) -> None:
        self.path = path
        self.num_slots = _positive_int(path, "num_slots", num_slots)
        self.chunk_bytes = _positive_int(path, "chunk_bytes", chunk_bytes)
        self.namespace = namespace or Namespace()
        self.payload_bytes = _aligned(chunk_bytes)
        self.slot_bytes = self.payload_bytes + ALIGN
        self.file_bytes = ALIGN + num_slots * self.slot_bytes
        self.writer = writer
        self.generation = secrets.randbits(64)
        self.health = Availability(f"file tier {path}")
        self._local = threading.local()
        self.fd, created = self._open(direct)
        self.direct = bool(fcntl.fcntl(self.fd, fcntl.F_GETFL) & getattr(os, "O_DIRECT", 0))
        try:
            try:
                self._claim()
            except OSError as error:
                raise TierConfigError(f"file tier {path}: {error.strerror or error}") from None
        except BaseException:
            os.close(self.fd)
            self.fd = -1
            if created:
                os.unlink(path)
            raise

    def _open(self, direct: bool) -> tuple[int, bool]:
        """The file's descriptor (O_DIRECT if asked and the file system takes it) and whether
        this call created the file."""
        existed = os.path.lexists(self.path)
        flags = os.O_RDWR | os.O_CREAT
        try:
            if direct and hasattr(os, "O_DIRECT"):
                try:
                    return os.open(self.path, flags | os.O_DIRECT, 0o600), not existed
                except OSError as error:  # EINVAL: the file system refuses O_DIRECT
                    if error.errno != errno.EINVAL:
                        raise
            return os.open(self.path, flags, 0o600), not existed
        except OSError as error:
            raise TierConfigError(f"file tier {self.path}: cannot open it ({error.strerror})") from None

    def _claim(self) -> None:
        """Lock the file, check what it holds, reserve its size and write a new header."""
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise TierConfigError(
                f"file tier {self.path}: already open by another FileTier (locked); give each tier its own file"
            ) from None
        page = self._read_page()
        if os.fstat(self.fd).st_size > 0:
            self._check_existing(page)
        self._reserve()
        page = self._read_page()  # again, now that the file has its size: some file systems refuse O_DIRECT only here
        header = json.dumps(
            {"model": self.namespace.model, "layout": self.namespace.layout, "rank": self.namespace.rank,
             "chunk_bytes": self.chunk_bytes, "num_slots": self.num_slots, "generation": self.generation},
            sort_keys=True,
        ).encode()
        page[:] = bytes(ALIGN)
        page[: len(FILE_MAGIC) + len(header) + 1] = FILE_MAGIC + header + b"\n"
        if os.pwrite(self.fd, page, 0) != ALIGN:
            raise TierConfigError(f"file tier {self.path}: the header could not be written")

    def _read_page(self) -> memoryview:
        """The header page (through this thread's aligned buffer), dropping O_DIRECT if the file
        system accepted it at open but refuses the transfer (EINVAL)."""
        page = self._buffers()[1]
        try:
            count = os.preadv(self.fd, [page], 0)
        except OSError as error:
            if error.errno != errno.EINVAL or not self.direct:
                raise
            fcntl.fcntl(self.fd, fcntl.F_SETFL, fcntl.fcntl(self.fd, fcntl.F_GETFL) & ~os.O_DIRECT)
            self.direct = False
            count = os.preadv(self.fd, [page], 0)
        page[count:] = bytes(ALIGN - count)
        return page

    def _check_existing(self, page: memoryview) -> None:
        if bytes(page[: len(FILE_MAGIC)]) != FILE_MAGIC:
            raise TierConfigError(
                f"file tier {self.path}: the file exists and is not a kvoffload tier file; refusing to overwrite it"
            )
        try:
            found = json.loads(bytes(page[len(FILE_MAGIC) :]).split(b"\n", 1)[0])
        except ValueError:
            found = None
        if not isinstance(found, dict):
            raise TierConfigError(f"file tier {self.path}: its header is damaged; remove the file")
        wanted = {"model": self.namespace.model, "layout": self.namespace.layout, "rank": self.namespace.rank,
                  "chunk_bytes": self.chunk_bytes}
        mismatches = [f"{name} {found.get(name)!r} (this tier: {wanted[name]!r})" for name in IDENTITY_FIELDS
                      if found.get(name) != wanted[name]]
        if mismatches:
            raise TierConfigError(f"file tier {self.path}: the file holds {', '.join(mismatches)}; use another file")

    def _reserve(self) -> None:
        """Give the file exactly ``file_bytes`` of allocated space, or refuse."""
        status = os.fstat(self.fd)
        space = os.fstatvfs(self.fd)
        available = space.f_bavail * space.f_frsize + status.st_blocks * 512
        if self.file_bytes > available:
            raise TierConfigError(
                f"file tier {self.path}: {self.file_bytes} bytes ({self.num_slots} slots) do not fit in the "
                f"{available} bytes free on its file system"
            )
        try:
            os.posix_fallocate(self.fd, 0, self.file_bytes)
        except OSError as error:
            if error.errno == errno.ENOSPC:
                raise TierConfigError(
                    f"file tier {self.path}: no space for {self.file_bytes} bytes ({self.num_slots} slots)"
                ) from None
            if error.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
            os.ftruncate(self.fd, self.file_bytes)  # no fallocate here: the statvfs check stands in
        if status.st_size > self.file_bytes:  # fewer slots than last time
            os.ftruncate(self.fd, self.file_bytes)

    def slot_offset(self, slot: int) -> int:
        """Where slot ``slot`` starts in the file."""
        return ALIGN + slot * self.slot_bytes

    def stats(self) -> dict[str, int]:
        """Availability counters (see kvoffload.tiers.health.Availability.stats)."""
        return self.health.stats()

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

    def _scope(self, salt: str) -> bytes:
        return self.namespace.scope(salt) + self.generation.to_bytes(8, "little")

    def _fits(self, key: int, slot: int, view: memoryview) -> bool:
        """A slot this file has, a chunk of this tier's size and a key whose header fits the trailer."""
        return 0 <= slot < self.num_slots and len(view) == self.chunk_bytes and header_bytes(key) <= ALIGN

    def write(self, job: TierJob, payloads: Sequence[memoryview], corrupt: Sequence[bool]) -> tuple[str, ...]:
        """Write each chunk and its header into its slot; ``corrupt`` writes the chunk with one
        byte flipped after the checksum was taken (fault injection; the CPU block is untouched)."""
        slot_buffer, trailer = self._buffers()
        scope = self._scope(job.salt)
        results = []
        error: OSError | None = None
        for key, slot, payload, flip in zip(job.keys, job.slots, payloads, corrupt, strict=True):
            if not self._fits(key, slot, payload):
                results.append(FAULT)
                continue
            offset = self.slot_offset(slot)
            header = pack_header(scope, key, payload, self.writer)
            try:
                if flip or not self._zero_copy(payload):
                    slot_buffer[: len(payload)] = payload
                    if flip:
                        slot_buffer[0] ^= 0xFF
                    slot_buffer[self.payload_bytes : self.payload_bytes + len(header)] = header
                    written = os.pwrite(self.fd, slot_buffer, offset)
                else:
                    trailer[: len(header)] = header
                    written = os.pwritev(self.fd, [payload, trailer], offset)
            except OSError as failure:
                error = failure
                results.append(FAULT)
                continue
            results.append(OK if written == self.slot_bytes else FAULT)
        self._report(error)
        return tuple(results)

    def read(self, job: TierJob, outs: Sequence[memoryview]) -> tuple[tuple[str, ...], int]:
        """Read each slot into ``outs`` (the promotion's write-pending CPU blocks) and verify key,
        scope and checksum; a chunk that does not match is ``corrupt`` and must not be served."""
        slot_buffer, trailer = self._buffers()
        scope = self._scope(job.salt)
        results = []
        error: OSError | None = None
        for key, slot, out in zip(job.keys, job.slots, outs, strict=True):
            if not self._fits(key, slot, out):
                results.append(FAULT)
                continue
            offset = self.slot_offset(slot)
            try:
                if self._zero_copy(out):
                    read = os.preadv(self.fd, [out, trailer], offset)
                    header = trailer
                else:
                    read = os.preadv(self.fd, [slot_buffer], offset)
                    out[:] = slot_buffer[: len(out)]
                    header = slot_buffer[self.payload_bytes :]
            except OSError as failure:
                error = failure
                results.append(FAULT)
                continue
            results.append(verify_header(header, scope, key, out)[0] if read == self.slot_bytes else CORRUPT)
        self._report(error)
        return tuple(results), 0

    def _report(self, error: OSError | None) -> None:
        """One availability report per job: its first I/O error, or success."""
        if error is not None:
            self.health.failed(f"{type(error).__name__}: {error.strerror or error}")
        else:
            self.health.succeeded()

    def close(self, remove: bool = False) -> None:
        """Close the file (releasing its lock); ``remove`` deletes it too."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if remove and os.path.exists(self.path):
            os.unlink(self.path)
