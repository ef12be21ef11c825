"""CUDA views of pinned host memory, so that one GPU kernel can gather or scatter CPU blocks.

A copy engine (DMA) moves one contiguous range per ``cudaMemcpyAsync``; a job of scattered CPU
blocks is then one call per block and per layer, and at a few microseconds of launch cost each,
small blocks never come near the bus's bandwidth. With unified virtual addressing every pinned
(page-locked, ``cudaHostAlloc``) host buffer is also addressable from the GPU at the same
address, so a CUDA tensor *aliasing* the pinned CPU tier lets ``index_select`` / ``index_copy_``
read or write all of a job's scattered CPU rows in one kernel per layer, over the bus. vLLM does
the same with a C++ op (``get_cuda_view_from_cpu_tensor``); here torch's own
``__cuda_array_interface__`` import makes the alias, so no extension is needed.
"""

from __future__ import annotations

from typing import Any

import torch


class _PinnedBuffer:
    """Describes a pinned CPU tensor's bytes as CUDA memory (``__cuda_array_interface__``, v3).

    Holds the tensor: torch keeps this object alive as long as the CUDA view, so the host memory
    cannot be freed under it."""

    def __init__(self, host: torch.Tensor) -> None:
        self.host = host
        nbytes = host.numel() * host.element_size()
        self.__cuda_array_interface__: dict[str, Any] = {
            "shape": (nbytes,),
            "typestr": "|u1",
            "data": (host.data_ptr(), False),
            "strides": None,
            "version": 3,
        }


def device_view(host: torch.Tensor, device: torch.device) -> torch.Tensor | None:
    """A CUDA tensor on ``device`` sharing ``host``'s memory, same dtype and shape; None where
    ``host`` is not a contiguous pinned CPU tensor or torch or the driver will not alias it (the
    caller then copies through the copy engines instead)."""
    if device.type != "cuda" or host.device.type != "cpu" or not host.is_contiguous() or host.numel() == 0:
        return None
    if not host.is_pinned():
        return None
    try:
        raw = torch.as_tensor(_PinnedBuffer(host), device=device)
    except (RuntimeError, TypeError, ValueError):
        return None
    # as_tensor copies rather than aliases when it cannot place the pointer on ``device``; a copy
    # would silently drop every write, so only a true alias is accepted.
    if raw.device != device or raw.data_ptr() != host.data_ptr():
        return None
    return raw.view(host.dtype).view(host.shape)
