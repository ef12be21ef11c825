"""vLLM's real ``Scheduler`` or ``AsyncScheduler`` with ``KVOffloadConnector``, and the connector's
worker side on a :class:`~kvoffload_lab.vllm.own.mover.LateMover`.

The ``VllmConfig`` is the simple connector's (:func:`kvoffload_lab.vllm.simple.build.vllm_scheduler`: a
hand-written model ``config.json``, no weights, prefix caching on, one full-attention KV cache
group), with kvoffload's connector checking its invariants after every step (``check_invariants``)
and vLLM recomputing the tokens of a failed load (``kv_load_failure_policy: "recompute"``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from kvoffload_lab.vllm.own.mover import LateMover
from kvoffload_lab.vllm.simple.build import vllm_scheduler

SCHEDULINGS: tuple[str, ...] = ("sync", "async")
# The connector class vLLM builds, by mutant (None: kvoffload's own connector, unchanged).
CONNECTORS: dict[str | None, tuple[str, str]] = {
    None: ("KVOffloadConnector", "kvoffload.vllm.connector"),
    "scheduled_tokens_as_known": ("ScheduledAsKnownConnector", "kvoffload_lab.vllm.own.mutant"),
}


@dataclass(frozen=True)
class OwnShape:
    """Block size in tokens, GPU blocks, CPU chunks, GPU blocks per chunk, the scheduler's token
    budget and batch size."""

    block_size: int = 4
    gpu_blocks: int = 10
    cpu_chunks: int = 8
    blocks_per_chunk: int = 1
    max_batched_tokens: int = 16
    max_seqs: int = 4


def build_scheduler(shape: OwnShape, async_scheduling: bool, mutant: str | None = None) -> tuple[Any, Any, Any]:
    """vLLM's scheduler (``AsyncScheduler`` with ``async_scheduling``) whose connector is
    ``KVOffloadConnector`` (or ``mutant``'s), its ``VllmConfig`` and ``KVCacheConfig``."""
    name, module = CONNECTORS[mutant]
    transfer = {
        "kv_connector": name,
        "kv_connector_module_path": module,
        "kv_role": "kv_both",
        "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": {
            "num_cpu_blocks": shape.cpu_chunks, "blocks_per_chunk": shape.blocks_per_chunk,
            "eviction_policy": "lru", "check_invariants": True, "cpu_kernel": False,
        },
    }
    return vllm_scheduler(shape.block_size, shape.gpu_blocks, shape.max_batched_tokens, shape.max_seqs, transfer,
                          async_scheduling)


def build_worker(scheduler: Any, vllm_config: Any, kv_cache_config: Any, kv: torch.Tensor,
                 delay: int) -> tuple[Any, LateMover]:
    """The worker-side connector (the scheduler's connector class, worker role) moving the blocks of
    ``kv`` (``(num_blocks, bytes)``), and its mover, whose copies complete ``delay`` polls late."""
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

    from kvoffload.vllm.connector.worker_side import make_worker

    connector = type(scheduler.connector)(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
    config = connector.config
    mover = LateMover([kv], config.num_cpu_blocks * config.blocks_per_chunk, delay)
    # register_kv_caches would read vLLM's layer tensors; the digest model's cache is one region.
    # The null block: a load behind a GPU hit that ends inside a chunk names it where vLLM holds the block.
    connector.kvoffload_worker = make_worker(mover, config.blocks_per_chunk, null_block=config.null_block)
    return connector, mover
