"""vLLM's own offloading specs with a worker that runs on vLLM's CPU platform.

``LiveCPUSpec`` (LRU or ARC, by ``eviction_policy``) and ``LiveTieringSpec`` are vLLM's
``CPUOffloadingSpec`` and ``TieringOffloadingSpec`` with one override: ``get_worker`` returns a
:class:`~kvoffload_lab.vllm.offloading.live.worker.LiveWorker` instead of vLLM's CUDA-only worker. The managers
are vLLM's, untouched (the connector wraps them in the recording proxy). The findings file is
``kv_connector_extra_config["live_check_dir"]/findings.ndjson``.

The tiering spec's primary tier lives in ``/dev/shm/vllm_offload_{engine_id}.mmap``, which the
scheduler side maps too; the worker maps the same file, creating it if it starts first, as vLLM's
own worker does. Whoever runs the engine removes the file afterwards (``shm_path``).
"""

from __future__ import annotations

import contextlib
import mmap
import os
from pathlib import Path
from typing import Any

import torch
from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec
from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory
from vllm.v1.kv_offload.tiering.spec import TieringOffloadingSpec

from kvoffload_lab.vllm.common.live.logs import FINDINGS_FILE, FindingLog
from kvoffload_lab.vllm.offloading.live.worker import LiveWorker

TIER_TYPE = "ByteKeepingTier"
# By name, as vLLM's own tiers are: 0.26 knows no per-tier module_path.
with contextlib.suppress(ValueError):  # already registered: this module was imported before
    SecondaryTierFactory.register_tier(TIER_TYPE, "kvoffload_lab.vllm.offloading.live.tier", "ByteKeepingTier")


def shm_path(engine_id: str) -> Path:
    """The file vLLM's tiering spec maps as its primary tier."""
    return Path(f"/dev/shm/vllm_offload_{engine_id}.mmap")


def _num_chunks(spec: Any) -> int:
    # vLLM 0.27 renamed num_blocks to num_chunks.
    return int(getattr(spec, "num_chunks", None) or spec.num_blocks)


def _findings(spec: Any) -> FindingLog:
    return FindingLog(Path(spec.extra_config["live_check_dir"]) / FINDINGS_FILE)


def _layers(kv_caches: Any) -> list[torch.Tensor]:
    return [entry.tensor for entry in kv_caches.tensors]


class LiveCPUSpec(CPUOffloadingSpec):
    """vLLM's CPU offloading spec; the CPU tier is a private byte tensor."""

    def get_worker(self, kv_caches: Any) -> LiveWorker:
        if not getattr(self, "_live_worker", None):
            storage = torch.zeros((_num_chunks(self), self.kv_bytes_per_chunk), dtype=torch.uint8)
            self._live_worker = LiveWorker(_layers(kv_caches), storage, self.blocks_per_chunk, _findings(self), False)
        return self._live_worker


class LiveTieringSpec(TieringOffloadingSpec):
    """vLLM's tiering spec; the CPU tier is the primary tier's shared region, as vLLM maps it."""

    def get_worker(self, kv_caches: Any) -> LiveWorker:
        if not getattr(self, "_live_worker", None):
            size = _num_chunks(self) * self.kv_bytes_per_chunk
            fd = os.open(shm_path(self._engine_id), os.O_CREAT | os.O_RDWR, 0o600)
            try:
                if os.fstat(fd).st_size < size:
                    os.ftruncate(fd, size)
                self._live_region = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
            finally:
                os.close(fd)
            storage = torch.frombuffer(self._live_region, dtype=torch.uint8).view(_num_chunks(self), -1)
            self._live_worker = LiveWorker(_layers(kv_caches), storage, self.blocks_per_chunk, _findings(self), True)
        return self._live_worker
