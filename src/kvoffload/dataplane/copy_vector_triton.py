"""The ``vector`` copy path's kernel: ``dst[didx[i]] = src[sidx[i]]`` in one pass, 16 bytes per
thread (Triton). Triton is imported on first use, never at module import: the CPU package does
not ship it, and ``import kvoffload`` must stay fast.

One program copies one 4 KiB chunk of one row: 256 threads (8 warps) x 16 bytes. The rows are
viewed as bytes; Triton specialises pointers and the row length on divisibility by 16, so the
loads and stores of aligned rows compile to 128-bit accesses (``ld.global.v4``).
"""

from __future__ import annotations

import functools
import importlib.util
from typing import Any

import torch

__all__ = ["copy_rows", "unavailable"]

_BYTES_PER_THREAD = 16
_WARPS = 8
_CHUNK = _BYTES_PER_THREAD * 32 * _WARPS


def unavailable(device: torch.device) -> str | None:
    """None when the Triton kernel can run on ``device``, else why not (one phrase)."""
    if device.type != "cuda":
        return f"device {device} is not CUDA"
    try:
        if importlib.util.find_spec("triton") is None:
            return "triton is not installed"
    except (ImportError, ValueError):
        return "triton is not importable"
    try:
        _kernel()
    except Exception as exc:  # any failure to import or define the kernel means: use the fallback
        return f"triton kernel unavailable: {exc}"
    return None


@functools.cache
def _kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def copy_rows_kernel(src, sidx, dst, didx, row_bytes, CHUNK: tl.constexpr):
        pair = tl.program_id(0)
        chunk = tl.program_id(1)
        s = tl.load(sidx + pair).to(tl.int64)
        d = tl.load(didx + pair).to(tl.int64)
        offs = chunk.to(tl.int64) * CHUNK + tl.arange(0, CHUNK)
        mask = offs < row_bytes
        values = tl.load(src + s * row_bytes + offs, mask=mask)
        tl.store(dst + d * row_bytes + offs, values, mask=mask)

    return copy_rows_kernel


def copy_rows(src: torch.Tensor, sidx: torch.Tensor, dst: torch.Tensor, didx: torch.Tensor) -> None:
    """Launch the kernel on the current stream: row ``sidx[i]`` of ``src`` to row ``didx[i]`` of
    ``dst`` (2-D contiguous tensors with rows of one byte length; int64 indices on the device)."""
    n = int(sidx.numel())
    if n == 0:
        return
    row_bytes = src.shape[1] * src.element_size()
    grid = (n, -(-row_bytes // _CHUNK))
    _kernel()[grid](src.view(torch.uint8), sidx, dst.view(torch.uint8), didx, row_bytes, CHUNK=_CHUNK, num_warps=_WARPS)
