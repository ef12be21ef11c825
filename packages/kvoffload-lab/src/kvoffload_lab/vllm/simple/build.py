"""vLLM's real ``Scheduler`` with ``SimpleCPUOffloadConnector``, and the connector's worker.

The ``VllmConfig`` is built on the checks' tiny model of :mod:`kvoffload_lab.vllm.common.vllm_objects`
(a hand-written ``config.json``, no weights) with prefix caching on, as the connector requires, and synchronous
scheduling, as vLLM's CPU platform forces (:func:`vllm_scheduler`, which
:mod:`kvoffload_lab.vllm.own` also uses, builds ``AsyncScheduler`` on request). The KV cache is one
full-attention group; the connector's CPU capacity is given in blocks and passed to it in bytes
(``cpu_bytes_to_use``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvoffload_lab.vllm.common.vllm_objects import LAYER, kv_cache_tensor, model_config

MODES: tuple[str, ...] = ("eager", "lazy")
HEADS, HEAD_SIZE = 2, 32


@dataclass(frozen=True)
class SimpleShape:
    """Block size in tokens, GPU and CPU blocks, the scheduler's token budget and batch size;
    ``lazy`` is the connector's ``lazy_offload`` (offload near eviction instead of as computed)."""

    block_size: int = 4
    gpu_blocks: int = 10
    cpu_blocks: int = 16
    max_batched_tokens: int = 16
    max_seqs: int = 4
    lazy: bool = False


def page_bytes(block_size: int) -> int:
    """One block's bytes in the KV cache config (K and V, float32)."""
    return 2 * block_size * HEADS * HEAD_SIZE * 4


def build_scheduler(shape: SimpleShape) -> tuple[Any, Any, Any]:
    """vLLM's ``Scheduler`` (its connector is ``SimpleCPUOffloadConnector``), its ``VllmConfig`` and
    ``KVCacheConfig``."""
    page = page_bytes(shape.block_size)
    transfer = {
        "kv_connector": "SimpleCPUOffloadConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"cpu_bytes_to_use": shape.cpu_blocks * page, "lazy_offload": shape.lazy},
    }
    return vllm_scheduler(shape.block_size, shape.gpu_blocks, shape.max_batched_tokens, shape.max_seqs, transfer)


def vllm_scheduler(block_size: int, gpu_blocks: int, max_batched_tokens: int, max_seqs: int,
                   transfer: dict[str, Any], async_scheduling: bool = False) -> tuple[Any, Any, Any]:
    """vLLM's real scheduler with the connector ``transfer`` names (a ``KVTransferConfig``'s fields),
    its ``VllmConfig`` and ``KVCacheConfig``: ``Scheduler``, or with ``async_scheduling``
    ``AsyncScheduler`` and the ``VllmConfig`` that says so (vLLM's engine then overlaps two steps)."""
    import torch
    from vllm.config import CacheConfig, DeviceConfig, KVTransferConfig, SchedulerConfig, VllmConfig
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    spec = FullAttentionSpec(block_size=block_size, num_kv_heads=HEADS, head_size=HEAD_SIZE, dtype=torch.float32)
    model = model_config()
    vllm_config = VllmConfig(
        model_config=model,
        device_config=DeviceConfig(device="cpu"),
        cache_config=CacheConfig(block_size=block_size, enable_prefix_caching=True),
        scheduler_config=SchedulerConfig(max_num_batched_tokens=max_batched_tokens, max_num_seqs=max_seqs,
                                         max_model_len=model.max_model_len, is_encoder_decoder=False),
        kv_transfer_config=KVTransferConfig(**transfer),
    )
    # Set after VllmConfig's checks, which turn async scheduling off on vLLM's CPU platform. The
    # scheduler reads it (max_concurrent_batches: whether it defers freeing blocks a step still
    # writes). The block count is the engine's, plus block 0, vLLM's null block.
    vllm_config.scheduler_config.async_scheduling = async_scheduling
    num_blocks = gpu_blocks + 1
    vllm_config.cache_config.num_gpu_blocks = num_blocks
    kv_cache_config = KVCacheConfig(
        num_blocks=num_blocks,
        kv_cache_tensors=[kv_cache_tensor(spec.page_size_bytes, num_blocks)],
        kv_cache_groups=[KVCacheGroupSpec([LAYER], spec)],
    )
    scheduler_class = AsyncScheduler if async_scheduling else Scheduler
    scheduler = scheduler_class(vllm_config=vllm_config, kv_cache_config=kv_cache_config,
                                structured_output_manager=StructuredOutputManager(vllm_config), block_size=block_size)
    return scheduler, vllm_config, kv_cache_config
