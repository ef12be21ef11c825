"""CPU memory for KV blocks backed by transparent huge pages (THP) where the kernel offers them.

A scattered block copy on the CPU is bound by address translation, not by the copy loop: every
block row starts at a random address, so nearly every row costs a TLB miss and a page walk (on a
VM, a nested one). With 2 MiB pages one TLB entry covers 512 times as much memory. Measured on a
2-core VM (64 MiB of 4 KiB blocks, one thread): huge pages on both sides cut the copy kernel's
time by 7-13%, on one side by 3-5%; the whole mover's CPU time per job by 15-20% together with
the kernel's longer prefetch (docs/benchmarks.md, the mover figures).

:func:`empty` allocates like ``torch.empty`` but asks the kernel for huge pages
(``madvise(MADV_HUGEPAGE)`` on a 2 MiB-aligned anonymous mapping, before the first touch). The
advice is advisory: where THP is off (``/sys/kernel/mm/transparent_hugepage/enabled`` says
``never``), unreadable (not Linux) or ``mmap.MADV_HUGEPAGE`` is missing, and for tensors smaller
than one huge page, it returns a plain ``torch.empty`` tensor. Either way the tensor is ordinary,
contiguous and writable; only its page size differs. An engine that allocates its KV cache on the
CPU (vLLM's CPU backend does) can allocate it with :func:`empty` so that both sides of the mover's
copies get huge pages.
"""

from __future__ import annotations

import contextlib
import math
import mmap
from pathlib import Path

import torch

__all__ = ["HUGE_PAGE_BYTES", "empty", "huge_pages_available", "thp_mode"]

HUGE_PAGE_BYTES = 2 << 20
"""The x86-64 / arm64 (4 KiB base page) transparent huge page size."""

THP_ENABLED = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def thp_mode(path: Path = THP_ENABLED) -> str | None:
    """The kernel's THP mode: ``"always"``, ``"madvise"`` or ``"never"``; None when unknown.

    The file lists the modes with the active one in brackets, e.g. ``always [madvise] never``.
    """
    try:
        text = path.read_text()
    except OSError:
        return None
    start, stop = text.find("["), text.find("]")
    return text[start + 1 : stop] if 0 <= start < stop else None


def huge_pages_available() -> bool:
    """Whether :func:`empty` can ask for huge pages here (THP ``always`` or ``madvise``)."""
    return hasattr(mmap, "MADV_HUGEPAGE") and thp_mode() in ("always", "madvise")


def empty(shape: tuple[int, ...] | torch.Size, dtype: torch.dtype, huge_pages: bool = True) -> torch.Tensor:
    """An uninitialised contiguous CPU tensor, on transparent huge pages where available.

    Args:
        shape: the tensor's shape.
        dtype: its element type.
        huge_pages: False allocates a plain ``torch.empty`` tensor (what the fallback does).

    The mapping is rounded up to whole huge pages and starts on a 2 MiB boundary (the kernel only
    backs aligned 2 MiB ranges with a huge page); it is unmapped when the last tensor viewing it
    is freed. Memory is committed on first touch, as with ``torch.empty``.
    """
    nbytes = math.prod(shape) * dtype.itemsize
    if not huge_pages or nbytes < HUGE_PAGE_BYTES or not huge_pages_available():
        return torch.empty(shape, dtype=dtype)
    length = -(-nbytes // HUGE_PAGE_BYTES) * HUGE_PAGE_BYTES
    mapping = mmap.mmap(-1, length + HUGE_PAGE_BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    # frombuffer holds a reference to the mapping for as long as any view of it lives.
    raw = torch.frombuffer(mapping, dtype=torch.uint8)
    offset = -raw.data_ptr() % HUGE_PAGE_BYTES
    with contextlib.suppress(OSError):  # e.g. a kernel built without THP: small pages, same bytes
        mapping.madvise(mmap.MADV_HUGEPAGE, offset, length)
    return raw[offset : offset + nbytes].view(dtype).view(shape)
