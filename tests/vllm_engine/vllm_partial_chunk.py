"""KVOffloadConnector checked against vLLM's own block pool: no load may write a block of vLLM's
GPU prefix cache (a GPU hit's blocks may be shared with other running requests); and its mutant
whose load behind a GPU hit that ends inside a chunk writes the whole first chunk."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvoffload.vllm.connector.connector import KVOffloadConnector, KVOffloadConnectorMetadata
from kvoffload.vllm.kv_groups import VLLM_NULL_BLOCK


class PrefixCacheGuardConnector(KVOffloadConnector):
    """Records in ``prefix_cache_writes`` every load job that names a GPU block vLLM's prefix cache
    holds (a block with a block hash: the blocks allocated for a load are cached only once it
    reported). ``block_pool`` is vLLM's BlockPool, set by the test once the engine is built."""

    block_pool: Any = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.prefix_cache_writes: list[str] = []

    def build_connector_meta(self, scheduler_output: Any) -> KVOffloadConnectorMetadata:
        meta = super().build_connector_meta(scheduler_output)
        assert isinstance(meta, KVOffloadConnectorMetadata)
        for job in meta.jobs.loads:
            cached = [
                block for block in job.gpu_block_ids
                if block != VLLM_NULL_BLOCK and self.block_pool.blocks[block].block_hash is not None
            ]
            if cached:
                self.prefix_cache_writes.append(
                    f"load job {job.job_id} of request {job.request_id!r} writes prefix-cache blocks {cached}"
                )
        return meta


class WholeFirstChunkConnector(PrefixCacheGuardConnector):
    """Mutant: a load behind a GPU hit that ends inside a chunk writes the whole first chunk, the
    blocks of vLLM's prefix cache included."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.kvoffload_scheduler is not None:
            scheduler = self.kvoffload_scheduler.scheduler
            per_chunk = scheduler.config.gpu_blocks_per_chunk

            def whole_chunks(block_ids: Sequence[int], start: int, end: int, local: int) -> tuple[int, ...]:
                return tuple(block_ids[start * per_chunk : end])

            scheduler._load_targets = whole_chunks  # type: ignore[method-assign]
