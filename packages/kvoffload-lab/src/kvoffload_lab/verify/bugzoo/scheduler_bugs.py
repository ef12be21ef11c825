"""Scheduler-side historical bugs, each a subclass of ``OffloadingScheduler`` overriding the minimum.

Where a core method is too coarse to hook (``_preempt``), the mutant copies its few lines and
changes the one that matters; each class says which.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from kvoffload.lifecycles.request import CLEANED, FINISHED_PENDING_STORE, PREEMPTED, WAITING
from kvoffload.offload.scheduler import OffloadingScheduler, RequestTracker
from kvoffload.offload.types import EngineRequest


class EagerFinishSignalScheduler(OffloadingScheduler):
    """vLLM #49635: ``on_request_finished`` is called from ``request_finished``, before the final
    store job is built.

    Interleaving: a request computes a chunk; it finishes (the manager drops it at once); the next
    ``build_connector_meta`` calls ``prepare_store`` for its last chunk on a request the manager no
    longer knows: the KeyError that killed the engine (here: ``NoManagerCallAfterSignal``)."""

    def request_finished(self, request: EngineRequest, block_ids: Sequence[int]) -> bool:
        keep = super().request_finished(request, block_ids)
        self.manager.on_request_finished(request.request_id)  # the bug: too early
        return keep

    def _signal(self, tracker: RequestTracker) -> None:
        # The manager was already told; keep the lifecycle bookkeeping so only the early call shows.
        self.lifecycle.fire(tracker, "signal")
        tracker.signals += 1
        if self.lifecycle.can_fire(tracker, "clean"):
            self._clean(tracker)


class DropStateOnFinishScheduler(OffloadingScheduler):
    """vLLM #46027: a finished request's state is dropped as soon as it is signaled, while its
    store jobs are still in flight.

    Interleaving: a request's store is submitted; the request finishes; ``build_connector_meta``
    signals it and drops its tracker although the store still runs; the store's completion then
    finds no request (``CleanOnlyWhenDrained``; the real connector raised KeyError)."""

    def _signal(self, tracker: RequestTracker) -> None:
        super()._signal(tracker)
        if tracker.request_id in self._trackers:
            # The bug: drop it anyway, bypassing the declared no_jobs_in_flight guard.
            tracker.state = CLEANED
            del self._trackers[tracker.request_id]
            if tracker.holds_gpu_blocks:
                self._released.append(tracker.request_id)


class ReadmitWhileFlushingScheduler(OffloadingScheduler):
    """vLLM #46014: a preempted request is re-admitted (with a load) while the stores flushed at
    its preemption have not reported yet.

    Interleaving: chunk 0 is stored; chunk 1's store is in flight; the request is preempted (the
    store is flushed but its completion is reported only next step); the engine re-admits it, the
    lookup hits chunk 0 and a load is prepared: the request has a load and a store at once
    (``JobsExclusive``)."""

    def get_num_new_matched_tokens(
        self, request: EngineRequest, num_computed_tokens: int
    ) -> tuple[int | None, bool]:
        tracker = self._trackers.get(request.request_id)
        if tracker is not None and tracker.state == PREEMPTED and not self.lifecycle.can_fire(tracker, "resume"):
            tracker.state = WAITING  # the bug: skip the resume guard (no_jobs_in_flight)
        return super().get_num_new_matched_tokens(request, num_computed_tokens)


class AbortUnscheduledStoresScheduler(OffloadingScheduler):
    """vLLM #49118: a request aborted before it was ever scheduled gets final store jobs for keys
    it has no GPU blocks for.

    Interleaving: the engine looks a request up but cannot allocate its blocks; the request is
    aborted; its final store counts the prompt's full blocks instead of the allocated ones and
    copies keys from no GPU block at all (``DataIntegrity``: garbage offloaded under real keys)."""

    def _storable_chunks(self, tracker: RequestTracker) -> int:
        if tracker.state == FINISHED_PENDING_STORE and not tracker.gpu_block_ids:
            return len(tracker.request.block_hashes) // self._blocks_per_chunk  # the bug: tokens, not blocks
        return super()._storable_chunks(tracker)


class ResetLeavesStaleJobsScheduler(OffloadingScheduler):
    """vLLM #48090: ``reset_cache`` turns in-flight jobs stale but leaves them attached to live
    requests, which then wait forever for completions that are ignored.

    Interleaving: a request has a store (or load) in flight; ``reset_cache``; the stale job is
    flushed and reported, but the request still lists it; after it finishes it can never be
    cleaned and its GPU blocks are never released (``EventuallyCleaned``)."""

    def _detach_jobs(self, tracker: RequestTracker) -> list[int]:
        jobs = sorted(tracker.store_jobs)
        if tracker.load_job is not None:
            jobs.append(tracker.load_job)
        return jobs  # the bug: the tracker keeps pointing at them


class PreemptWithoutFlushScheduler(OffloadingScheduler):
    """vLLM #29870: preemption hands the GPU blocks back without flushing the stores still reading
    them (and forgets they read them).

    Interleaving: a store of chunk 0 is in flight; the request is preempted; another request is
    admitted into the same GPU blocks and computes into block 0 while the store still copies it
    (``GpuBlockFence``; the CPU tier then holds the wrong KV under the first request's key).

    Copies ``_preempt`` (too coarse to hook): the fence entries are dropped instead of flushed."""

    def _preempt(self, tracker: RequestTracker) -> None:
        self.lifecycle.fire(tracker, "preempt")
        for job_id in tracker.store_jobs:
            for block in self._jobs[job_id].gpu_block_ids:
                readers = self._fence.get(block)
                if readers is not None:
                    readers.discard(job_id)
                    if not readers:
                        del self._fence[block]
        tracker.gpu_block_ids = []
        tracker.num_computed_tokens = 0
        tracker.draft_tokens = 0


class FenceSkippedWithoutExternalTokensScheduler(OffloadingScheduler):
    """vLLM #46951: the GPU-block fence is only checked for allocations that load external tokens.

    Our scheduler flushes a preempted request's stores eagerly, so the fence is a second line of
    defence; this mutant takes vLLM's shape, where preemption relies on the fence (the stores are
    flushed when the blocks are reused), and skips the fence when ``num_external_tokens == 0``.
    Interleaving: a store of chunk 0 is in flight; the request is preempted; another request is
    admitted without a load into the same blocks and computes into them (``GpuBlockFence``).

    Copies ``_preempt`` (too coarse to hook) without its flush."""

    _skip_fence = False

    def _preempt(self, tracker: RequestTracker) -> None:
        self.lifecycle.fire(tracker, "preempt")
        tracker.gpu_block_ids = []
        tracker.num_computed_tokens = 0
        tracker.draft_tokens = 0

    def update_state_after_alloc(
        self, request: EngineRequest, block_ids: Sequence[int], num_external_tokens: int
    ) -> None:
        self._skip_fence = num_external_tokens == 0  # the bug
        try:
            super().update_state_after_alloc(request, block_ids, num_external_tokens)
        finally:
            del self._skip_fence

    def _fence_check(self, block_ids: Iterable[int]) -> None:
        if not self._skip_fence:
            super()._fence_check(block_ids)


class StoreGpuHitEarlyScheduler(OffloadingScheduler):
    """kvoffload's KVOffloadConnector (split GPU/CPU prefix): a GPU prefix-cache hit is stored in the
    step that admits it, although the engine caches a block as soon as it schedules the block's
    tokens, and the worker runs the step's stores before its forward pass.

    Interleaving: request A is admitted and scheduled to compute the shared prefix; request B is
    admitted behind it in the same step and hits those blocks in the GPU prefix cache; that step's
    ``build_connector_meta`` stores B's hit chunks, reading GPU blocks that only the step's forward
    pass writes. The manager deduplicates keys, so A's own store of them is skipped and the CPU tier
    serves the unwritten bytes under the right keys (``DataIntegrity``).

    Ignores ``RequestTracker.gpu_hit_unwritten`` (the pre-fix scheduler)."""

    def update_state_after_alloc(
        self, request: EngineRequest, block_ids: Sequence[int], num_external_tokens: int
    ) -> None:
        super().update_state_after_alloc(request, block_ids, num_external_tokens)
        self._trackers[request.request_id].gpu_hit_unwritten = False  # the bug: a hit counts as written
