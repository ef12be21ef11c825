"""The scheduler side of :class:`~kvoffload.vllm.connector.KVOffloadConnector`: kvoffload's
OffloadingScheduler driven by vLLM's scheduler calls.

vLLM's requests are wrapped in :class:`VllmRequestView` (block hashes as ints); vLLM's
SchedulerOutput becomes kvoffload's (scheduled tokens, new blocks of running requests, preempted
requests; a resumed request's blocks arrive through ``update_state_after_alloc`` instead). Every
lifecycle error of the scheduler or its manager is recorded in :attr:`violations` and re-raised.

Mapping of what kvoffload decides onto what vLLM can hear:

- ``request_finished`` returning True (final stores or in-flight stores still read the blocks):
  vLLM keeps the blocks until the worker lists the request in ``finished_sending``. The scheduler
  side learns the release in ``update_connector_output`` and tells the worker in the next step's
  metadata, since only the worker side reports ``finished_sending``.
- A request finished while its load is in flight: vLLM itself keeps its blocks until the load
  reports (``finished_recving``), so the connector answers False and never reports it as sent (a
  second free would crash vLLM).

With secondary tiers the manager is a :class:`~kvoffload.tiers.manager.TieringManager`, told each
request's cache salt when the scheduler announces the request: the tier jobs it handed out go
down with each step's metadata, their outcomes come back with the worker's report and are applied
before the GPU<->CPU outcomes of the same report.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

from kvoffload.lifecycles.invariants import check_invariants
from kvoffload.lifecycles.request import LOADING, RUNNING
from kvoffload.offload.errors import LifecycleViolation
from kvoffload.offload.scheduler import OffloadingScheduler, UnknownJob
from kvoffload.offload.types import ConnectorMetadata, RequestId, SchedulerOutput, WorkerOutput
from kvoffload.statemachine.runtime import LifecycleError
from kvoffload.tiers.invariants import check_tier_invariants
from kvoffload.tiers.manager import TieringManager
from kvoffload.tiers.protocol import TierJob, TierOutcome
from kvoffload.vllm.keys import HashesAsInts
from kvoffload.vllm.kv_groups import VLLM_NULL_BLOCK, interleave
from kvoffload.vllm.rank_reports import RankReport, RankTally

T = TypeVar("T")


class VllmRequestView:
    """A vLLM ``Request`` as kvoffload's EngineRequest: live, block hashes as ints, and its
    ``cache_salt`` ("" for none), which the scheduler hands to the manager with the request."""

    __slots__ = ("_request", "block_hashes", "cache_salt", "request_id")

    def __init__(self, request: Any) -> None:
        self._request = request
        self.request_id: RequestId = request.request_id
        self.block_hashes = HashesAsInts(request.block_hashes)
        self.cache_salt: str = getattr(request, "cache_salt", None) or ""

    @property
    def num_tokens(self) -> int:
        return int(self._request.num_tokens)


def kvoffload_scheduler_output(vllm_output: Any, to_apply: Callable[[RequestId], bool]) -> SchedulerOutput:
    """kvoffload's SchedulerOutput from vLLM's (each group's new blocks interleaved, see :func:`interleave`).

    vLLM lists a preemption by ``reset_prefix_cache(reset_running_requests=True)`` (between two
    steps) in its next SchedulerOutput, whatever happened since: the same output may resume the
    request (kvoffload's scheduler already saw its new admission), the request may have finished,
    and a second reset may have let the scheduler forget it. Only the preemptions ``to_apply``
    says the scheduler has still to hear of are passed on, and none of a resumed request."""
    cached = vllm_output.scheduled_cached_reqs
    resumed = {*cached.resumed_req_ids, *(new.req_id for new in vllm_output.scheduled_new_reqs)}
    new_block_ids: dict[RequestId, Sequence[int]] = {}
    for request_id, groups in zip(cached.req_ids, cached.new_block_ids, strict=True):
        # A resumed request's list replaces its blocks; update_state_after_alloc already gave them.
        if groups is not None and any(groups) and request_id not in cached.resumed_req_ids:
            new_block_ids[request_id] = interleave(groups)
    return SchedulerOutput(
        num_scheduled_tokens=dict(vllm_output.num_scheduled_tokens),
        new_block_ids=new_block_ids,
        preempted=tuple(
            request_id for request_id in vllm_output.preempted_req_ids or ()
            if request_id not in resumed and to_apply(request_id)
        ),
    )


class SchedulerSide:
    """Holds the OffloadingScheduler and what vLLM must still be told. With ``check_invariants``
    every invariant of :mod:`kvoffload.lifecycles` is checked after every step (for tests: it costs a
    snapshot of the whole scheduler per step) and each violation recorded."""

    def __init__(
        self,
        scheduler: OffloadingScheduler,
        check_invariants: bool = False,
        world_size: int = 1,
        volatile_groups: frozenset[int] = frozenset(),
    ) -> None:
        self.scheduler = scheduler
        # The sliding-window groups, and the blocks vLLM gave out since the last build (block ->
        # the request whose list already names it as its own): scheduler.blocks_reassigned.
        self.volatile_groups = volatile_groups
        self._given_out: dict[int, RequestId | None] = {}
        # The tensor-parallel ranks' reports, until every rank reported a job.
        self.tally = RankTally(world_size)
        manager = scheduler.manager
        self.tiers: TieringManager | None = manager if isinstance(manager, TieringManager) else None
        self.checking = check_invariants
        self.violations: list[str] = []
        # Requests whose blocks vLLM keeps for us (request_finished returned True).
        self._held: set[RequestId] = set()
        # Released by the scheduler, to be reported by the worker as finished_sending.
        self._to_release: list[RequestId] = []
        # Preempted between steps and already applied: left out of the next SchedulerOutput.
        self._preempted_early: set[RequestId] = set()

    def state_fingerprint(self) -> tuple[Hashable, ...]:
        """What a state-space search must tell apart beyond the scheduler's snapshot: the requests
        whose blocks vLLM keeps for us, and the releases the worker has not reported yet."""
        return tuple(sorted(self._held)), tuple(self._to_release)

    def _strict(self, call: str, function: Callable[..., T], *args: Any) -> T:
        try:
            return function(*args)
        except (LifecycleViolation, LifecycleError, UnknownJob) as error:
            self.violations.append(f"{call}: {error}")
            raise

    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> tuple[int | None, bool]:
        view = VllmRequestView(request)
        request_id = request.request_id
        if self.scheduler.is_tracked(request_id) and self.scheduler.tracker(request_id).state == RUNNING:
            # vLLM looks up only waiting requests: this one was preempted between two steps by
            # reset_prefix_cache(reset_running_requests=True), which the next SchedulerOutput
            # reports only after this lookup.
            self._strict("preempt_between_steps", self.scheduler.preempt_between_steps, request_id)
            self._preempted_early.add(request_id)
        return self._strict(
            "get_num_new_matched_tokens", self.scheduler.get_num_new_matched_tokens, view, num_computed_tokens
        )

    def update_state_after_alloc(
        self, request: Any, block_ids: Sequence[Sequence[int]], num_external_tokens: int
    ) -> None:
        """``block_ids``: the request's blocks, one list per KV cache group."""
        blocks = interleave(block_ids)
        if self.volatile_groups:
            self._give_out(blocks, request.request_id)
        if not self.scheduler.is_tracked(request.request_id):
            return
        self._strict(
            "update_state_after_alloc",
            self.scheduler.update_state_after_alloc,
            VllmRequestView(request),
            blocks,
            num_external_tokens,
        )

    def _give_out(self, blocks: Sequence[int], owner: RequestId | None) -> None:
        for block in blocks:
            if block != VLLM_NULL_BLOCK:
                self._given_out[block] = owner

    def _note_given_out(self, vllm_output: Any) -> None:
        """Every block this step's output gives out: a new or resumed request's list names it
        as its own; a running request's new blocks are appended after the check."""
        for new in vllm_output.scheduled_new_reqs:
            self._give_out(interleave(new.block_ids), new.req_id)
        cached = vllm_output.scheduled_cached_reqs
        for request_id, groups in zip(cached.req_ids, cached.new_block_ids, strict=True):
            if groups is not None:
                owner = request_id if request_id in cached.resumed_req_ids else None
                self._give_out(interleave(groups), owner)
        for copy in getattr(vllm_output, "kv_cache_block_copies", None) or ():
            self._give_out((copy.dst_block_id,), None)

    def build_connector_meta(
        self, vllm_output: Any
    ) -> tuple[ConnectorMetadata, tuple[RequestId, ...], tuple[TierJob, ...]]:
        """This step's jobs, the requests whose blocks the worker must report as sent, and the
        tier jobs handed out since the last step."""
        early = self._preempted_early
        if self.volatile_groups:
            self._note_given_out(vllm_output)
            self.scheduler.blocks_reassigned(self._given_out, self.volatile_groups)
            self._given_out = {}
        output = kvoffload_scheduler_output(
            vllm_output, lambda request_id: request_id not in early and self.scheduler.is_tracked(request_id)
        )
        metadata = self._strict("build_connector_meta", self.scheduler.build_connector_meta, output)
        early.clear()
        # vLLM skips update_connector_output in a step whose worker reported nothing, so a request
        # cleaned right here (its final stores built, nothing in flight) would wait for a report
        # that never comes: collect it now, with no job outcome.
        self.update_connector_output({})
        released = tuple(self._to_release)
        self._to_release.clear()
        tier_jobs = tuple(self.tiers.take_tier_jobs()) if self.tiers is not None else ()
        return metadata, released, tier_jobs

    def report(self, reports: Sequence[RankReport]) -> None:
        """The ranks' reports of one step: the jobs every rank has now reported are applied."""
        completed, tier_outcomes = self.tally.add(reports)
        self.update_connector_output(completed, tier_outcomes)

    def update_connector_output(self, completed: dict[int, bool], tier_outcomes: tuple[TierOutcome, ...] = ()) -> None:
        if tier_outcomes and self.tiers is None:
            raise ValueError(f"{len(tier_outcomes)} tier outcome(s) reported to a connector without tiers")
        for outcome in tier_outcomes:
            self._strict("complete_tier_job", self.tiers.complete_tier_job, outcome)  # type: ignore[union-attr]
        update = self._strict(
            "update_connector_output", self.scheduler.update_connector_output, WorkerOutput(completed)
        )
        for request_id in update.released:
            if request_id in self._held:
                self._held.discard(request_id)
                self._to_release.append(request_id)
        if self.checking:
            step = self.scheduler.step
            self.violations += [f"step {step}: {v}" for v in check_invariants(self.scheduler.snapshot())]
            if self.tiers is not None:
                self.violations += [f"step {step}: {v}" for v in check_tier_invariants(self.scheduler, self.tiers)]

    def request_finished(self, request: Any, block_ids: Sequence[int]) -> bool:
        request_id = request.request_id
        if not self.scheduler.is_tracked(request_id):
            return False
        loading = self.scheduler.tracker(request_id).state == LOADING
        hold = self._strict("request_finished", self.scheduler.request_finished, VllmRequestView(request), block_ids)
        if hold and not loading:
            self._held.add(request_id)
            return True
        return False

    def has_pending_work(self) -> bool:
        tier_jobs = self.tiers is not None and bool(self.tiers.tier_jobs_in_flight)
        return bool(self.scheduler.has_pending_work() or self._held or self._to_release or tier_jobs)

    def reset_cache(self) -> None:
        self._strict("reset_cache", self.scheduler.reset_cache)

    def leaks(self) -> list[str]:
        """Scheduler and manager state left over, and blocks vLLM still keeps for us."""
        found = self.scheduler.leaks() + self.scheduler.manager.leaks()
        found += [f"vLLM still holds the blocks of {rid!r} for kvoffload" for rid in sorted(self._held)]
        found += [f"release of {rid!r} never reported to vLLM" for rid in self._to_release]
        found += self.tally.waiting()
        if self.tiers is not None:
            found += [
                f"tier job {job_id} ({job.kind} to {job.tier}) still in flight"
                for job_id, job in sorted(self.tiers.tier_jobs_in_flight.items())
            ]
        return found
