"""Speculative-decoding bugs: a connector that cannot tell verified tokens from drafts."""

from __future__ import annotations

from dataclasses import replace

from kvoffload.offload.scheduler import OffloadingScheduler
from kvoffload.offload.types import ConnectorMetadata, SchedulerOutput


class StoreDraftsScheduler(OffloadingScheduler):
    """A connector deaf to speculative decoding: it counts every scheduled token as computed,
    draft tokens included, and never hears that verification rejected some (vLLM lowers
    ``num_computed_tokens`` after rejected drafts; a connector that tracks its own count from
    ``num_scheduled_tokens`` alone does not).

    Interleaving: a decoding request is scheduled with its last token and a draft that fills a
    chunk; verification rejects the draft; the next ``build_connector_meta`` believes the chunk
    computed and stores it, although its last slot holds the rejected draft's KV. The chunk is
    stored under the key of the real tokens, and a later request loads the draft's KV as its prefix
    (DataIntegrity)."""

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> ConnectorMetadata:
        # The bug: the draft and rejection counts are dropped before the scheduler sees them.
        deaf = replace(scheduler_output, num_draft_tokens={}, num_rejected_tokens={})
        return super().build_connector_meta(deaf)
