"""The CPU tier's pool in shared memory, for :class:`~kvoffload.vllm.spec.KVOffloadSpec` with tiers
(no vLLM import).

Under vLLM's ``OffloadingConnector`` the spec's manager runs in the scheduler process and its
worker in each worker process, and the connector carries nothing of the spec's own between them
but job ids and their completions. So the tier I/O runs next to the manager, and the CPU tier's
bytes come to it: each worker (tensor-parallel rank) keeps its block mover's CPU pool in a file
under ``/dev/shm`` named by the engine id and the rank, and the scheduler process maps the same
pages. The file holds a 4 KiB header (magic, rows, each layer's page bytes, and the KV cache
groups' kinds, which only the worker can know and the tiers' namespace names), then each layer's
``rows x page`` bytes, each layer starting on a page boundary.

The worker creates the file (``O_EXCL``: never another engine's); the scheduler opens and then
unlinks it, so the pages live exactly as long as both mappings, and nothing is left in /dev/shm
after a clean start. A worker that stops before the scheduler opened its pool unlinks it itself.
"""

from __future__ import annotations

import json
import mmap
import os
import re
import tempfile
from dataclasses import dataclass

import torch

from kvoffload.vllm.settings import ConfigError

MAGIC = b"KVOPOOL1"
HEADER = 4096
ALIGN = 4096


def pool_path(engine_id: str, rank: int) -> str:
    """The shared-memory file of rank ``rank``'s CPU pool in engine ``engine_id``."""
    directory = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    safe_id = re.sub(r"[^A-Za-z0-9_.-]", "_", engine_id)
    return os.path.join(directory, f"kvoffload-pool-{safe_id}-rank{rank}")


def _offsets(pages: list[int], rows: int) -> list[int]:
    offsets, at = [], HEADER
    for page in pages:
        offsets.append(at)
        at += -(-(page * rows) // ALIGN) * ALIGN
    return [*offsets, at]


@dataclass
class SharedPool:
    """One rank's CPU pool: per layer a ``(rows, page)`` int8 tensor over the shared pages."""

    path: str
    layers: list[torch.Tensor]
    mapping: mmap.mmap
    # Each KV cache group's kind, in group order, as the worker found them.
    group_kinds: tuple[str, ...] = ()

    def unlink(self) -> None:
        """Remove the file name (the pages stay while a mapping holds them)."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            return


def _views(mapping: mmap.mmap, pages: list[int], rows: int) -> list[torch.Tensor]:
    offsets = _offsets(pages, rows)
    return [
        torch.frombuffer(mapping, dtype=torch.int8, count=page * rows, offset=offset).view(rows, page)
        for page, offset in zip(pages, offsets, strict=False)
    ]


def create_pool(path: str, pages: list[int], rows: int, group_kinds: tuple[str, ...] = ()) -> SharedPool:
    """A new pool of ``rows`` blocks per layer (the worker side); ConfigError if it cannot be made."""
    size = _offsets(pages, rows)[-1]
    header = json.dumps({"rows": rows, "pages": pages, "groups": list(group_kinds)}).encode()
    if len(MAGIC) + 4 + len(header) > HEADER:
        raise ConfigError(f"KVOffloadSpec: {len(pages)} KV layers do not fit the shared pool's header")
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as error:
        raise ConfigError(f"KVOffloadSpec: cannot create the shared CPU pool {path}: {error.strerror}") from None
    try:
        # Reserved now, so a full /dev/shm (Docker's default is 64 MiB) stops the engine at start
        # instead of a SIGBUS when the pool fills.
        os.posix_fallocate(descriptor, 0, size)
        mapping = mmap.mmap(descriptor, size)
    except OSError as error:
        os.close(descriptor)
        os.unlink(path)
        raise ConfigError(
            f"KVOffloadSpec: cannot reserve {size} bytes for the shared CPU pool {path} ({error.strerror}); "
            f"make {os.path.dirname(path)} larger or lower num_cpu_blocks"
        ) from None
    os.close(descriptor)
    mapping[: len(MAGIC) + 4 + len(header)] = MAGIC + len(header).to_bytes(4, "little") + header
    return SharedPool(path, _views(mapping, pages, rows), mapping, group_kinds)


def open_pool(path: str) -> SharedPool:
    """The pool a worker created (the scheduler side); ConfigError naming the file if it is not one."""
    try:
        descriptor = os.open(path, os.O_RDWR)
    except OSError as error:
        raise ConfigError(
            f"KVOffloadSpec: the worker's shared CPU pool {path} cannot be opened ({error.strerror}); "
            "tiers behind KVOffloadSpec need the scheduler and every worker on one host"
        ) from None
    try:
        size = os.fstat(descriptor).st_size
        if size < HEADER:
            raise ConfigError(f"KVOffloadSpec: {path} is not a kvoffload CPU pool ({size} bytes)")
        mapping = mmap.mmap(descriptor, size)
    finally:
        os.close(descriptor)
    length = int.from_bytes(mapping[len(MAGIC) : len(MAGIC) + 4], "little")
    if mapping[: len(MAGIC)] != MAGIC or length > HEADER:
        raise ConfigError(f"KVOffloadSpec: {path} is not a kvoffload CPU pool")
    header = json.loads(mapping[len(MAGIC) + 4 : len(MAGIC) + 4 + length])
    pages, rows = [int(page) for page in header["pages"]], int(header["rows"])
    if _offsets(pages, rows)[-1] != len(mapping):
        raise ConfigError(f"KVOffloadSpec: {path} holds {len(mapping)} bytes, its header describes another size")
    return SharedPool(path, _views(mapping, pages, rows), mapping, tuple(str(kind) for kind in header["groups"]))
