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

import atexit
import json
import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

MANAGERS: tuple[str, ...] = ("lru", "arc", "tiering")

# A model small enough that one KV page is a few hundred bytes; vLLM only reads its shape.
_MODEL_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "num_hidden_layers": 1,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "torch_dtype": "float32",
}
LAYER = "model.layers.0.self_attn.attn"
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


@cache
def _model_dir() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="kvoffload-vllm-model-"))
    atexit.register(shutil.rmtree, folder, True)
    (folder / "config.json").write_text(json.dumps(_MODEL_CONFIG))
    return folder


@cache
def model_config() -> Any:
    """vLLM's ``ModelConfig`` of the checks' tiny model (the connectors' checks share it)."""
    # Built once per process: vLLM inspects the architecture in a subprocess (~20 s).
    from vllm.config import ModelConfig

    folder = str(_model_dir())
    return ModelConfig(model=folder, tokenizer=folder, skip_tokenizer_init=True, dtype="float32", max_model_len=4096)


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


def kv_cache_tensor(page_bytes: int, num_blocks: int) -> Any:
    """One layer's KV tensor; its fields changed after 0.26 (``shared_by`` became ``layers`` plus strides),
    so they are chosen by the dataclass's own field names."""
    from dataclasses import fields

    from vllm.v1.kv_cache_interface import KVCacheTensor

    names = {field.name for field in fields(KVCacheTensor)}
    size = page_bytes * num_blocks
    if "shared_by" in names:
        return KVCacheTensor(size=size, shared_by=[LAYER])
    return KVCacheTensor(size=size, layers=[LAYER], layer_stride=size, block_stride=page_bytes)


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


def warm_up() -> None:
    """Build the model config once (vLLM inspects the architecture in a subprocess), so the
    checkers' timings do not include it."""
    model_config()
