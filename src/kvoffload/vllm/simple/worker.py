"""vLLM's own ``SimpleCPUOffloadWorker``, copying with torch instead of CUDA streams.

Only what touches CUDA is replaced: :meth:`TorchSimpleWorker.attach` takes the GPU regions and
sizes the CPU tensors (instead of pinning memory and creating streams) on a
:class:`~kvoffload.vllm.simple.backend.LateCopyBackend`, and the worker module's ``torch`` is
:class:`CpuTorch`, which answers the CUDA calls around a launch (the compute-done event recorded on
the current stream) and passes everything else to torch. vLLM's own worker code runs unchanged:
where it launches (``start_load_kv`` and ``wait_for_save`` from 0.28, ``get_finished`` before),
its pending event indices, high-water marks, flush on preemption, and the worker metadata that
reports completed stores.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from kvoffload.vllm.simple.backend import LateCopyBackend


def cpu_block_count(kv_cache_config: Any, cpu_capacity_bytes: int) -> int:
    """The scheduler's CPU block count (``SimpleCPUOffloadScheduler._derive_cpu_config``), which the
    worker must match block for block."""
    total_bytes = kv_cache_config.kv_cache_tensors[0].size
    return max(1, kv_cache_config.num_blocks * cpu_capacity_bytes // total_bytes)


def block_regions(kv_caches: dict[str, torch.Tensor], kv_cache_config: Any) -> dict[str, torch.Tensor]:
    """Every layer's KV storage as ``(num_blocks, bytes)`` int8 rows, one row per block, following the
    placement ``kv_cache_config`` gives (offset, layer stride, block stride)."""
    num_blocks = kv_cache_config.num_blocks
    regions: dict[str, torch.Tensor] = {}
    for placement in kv_cache_config.kv_cache_tensors:
        if not hasattr(placement, "layers"):  # 0.26.0: no layer placement, only the layers' names
            for name in [n for n in placement.shared_by if n in kv_caches]:
                regions.update(_block_rows(name, kv_caches[name], num_blocks))
            continue
        names = [n for n in placement.layers if n in kv_caches]
        if not names:
            continue
        block_bytes = placement.block_stride
        storage = torch.empty(0, dtype=torch.int8).set_(kv_caches[names[0]].untyped_storage())
        span = num_blocks * block_bytes
        # Layer-outermost placement: the layers (and K/V halves) follow one another, each a run of
        # block-strided rows; otherwise one run of rows holds every layer of a block.
        start, length = ((placement.offset, len(placement.layers) * placement.layer_stride)
                         if placement.layer_stride >= span else (0, span))
        for part, run in enumerate(storage[start:start + length].view(-1, num_blocks, block_bytes)):
            regions[f"{names[0]}.{part}"] = run
    return regions


class _NoEvent:
    """A CUDA event on the CPU: the copies are ordered after the forward already."""

    def record(self, stream: Any = None) -> None:
        """Nothing to order."""

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        """Nothing to wait for."""


class _NoCuda:
    @staticmethod
    def current_stream() -> None:
        return None


class CpuTorch:
    """``torch`` as the worker module sees it: ``Event`` and ``cuda.current_stream`` stand in for CUDA."""

    Event = _NoEvent
    cuda = _NoCuda()

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)


def _block_rows(name: str, cache: torch.Tensor, num_blocks: int) -> dict[str, torch.Tensor]:
    """A contiguous layer tensor as ``(num_blocks, bytes)`` int8 rows: one region per index of the
    dimensions before its block dimension (the first of ``num_blocks`` entries; K and V on vLLM's
    CPU attention, whose layout is ``(2, num_blocks, ...)``)."""
    if not cache.is_contiguous() or num_blocks not in cache.shape:
        raise ValueError(f"KV cache {name!r} of shape {tuple(cache.shape)}: no contiguous block dimension "
                         f"of {num_blocks}")
    outer = cache.shape[: list(cache.shape).index(num_blocks)]
    rows = cache.reshape(math.prod(outer), num_blocks, -1)
    return {f"{name}.{part}": run.view(torch.int8) for part, run in enumerate(rows)}


def make_worker(vllm_config: Any, kv_cache_config: Any, cpu_capacity_bytes: int, delay: int) -> Any:
    """A :class:`TorchSimpleWorker` (the class is made on first use: it subclasses vLLM's)."""
    return worker_class()(vllm_config, kv_cache_config, cpu_capacity_bytes, delay=delay)


_CLASS: list[type] = []


def worker_class() -> type:
    """:class:`TorchSimpleWorker`, the class itself (made on first use: it subclasses vLLM's)."""
    if _CLASS:
        return _CLASS[0]
    from vllm.v1.simple_kv_offload import worker as vllm_worker
    from vllm.v1.simple_kv_offload.worker import SimpleCPUOffloadWorker

    vllm_worker.torch = CpuTorch()  # type: ignore[attr-defined]

    class TorchSimpleWorker(SimpleCPUOffloadWorker):  # type: ignore[misc, valid-type]
        """vLLM's worker with a :class:`LateCopyBackend`; ``delay`` is the polls a copy takes."""

        def __init__(self, *args: Any, delay: int = 1, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.copy_delay = delay

        @property
        def backend(self) -> LateCopyBackend:
            assert isinstance(self._backend, LateCopyBackend), "attach() or register_kv_caches() first"
            return self._backend

        def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
            self.attach(block_regions(kv_caches, self.kv_cache_config))

        def attach(self, gpu_regions: dict[str, torch.Tensor]) -> None:
            """Use ``gpu_regions`` as the GPU KV cache; CPU tensors of the scheduler's block count."""
            self.num_cpu_blocks = cpu_block_count(self.kv_cache_config, self.cpu_capacity_bytes)
            self.gpu_kv_caches = dict(gpu_regions)
            self.cpu_kv_caches = {
                name: torch.zeros((self.num_cpu_blocks, *region.shape[1:]), dtype=region.dtype)
                for name, region in gpu_regions.items()
            }
            self._backend = LateCopyBackend(self.gpu_kv_caches, self.cpu_kv_caches, self.copy_delay)

        def in_flight(self) -> int:
            """Transfers launched and not yet reported complete."""
            return len(self._load_events) + len(self._store_events)

        def pending(self) -> tuple[Any, ...]:
            """The worker's transfer state: pending load and store events, and each launched copy's
            event index and whether it completed."""
            return (tuple(sorted(self._pending_load_event_indices)), tuple(sorted(self._pending_store_event_indices)),
                    tuple((index, event.done) for index, event in [*self._load_events, *self._store_events]))

        def finish_copies(self) -> None:
            """Every copy in flight completes, as DMA does while no step polls it (the completion
            is still reported only by the next poll)."""
            for _, event in [*self._load_events, *self._store_events]:
                event.synchronize()

    _CLASS.append(TorchSimpleWorker)
    return TorchSimpleWorker
