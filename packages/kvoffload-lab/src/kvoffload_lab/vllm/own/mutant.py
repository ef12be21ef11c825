"""A mutant of ``KVOffloadConnector`` that ignores async scheduling's one-step delay.

``scheduled_tokens_as_known``: the scheduler side takes every token vLLM scheduled as a token
vLLM knows, so it names a chunk by its block hash as soon as the chunk is computed (it drops the
bound of ``OffloadingScheduler._storable_chunks`` by ``request.block_hashes``). Under synchronous
scheduling that holds: a token is scheduled only after the step that sampled it was processed. Under
async scheduling step N+1 computes the token step N sampled before ``update_from_output`` of step
N appends it, and an abort processed in between (``EngineCore`` processes aborts just before that
``update_from_output``) finishes the request with that token never appended: the request's final
stores then ask for a block hash vLLM never computed, and the engine dies in
``build_connector_meta``.
"""

from __future__ import annotations

from typing import Any

from kvoffload.offload.scheduler import OffloadingScheduler, RequestTracker
from kvoffload.vllm.connector import KVOffloadConnector
from kvoffload.vllm.connector.scheduler_side import SchedulerSide


class ScheduledAsKnownScheduler(OffloadingScheduler):
    """Counts a chunk storable once computed, whether or not vLLM knows its tokens yet."""

    def _storable_chunks(self, tracker: RequestTracker) -> int:
        return min((tracker.num_computed_tokens - tracker.draft_tokens) // self._chunk_tokens,
                   len(tracker.gpu_block_ids) // self._blocks_per_chunk)


class ScheduledAsKnownConnector(KVOffloadConnector):
    """``KVOffloadConnector`` whose scheduler side is :class:`ScheduledAsKnownScheduler`."""

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        side = self.kvoffload_scheduler
        if side is not None:
            self.kvoffload_scheduler = SchedulerSide(ScheduledAsKnownScheduler(self.config, side.scheduler.manager),
                                                     side.checking)
