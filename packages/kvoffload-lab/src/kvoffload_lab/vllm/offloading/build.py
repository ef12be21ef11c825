"""Build vLLM's real ``OffloadingConnectorScheduler`` exactly as vLLM's ``OffloadingConnector`` does.

``build_offloading_config(vllm_config, kv_cache_config)`` -> ``OffloadingSpecFactory.create_spec``
-> ``OffloadingConnectorScheduler(spec, vllm_config, kv_cache_config)``, from a ``VllmConfig`` whose
model is a hand-written ``config.json`` (no weights: the connector only needs the model's shape)
and a one-group full-attention ``KVCacheConfig``. The managers are vLLM's own, chosen through the
connector's ``kv_connector_extra_config``: ``CPUOffloadingSpec`` with the ``lru`` or ``arc`` policy,
or ``TieringOffloadingSpec`` with a CPU (LRU) primary tier and vLLM's in-memory ``example``
secondary tier.

vLLM's tiering manager keeps its CPU tier in a ``SharedOffloadRegion``, a file
``/dev/shm/vllm_offload_{engine_id}.mmap`` that only its ``shutdown`` removes:
:func:`shutdown_connector` ends every connector built here, and the engine ids carry the process
id so that :func:`region_files` finds exactly the files one process's connectors left.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvoffload_lab.vllm.common.vllm_objects import LAYER, kv_cache_tensor, model_config

MANAGERS: tuple[str, ...] = ("lru", "arc", "tiering")

ENGINE_ID_PREFIX = "kvoffload-check-"
# Where vLLM's SharedOffloadRegion puts its file (0.26.0 to 0.33.0): {SHM_DIR}/vllm_offload_{engine_id}.mmap.
SHM_DIR = Path("/dev/shm")


@dataclass(frozen=True)
class ConnectorShape:
    """Sizes of one connector: GPU block size in tokens, GPU blocks per offloaded chunk, CPU chunks,
    GPU blocks; ``prompt_only`` is vLLM's ``offload_prompt_only`` (its default is True)."""

    block_size: int = 4
    blocks_per_chunk: int = 1
    cpu_chunks: int = 8
    gpu_blocks: int = 10
    prompt_only: bool = False


def _extra_config(manager: str, shape: ConnectorShape, page_bytes: int) -> dict[str, Any]:
    if manager not in MANAGERS:
        raise ValueError(f"unknown manager {manager!r}; known: {', '.join(MANAGERS)}")
    extra: dict[str, Any] = {
        "cpu_bytes_to_use": shape.cpu_chunks * shape.blocks_per_chunk * page_bytes,
        "blocks_per_chunk": shape.blocks_per_chunk,
        "eviction_policy": "arc" if manager == "arc" else "lru",
        "offload_prompt_only": shape.prompt_only,
    }
    if manager == "tiering":
        extra["spec_name"] = "TieringOffloadingSpec"
        extra["secondary_tiers"] = [{"type": "example"}]
        extra["tier_poll_interval_s"] = 0
    return extra


def build_connector(manager: str, shape: ConnectorShape) -> tuple[Any, Any]:
    """vLLM's connector scheduler and its ``VllmConfig`` for ``manager`` ("lru", "arc", "tiering")."""
    import torch
    from vllm.config import CacheConfig, DeviceConfig, KVTransferConfig, VllmConfig
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.config import build_offloading_config
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import OffloadingConnectorScheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.kv_offload.factory import OffloadingSpecFactory

    spec = FullAttentionSpec(block_size=shape.block_size, num_kv_heads=2, head_size=32, dtype=torch.float32)
    transfer = KVTransferConfig(
        kv_connector="OffloadingConnector",
        kv_role="kv_both",
        engine_id=f"{ENGINE_ID_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}",
        kv_connector_extra_config=_extra_config(manager, shape, spec.page_size_bytes),
    )
    vllm_config = VllmConfig(
        model_config=model_config(),
        device_config=DeviceConfig(device="cpu"),
        cache_config=CacheConfig(block_size=shape.block_size),
        kv_transfer_config=transfer,
    )
    # One more than the engine's blocks: vLLM's block 0 is its null block.
    kv_cache_config = KVCacheConfig(
        num_blocks=shape.gpu_blocks + 1,
        kv_cache_tensors=[kv_cache_tensor(spec.page_size_bytes, shape.gpu_blocks + 1)],
        kv_cache_groups=[KVCacheGroupSpec([LAYER], spec)],
    )
    offloading_spec = OffloadingSpecFactory.create_spec(build_offloading_config(vllm_config, kv_cache_config))
    return OffloadingConnectorScheduler(offloading_spec, vllm_config, kv_cache_config), vllm_config


def _region_file(engine_id: str) -> Path:
    return SHM_DIR / f"vllm_offload_{engine_id}.mmap"


def region_files(pid: int) -> list[Path]:
    """The shared-memory files of connectors built by process ``pid`` that are still there."""
    return sorted(SHM_DIR.glob(_region_file(f"{ENGINE_ID_PREFIX}{pid}-*").name))


def shutdown_connector(connector: Any, vllm_config: Any) -> None:
    """End a connector built by :func:`build_connector` as vLLM's ``OffloadingConnector.shutdown``
    does when the engine stops (the tiering manager releases and unlinks its shared region).
    Exceptions of vLLM's shutdown propagate; should it leave the region's file behind (it raised,
    or a release does not unlink), this connector's own file is removed, never another."""
    try:
        connector.shutdown()
    finally:
        _region_file(vllm_config.kv_transfer_config.engine_id).unlink(missing_ok=True)
