"""The scheduler side of the connector: drives every request's offload lifecycle.

vLLM-shaped, so an engine adapter is thin. Per engine step the engine calls, in this order:
``get_num_new_matched_tokens`` / ``update_state_after_alloc`` while it admits requests,
``build_connector_meta`` once with its decisions, runs the worker with the metadata, then
``update_connector_output`` with the worker's job outcomes; ``request_finished`` whenever a request
finishes or is aborted; ``reset_cache`` between steps.

Ordering rules (docs/design.md), each enforced here by the declared lifecycle:

1. ``request_finished`` only *records* the finish (trigger ``finish``). The manager hears
   ``on_request_finished`` inside ``build_connector_meta``, after that step's store jobs (the
   request's final ones included) were built (trigger ``signal``): the reference crash, a
   ``prepare_store`` for a request the manager already dropped, cannot happen.
2. A request's state is dropped (``clean``) only once signaled and with no job in flight; a
   preempted request is re-admitted (``resume``) only once its flushed stores reported.
3. Inside ``build_connector_meta``: update request states -> flushes for preempted requests and
   reused fenced blocks -> build store jobs (final ones included) and hand out the loads prepared
   during admission -> signal finished requests -> clean the drained.
4. A GPU block read by an in-flight store is fenced: if the engine hands it to new work, the store
   is flushed (the worker waits for it) before anything else runs in that step.
5. ``reset_cache`` makes every in-flight job stale (flushed next step, its completion counted and
   ignored apart from unpinning its CPU blocks); the manager is reset once they drained, and until
   then lookups miss and nothing new is stored. A reset that preempts running requests (vLLM's
   ``reset_running_requests=True``) is reported in the next SchedulerOutput, after any finish in
   between: such a preemption of a finished request is accepted and changes nothing.
6. Every public call checks its whole input before it changes anything: a call that raises has
   changed nothing (no store built for an earlier entry, no count advanced, no flush consumed).
   ``build_connector_meta`` checks each scheduled request and advances one that only computes in
   the same pass, and takes those counts back when a later entry is rejected.
7. Speculative decoding: draft tokens (``SchedulerOutput.num_draft_tokens``) count as computed only
   once the next output reports how many were rejected (``num_rejected_tokens``, which lowers the
   computed count as vLLM's ``update_from_output`` does); a chunk is stored only when every token
   in it is verified and computed, so neither a rejected draft's KV nor the final sampled token's
   slot is ever stored.
8. A tiering manager may answer a lookup ``None`` (a promotion from a secondary tier runs): the
   request is deferred as for a load in flight.
9. A GPU prefix-cache hit is stored no earlier than the step after its admission. The engine caches
   a block when it schedules the block's tokens, so a request admitted behind another in the same
   step can hit blocks that only this step's forward pass writes, while the worker runs the step's
   stores before the forward.
10. Sliding-window groups (``OffloadConfig.window_groups``, :mod:`kvoffload.offload.windows`): a
   chunk that lost only window blocks is stored without its window part, under its windowless key;
   a hit needs the window parts of its last window only, and a load refuses an engine block where
   a windowless chunk has nothing to write. A chunk is still one job with one outcome.
11. A load never writes a GPU block the engine already holds. A lookup behind a GPU prefix-cache hit
   that ends inside a chunk (on a block boundary, with ``OffloadConfig.null_block`` set) offers the
   rest of that chunk and the whole chunks after it; the load job names the null block at every
   position of the first chunk the hit covers (every group's), so the worker writes only the
   blocks allocated for the load: the hit's blocks may be shared with other running requests.

Sans-IO and deterministic: no threads, clocks, randomness or I/O; job ids count up from 1.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from typing import NamedTuple, Self

from kvoffload.lifecycles.invariants import JobView, ManagerEntryView, RequestView, SystemSnapshot
from kvoffload.lifecycles.job import JOB_LIFECYCLE, REQUEST_NOT_SIGNALED
from kvoffload.lifecycles.job import PREPARED as JOB_PREPARED
from kvoffload.lifecycles.request import (
    FINISHED_STATES,
    LOADING,
    NO_JOBS_IN_FLIGHT,
    PREEMPTED,
    REQUEST_LIFECYCLE,
    RUNNING,
    WAITING,
)
from kvoffload.offload.errors import LifecycleViolation
from kvoffload.offload.manager import CPUOffloadingManager
from kvoffload.offload.types import (
    NO_CONTEXT,
    ConnectorMetadata,
    ConnectorUpdate,
    EngineRequest,
    JobId,
    OffloadConfig,
    OffloadEvent,
    OffloadKey,
    RequestContext,
    RequestId,
    SchedulerOutput,
    TransferJob,
    WorkerOutput,
)
from kvoffload.offload.windows import first_window_chunk, longest_hit, windowless_key
from kvoffload.statemachine.runtime import DeclaredMachine, IllegalTransition
from kvoffload.statemachine.trace import TraceWriter


@dataclass(slots=True, eq=False)
class RequestTracker:
    """The scheduler's per-request record; ``state`` is only ever changed by the lifecycle."""

    request_id: RequestId
    request: EngineRequest
    state: str = WAITING
    # Tokens whose KV is in GPU memory at the start of the next step.
    num_computed_tokens: int = 0
    gpu_block_ids: list[int] = field(default_factory=list)
    # Store cursor: chunks [0, stored_chunks) were offered to prepare_store (or given up).
    stored_chunks: int = 0
    load_job: JobId | None = None
    store_jobs: set[JobId] = field(default_factory=set)
    # From the last lookup: where the loadable range starts and how many chunks hit.
    lookup_start_chunk: int = 0
    lookup_hit_chunks: int = 0
    # The keys of those chunks: a chunk found only without its window part has its windowless key.
    lookup_keys: tuple[OffloadKey, ...] = ()
    local_computed_tokens: int = 0
    # True when request_finished told the engine to keep the GPU blocks until we release them.
    holds_gpu_blocks: bool = False
    signals: int = 0
    # Of num_computed_tokens, the draft tokens of the last step not yet verified (speculative
    # decoding): never stored; the next SchedulerOutput says how many were rejected.
    draft_tokens: int = 0
    # From an admission with a GPU prefix-cache hit to the next build_connector_meta: the engine
    # caches a block as soon as it is scheduled (vLLM does), so the hit may be blocks that another
    # request computes in this very step's forward pass, after the worker ran this step's stores.
    gpu_hit_unwritten: bool = False

    def copy(self) -> RequestTracker:
        """An independent copy (the engine request, which the tracker never changes, is shared).

        Every field is carried over by ``dataclasses.replace``; the mutable ones are copied."""
        return replace(self, gpu_block_ids=self.gpu_block_ids.copy(), store_jobs=self.store_jobs.copy())


@dataclass(slots=True, eq=False)
class JobRecord:
    """A transfer job's lifecycle record; ``state`` is only ever changed by the job lifecycle."""

    job_id: JobId
    request_id: RequestId
    kind: str
    # The request's chunk indices the job copies, in order.
    chunks: tuple[int, ...]
    # The request's signal count when the job was built (the prepare guard reads it).
    request_signals: int
    state: str = JOB_LIFECYCLE.initial

    def copy(self) -> JobRecord:
        """An independent copy: every field is immutable, so ``dataclasses.replace`` carries each over."""
        return replace(self)


@dataclass
class SchedulerStats:
    """Counters since construction."""

    lookups: int = 0
    hit_tokens: int = 0
    loads: int = 0
    loaded_chunks: int = 0
    load_failures: int = 0
    stores: int = 0
    stored_chunks: int = 0
    # Of stored_chunks, those stored without their sliding-window part (offload/windows.py).
    windowless_chunks: int = 0
    store_failures: int = 0
    store_allocation_failures: int = 0
    flushes: int = 0
    fence_flushes: int = 0
    deferred_lookups: int = 0
    stale_completions: int = 0
    resets: int = 0
    finished: int = 0
    # request_finished calls for requests the connector never tracked (aborted before any lookup).
    unknown_finished: int = 0
    cleaned: int = 0


def _copy_stats(stats: SchedulerStats) -> SchedulerStats:
    clone = object.__new__(SchedulerStats)
    clone.__dict__.update(stats.__dict__)
    return clone


def _no_jobs_in_flight(tracker: RequestTracker) -> bool:
    return tracker.load_job is None and not tracker.store_jobs


def request_machine() -> DeclaredMachine:
    """A runtime for REQUEST_LIFECYCLE with the scheduler's guard implementations."""
    return DeclaredMachine(REQUEST_LIFECYCLE, guards={NO_JOBS_IN_FLIGHT: _no_jobs_in_flight}, id_attribute="request_id")


def _request_not_signaled(job: JobRecord) -> bool:
    return job.request_signals == 0


def job_machine() -> DeclaredMachine:
    """A runtime for JOB_LIFECYCLE with the scheduler's guard implementations."""
    return DeclaredMachine(JOB_LIFECYCLE, guards={REQUEST_NOT_SIGNALED: _request_not_signaled}, id_attribute="job_id")


# What a trace records of the scheduler's and the manager's calls (see attach_trace).
TRACED_SCHEDULER_CALLS: tuple[str, ...] = (
    "get_num_new_matched_tokens", "update_state_after_alloc", "request_finished", "build_connector_meta",
    "update_connector_output", "reset_cache",
)
TRACED_MANAGER_CALLS: tuple[str, ...] = (
    "on_new_request", "lookup", "touch", "prepare_load", "complete_load", "prepare_store", "complete_store",
    "on_request_finished", "reset_cache",
)


def _call_fields(call: str, args: tuple[object, ...]) -> dict[str, object]:
    # The first argument names the request (an engine request, or its id), if the call has one.
    if not args or call in ("build_connector_meta", "update_connector_output"):
        return {}
    first = args[0]
    return {"id": getattr(first, "request_id", first)}


def job_variables(job: JobRecord) -> dict[str, object]:
    """What a trace records of a job: its request, kind, chunks and the prepare guard's variable."""
    return {"request": job.request_id, "kind": job.kind, "chunks": list(job.chunks),
            "request_signals": job.request_signals}


class SchedulerState(NamedTuple):
    """A read-only view of the scheduler's tables (live references: read them, never change them).

    ``jobs`` are the jobs in flight, ``stale_jobs`` those made stale by ``reset_cache``;
    ``pending_loads`` were prepared during admission and not yet handed to the worker;
    ``pending_flush`` are to be flushed in the next metadata, ``flushed`` were flushed and not yet
    reported; ``finished_pending`` finished since the last ``build_connector_meta``;
    ``released`` / ``loaded`` / ``load_failed`` are what the next ``ConnectorUpdate`` reports;
    ``fence`` maps a GPU block to the store jobs still reading it; ``keys_loading`` counts the
    loads in flight per key; ``reset_pending``: a ``reset_cache`` waits for stale jobs to drain.
    """

    trackers: Mapping[RequestId, RequestTracker]
    jobs: Mapping[JobId, TransferJob]
    stale_jobs: Mapping[JobId, TransferJob]
    pending_loads: Sequence[TransferJob]
    pending_flush: Collection[JobId]
    flushed: AbstractSet[JobId]
    finished_pending: Collection[RequestId]
    released: Sequence[RequestId]
    loaded: Sequence[RequestId]
    load_failed: Sequence[RequestId]
    fence: Mapping[int, AbstractSet[JobId]]
    keys_loading: Mapping[OffloadKey, int]
    reset_pending: bool


class UnknownJob(ValueError):
    """A worker reported a job the scheduler never handed out, or one already completed."""


def _count(value: object, call: str, what: str) -> int:
    """``value`` as a non-negative int, or a TypeError / ValueError naming ``call`` and ``what``."""
    if type(value) is int and value >= 0:  # the hot path: one check per scheduled request
        return value
    if isinstance(value, bool):
        raise TypeError(f"{call}: {what} must be an int, got {value!r}")
    try:
        number = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{call}: {what} must be an int, got {value!r}") from None
    if number < 0:
        raise ValueError(f"{call}: {what} must be >= 0, got {number}")
    return number


def _counts(values: Iterable[object], call: str, what: str) -> Sequence[int]:
    """``values`` as non-negative ints: ``values`` itself when it is a list or tuple of such ints
    (no copy on the hot path), otherwise a converted list (see :func:`_count`)."""
    if type(values) is list or type(values) is tuple:
        for value in values:
            if type(value) is not int or value < 0:
                break
        else:
            return values  # type: ignore[return-value]
    return [_count(value, call, what) for value in values]


# _undo_advance's stop when every scheduled entry was advanced: it matches none.
_EVERY_ENTRY = object()


class OffloadingScheduler:
    """Decides which chunks are stored, which are loaded back, and when a request is forgotten."""

    def __init__(
        self,
        config: OffloadConfig,
        manager: CPUOffloadingManager | None = None,
        lifecycle: DeclaredMachine | None = None,
        job_lifecycle: DeclaredMachine | None = None,
    ) -> None:
        self.config = config
        self.manager = manager if manager is not None else CPUOffloadingManager(config.num_cpu_blocks, config.policy)
        self.lifecycle = lifecycle if lifecycle is not None else request_machine()
        self.job_lifecycle = job_lifecycle if job_lifecycle is not None else job_machine()
        self.step = 0
        self.stats = SchedulerStats()
        self._chunk_tokens = config.chunk_tokens
        self._blocks_per_chunk = config.blocks_per_chunk
        self._gpu_blocks_per_chunk = config.gpu_blocks_per_chunk
        self._null_block = config.null_block
        self._window_groups = frozenset(group for group, _ in config.window_groups)
        self._windows = tuple(window for _, window in config.window_groups)
        self._trackers: dict[RequestId, RequestTracker] = {}
        self._jobs: dict[JobId, TransferJob] = {}
        # Every job not yet ended, with its lifecycle state.
        self._job_records: dict[JobId, JobRecord] = {}
        self._stale_jobs: dict[JobId, TransferJob] = {}
        self._next_job_id = 1
        self._pending_loads: list[TransferJob] = []
        self._pending_flush: dict[JobId, None] = {}
        self._flushed: set[JobId] = set()
        self._finished_pending: dict[RequestId, RequestTracker] = {}
        self._released: list[RequestId] = []
        self._loaded: list[RequestId] = []
        self._load_failed: list[RequestId] = []
        # GPU block -> store jobs still reading it.
        self._fence: dict[int, set[JobId]] = {}
        # Keys being loaded right now, so a second request waits for the first load instead of
        # loading the same chunks twice (it then finds them in the GPU prefix cache).
        self._keys_loading: Counter[OffloadKey] = Counter()
        self._reset_pending = False

    # ------------------------------------------------------------------ admission
    def get_num_new_matched_tokens(self, request: EngineRequest, num_computed_tokens: int) -> tuple[int | None, bool]:
        """Tokens beyond ``num_computed_tokens`` that can be loaded from CPU, and whether the load
        is asynchronous. ``(None, False)`` asks the engine to try again next step: the request's
        flushed stores are still draining, or its chunks are being loaded by another request."""
        request_id = request.request_id
        call = f"get_num_new_matched_tokens for request {request_id!r}"
        num_computed_tokens = _count(num_computed_tokens, call, "num_computed_tokens")
        if num_computed_tokens > request.num_tokens:
            raise ValueError(
                f"get_num_new_matched_tokens for request {request_id!r}: num_computed_tokens="
                f"{num_computed_tokens} outside [0, {request.num_tokens}]"
            )
        tracker = self._trackers.get(request_id)
        if tracker is None:
            # Engines without tenants (the simulator) have no cache_salt.
            salt = getattr(request, "cache_salt", None)
            self.manager.on_new_request(request_id, RequestContext(salt) if salt else NO_CONTEXT)
            tracker = RequestTracker(request_id=request_id, request=request)
            self._trackers[request_id] = tracker
        elif self.lifecycle.declares(tracker, "resume"):
            if not self.lifecycle.can_fire(tracker, "resume"):
                self.stats.deferred_lookups += 1
                return None, False
            self.lifecycle.fire(tracker, "resume")
        # Raises, changing nothing, unless the request is waiting (a preempted one was resumed).
        self.lifecycle.fire(tracker, "lookup")
        tracker.request = request
        tracker.local_computed_tokens = num_computed_tokens
        tracker.lookup_hit_chunks = 0
        tracker.lookup_keys = ()
        # Set before any early return: update_state_after_alloc reads it for this admission.
        start = num_computed_tokens // self._chunk_tokens
        tracker.lookup_start_chunk = start
        self.stats.lookups += 1
        if self._reset_pending or not self._may_load_behind(num_computed_tokens):
            return 0, False
        # At least one token is left for the engine to compute, so it has logits to sample from.
        last = min(len(request.block_hashes) // self._blocks_per_chunk, (request.num_tokens - 1) // self._chunk_tokens)
        keys = self._keys(request, start, last)
        if not keys:
            return 0, False
        if self._windows:
            keys = self._lookup_keys(keys)
        hits = self.manager.lookup(request_id, keys)
        if hits is None:
            # A tiering manager is promoting these chunks from a secondary tier: ask again later.
            self.stats.deferred_lookups += 1
            return None, False
        if hits and self._windows:
            hits = self._window_hit(request, start, keys[:hits])
        if not hits:
            return 0, False
        hit_keys = keys[:hits]
        if any(key in self._keys_loading for key in hit_keys):
            self.stats.deferred_lookups += 1
            return None, False
        self.manager.touch(request_id, hit_keys)
        tracker.lookup_hit_chunks = hits
        tracker.lookup_keys = tuple(hit_keys)
        return (start + hits) * self._chunk_tokens - num_computed_tokens, True

    def offer_within(self, num_computed_tokens: int, max_tokens: int) -> int:
        """The most tokens a load behind ``num_computed_tokens`` may cover within ``max_tokens``
        (an engine's cap on a lookup's offer): a load ends on a chunk boundary."""
        chunk = self._chunk_tokens
        return max(0, (num_computed_tokens + max_tokens) // chunk * chunk - num_computed_tokens)

    def _may_load_behind(self, num_computed_tokens: int) -> bool:
        """Whether a load may start at ``num_computed_tokens``: on a chunk boundary, or inside a
        chunk behind whole GPU blocks when the engine has a null block to name in the load job
        where its prefix cache already holds the chunk's first blocks (never written)."""
        if not num_computed_tokens % self._chunk_tokens:
            return True
        return self._null_block is not None and not num_computed_tokens % self.config.gpu_block_size

    def _lookup_keys(self, keys: list[OffloadKey]) -> list[OffloadKey]:
        """Each chunk's key, or its windowless key where only that one is held (in CPU memory or,
        under a tiering manager, in the file tier the CPU tier evicted it to)."""
        holds = self.manager.holds
        return [windowless if not holds(key) and holds(windowless := windowless_key(key)) else key for key in keys]

    def _window_hit(self, request: EngineRequest, start: int, found: Sequence[OffloadKey]) -> int:
        """How many ``found`` chunks a hit may use: its last window must have every window part."""
        full = self._keys(request, start, start + len(found))
        return longest_hit(start, [key != own for key, own in zip(found, full, strict=True)], self._first_window_chunk)

    def _first_window_chunk(self, end_chunk: int) -> int:
        return first_window_chunk(end_chunk, self._chunk_tokens, self.config.gpu_block_size, self._windows)

    def update_state_after_alloc(
        self, request: EngineRequest, block_ids: Sequence[int], num_external_tokens: int
    ) -> None:
        """The engine allocated ``block_ids`` (all the request's GPU blocks) and will load
        ``num_external_tokens`` (0 or what the lookup offered) from CPU."""
        tracker = self._tracker(request.request_id, "update_state_after_alloc")
        call = f"update_state_after_alloc for request {tracker.request_id!r}"
        block_ids = [_count(block, call, "a GPU block id") for block in block_ids]
        num_external_tokens = _count(num_external_tokens, call, "num_external_tokens")
        if self.lifecycle.declares(tracker, "realloc"):
            self.lifecycle.fire(tracker, "realloc")
            self._fence_check(block_ids)
            tracker.gpu_block_ids = block_ids
            return
        # A first allocation is for a request the engine is about to schedule.
        self._require_trigger(tracker, "schedule")
        local = tracker.local_computed_tokens
        offered = (tracker.lookup_start_chunk + tracker.lookup_hit_chunks) * self._chunk_tokens - local
        ends_a_chunk = not (local + num_external_tokens) % self._chunk_tokens
        if num_external_tokens and (num_external_tokens > offered or not ends_a_chunk):
            raise ValueError(
                f"{call}: num_external_tokens={num_external_tokens} must be 0 or end a chunk of "
                f"{self._chunk_tokens} tokens behind num_computed_tokens={local}, at most {offered} "
                "(what the last lookup offered)"
            )
        if num_external_tokens and self._reset_pending:
            # The offer came from a lookup before reset_cache: its keys belong to the dropped cache
            # (pinning them would block the manager's reset). The engine must look up again.
            raise ValueError(
                f"{call}: num_external_tokens={num_external_tokens} after reset_cache: look the request up again"
            )
        start = tracker.lookup_start_chunk
        chunks = (local + num_external_tokens) // self._chunk_tokens - start if num_external_tokens else 0
        needed_blocks = (start + chunks) * self._gpu_blocks_per_chunk
        if len(block_ids) < needed_blocks:
            raise ValueError(
                f"{call}: {len(block_ids)} GPU blocks cannot hold {start + chunks} chunks of "
                f"{self._gpu_blocks_per_chunk} blocks"
            )
        if not chunks:
            self._fence_check(block_ids)
            tracker.gpu_block_ids = block_ids
            tracker.num_computed_tokens = tracker.local_computed_tokens
            tracker.stored_chunks = 0
            tracker.gpu_hit_unwritten = tracker.local_computed_tokens > 0
            self.lifecycle.fire(tracker, "schedule")
            return
        keys = list(tracker.lookup_keys[:chunks])
        if self._windows:
            self._check_window_load(call, tracker, keys, block_ids)
        # The last call that may raise (it checks before it pins): nothing was changed before it.
        cpu_block_ids = self.manager.prepare_load(tracker.request_id, keys)
        self._fence_check(block_ids)
        tracker.gpu_block_ids = block_ids
        job = self._new_job(
            tracker, "load", keys, self._load_targets(block_ids, start, needed_blocks, local), cpu_block_ids,
            tuple(range(start, start + chunks)),
        )
        tracker.load_job = job.job_id
        self._pending_loads.append(job)
        self._keys_loading.update(keys)
        tracker.num_computed_tokens = (start + chunks) * self._chunk_tokens
        tracker.stored_chunks = start + chunks
        self.stats.loads += 1
        self.stats.loaded_chunks += chunks
        self.stats.hit_tokens += num_external_tokens
        self.lifecycle.fire(tracker, "load")

    def _check_window_load(
        self, call: str, tracker: RequestTracker, keys: Sequence[OffloadKey], block_ids: Sequence[int]
    ) -> None:
        """A chunk loaded without its window part must have the null block in every window
        group's position the load writes: the engine counts those tokens computed, so a block of
        its own there would be marked loaded with nothing written into it. The positions its
        prefix cache holds (behind a GPU hit inside the first chunk) are its own and not written."""
        start = tracker.lookup_start_chunk
        held = tracker.local_computed_tokens // self.config.gpu_block_size * self.config.kv_groups
        full = self._keys(tracker.request, start, start + len(keys))
        per_chunk = self._gpu_blocks_per_chunk
        kv_groups = self.config.kv_groups
        for offset, (key, own) in enumerate(zip(keys, full, strict=True)):
            if key == own:
                continue
            first = (start + offset) * per_chunk
            for index in range(max(first, held), first + per_chunk):
                if index % kv_groups in self._window_groups and block_ids[index] != self._null_block:
                    raise ValueError(
                        f"{call}: chunk {start + offset} is stored without its sliding-window part, but the "
                        f"engine gave its window group block {block_ids[index]}, not the null block: that "
                        f"block would count as loaded with nothing loaded into it"
                    )

    def _load_targets(self, block_ids: Sequence[int], start: int, end: int, local: int) -> tuple[int, ...]:
        """The GPU blocks a load from chunk ``start`` up to request block ``end`` writes, one per
        position of its chunks: the null block at each position the engine's prefix cache already
        holds (the blocks below ``local`` tokens, every group's), which the worker never writes;
        those blocks may be shared with other running requests."""
        first = start * self._gpu_blocks_per_chunk
        held = local // self.config.gpu_block_size * self.config.kv_groups - first
        targets = tuple(block_ids[first:end])
        null = self._null_block
        if held <= 0 or null is None:  # None: _may_load_behind offered no hit inside a chunk
            return targets
        return (null,) * held + targets[held:]

    def preempt_between_steps(self, request_id: RequestId) -> None:
        """The engine took a running request's GPU blocks back between two steps and is about to
        look it up again, before any SchedulerOutput could say so (vLLM's
        ``reset_prefix_cache(reset_running_requests=True)`` without a connector reset): the
        preemption applies now (its stores are flushed in the next metadata, and their blocks are
        fenced). The engine must leave the request out of the next SchedulerOutput's ``preempted``."""
        tracker = self._tracker(request_id, "preempt_between_steps")
        self._require_trigger(tracker, "preempt")
        self._preempt(tracker)

    # ------------------------------------------------------------------ finish
    def request_finished(self, request: EngineRequest, block_ids: Sequence[int]) -> bool:
        """Record that the request finished or was aborted; ``block_ids`` are its GPU blocks.

        Returns True when the engine must keep those blocks until ``update_connector_output``
        lists the request as released (its final stores or its load still use them). A request the
        connector never tracked (aborted before its lookup) returns False and is counted in
        ``stats.unknown_finished``; finishing a tracked request twice raises."""
        tracker = self._trackers.get(request.request_id)
        if tracker is None:
            # vLLM frees requests aborted before any lookup too: nothing of theirs to keep.
            self.stats.unknown_finished += 1
            return False
        call = f"request_finished for request {tracker.request_id!r}"
        block_ids = [_count(block, call, "a GPU block id") for block in block_ids]
        was = tracker.state
        self.lifecycle.fire(tracker, "finish")
        self.stats.finished += 1
        # Unverified drafts are never stored: treat them as rejected.
        tracker.num_computed_tokens -= tracker.draft_tokens
        tracker.draft_tokens = 0
        if was == PREEMPTED:
            tracker.gpu_block_ids = []
        elif was in (RUNNING, WAITING):
            tracker.gpu_block_ids = block_ids
        in_use = tracker.load_job is not None or tracker.store_jobs or self._chunks_to_store(tracker)
        tracker.holds_gpu_blocks = bool(in_use)
        if not tracker.holds_gpu_blocks:
            tracker.gpu_block_ids = []
        self._finished_pending[tracker.request_id] = tracker
        return tracker.holds_gpu_blocks

    # ------------------------------------------------------------------ per step
    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> ConnectorMetadata:
        """Turn the engine's decisions for this step into the worker's metadata.

        The whole output is checked before anything is applied: an unknown request, a request in a
        state that cannot be preempted or scheduled, a request both preempted and given work, or a
        count that is not a non-negative int raises and changes nothing."""
        preempted, new_block_ids, rejected = self._checked_output(scheduler_output)
        # Checks the rest and advances the requests that only compute tokens this step; the rest
        # comes back (raises having changed nothing).
        deferred, drafts = self._advance_scheduled(scheduler_output, preempted, rejected)
        self.step += 1
        for request_id in scheduler_output.preempted:
            if request_id in preempted:
                self._preempt(self._trackers[request_id])
        for request_id, count in rejected.items():
            tracker = self._trackers[request_id]
            if tracker.draft_tokens:
                # As vLLM's update_from_output: rejected drafts are no longer computed.
                tracker.num_computed_tokens -= count
                tracker.draft_tokens = 0
        for request_id, block_ids in new_block_ids.items():
            self._trackers[request_id].gpu_block_ids.extend(block_ids)
            self._fence_check(block_ids)
        flush = tuple(self._pending_flush)
        self._pending_flush.clear()
        self._flushed.update(flush)
        self.stats.flushes += len(flush)
        records = self._job_records
        for job_id in flush:
            record = records.get(job_id)
            if record is not None:  # None: it ended before its flush was handed out
                self.job_lifecycle.fire(record, "flush")

        stores: list[TransferJob] = []
        chunk_tokens = self._chunk_tokens
        storing = not self._reset_pending
        schedulable = self.lifecycle.sources["schedule"]
        for tracker, num_tokens in deferred:
            if tracker.state in schedulable:
                # After reset_cache a running request is tracked as waiting; being scheduled again
                # makes it running (_advance_scheduled rejected every other state).
                self.lifecycle.fire(tracker, "schedule")
            computed = tracker.num_computed_tokens
            if tracker.gpu_hit_unwritten:
                # Its hit is written by this step's forward at the latest: stored from the next step on.
                tracker.gpu_hit_unwritten = False
            elif storing and computed >= (tracker.stored_chunks + 1) * chunk_tokens:
                self._build_stores(tracker, stores, final=False)
            tracker.num_computed_tokens = computed + num_tokens
        for request_id, count in drafts.items():
            self._trackers[request_id].draft_tokens = count

        loads = tuple(self._pending_loads)
        self._pending_loads.clear()
        for tracker in list(self._finished_pending.values()):
            if tracker.gpu_hit_unwritten:
                # Finished between its admission and this step (not in vLLM's call order): its blocks
                # may still be unwritten, so its chunks are given up rather than stored.
                tracker.stored_chunks = max(tracker.stored_chunks, self._storable_chunks(tracker))
                tracker.gpu_hit_unwritten = False
            elif storing:
                self._build_stores(tracker, stores, final=True)
            self._signal(tracker)
        self._finished_pending.clear()
        for job in (*stores, *loads):
            self.job_lifecycle.fire(records[job.job_id], "submit")
        return ConnectorMetadata(self.step, flush, tuple(stores), loads)

    def _checked_output(
        self, scheduler_output: SchedulerOutput
    ) -> tuple[set[RequestId], dict[RequestId, Sequence[int]], dict[RequestId, int]]:
        """Validate a SchedulerOutput's preemptions, new blocks and rejected drafts; returns the
        preempted ids, the new blocks and the rejected drafts as ints."""
        call = "build_connector_meta"
        preempted = set()
        finished_since: set[RequestId] = set()
        for request_id in scheduler_output.preempted:
            tracker = self._tracker(request_id, f"{call}(preempted)")
            if request_id in preempted or request_id in finished_since:
                raise ValueError(f"{call}: request {request_id!r} is listed twice in preempted")
            if tracker.state in FINISHED_STATES:
                # Preempted between two steps (vLLM's reset_prefix_cache(reset_running_requests=True)),
                # then finished or aborted before this step: vLLM reports such a preemption only in
                # the next SchedulerOutput. request_finished was given no GPU blocks, so nothing of
                # the request is stored and there is nothing to undo.
                finished_since.add(request_id)
                continue
            self._require_trigger(tracker, "preempt")
            preempted.add(request_id)
        new_block_ids: dict[RequestId, Sequence[int]] = {}
        for request_id, block_ids in scheduler_output.new_block_ids.items():
            self._tracker(request_id, f"{call}(new_block_ids)")
            if request_id in preempted:
                raise ValueError(f"{call}: request {request_id!r} is both preempted and given new GPU blocks")
            new_block_ids[request_id] = _counts(block_ids, f"{call} for request {request_id!r}", "a new GPU block id")
        rejected = self._checked_rejections(scheduler_output.num_rejected_tokens, preempted)
        return preempted, new_block_ids, rejected

    def _advance_scheduled(
        self, scheduler_output: SchedulerOutput, preempted: AbstractSet[RequestId], rejected: Mapping[RequestId, int]
    ) -> tuple[list[tuple[RequestTracker, int]], dict[RequestId, int]]:
        """Check every ``num_scheduled_tokens`` entry and the draft counts, and advance the computed
        count of each request that only computes this step (running, no drafts to verify, no
        chunk to store). Returns the others as (tracker, tokens scheduled as an int), in order,
        and the draft counts as ints. Raises having changed nothing: what it advanced is undone.

        Checking and advancing in one pass touches each tracker once: at 10^4 live requests a
        second pass over them costs as much again in cache misses (docs/benchmarks.md, "Connector and
        lifecycle overhead"). It allocates nothing per request that only computes, so Python's
        full garbage collections stay rare."""
        scheduled = scheduler_output.num_scheduled_tokens
        if type(scheduled) is not dict:
            # Iterating a plain dict cannot raise between two entries, so an error names the entry
            # that was not advanced; any other mapping is copied first (before anything changes).
            scheduled = dict(scheduled)
        trackers = self._trackers
        storing = not self._reset_pending
        chunk_tokens = self._chunk_tokens
        deferred: list[tuple[RequestTracker, int]] = []
        advanced_all = False
        request_id: object = None
        try:
            for request_id, num_tokens in scheduled.items():
                tracker = trackers.get(request_id)
                # The fast path of a running request; _checked_scheduled checks the rest against
                # the declared table. A state comparison: a table lookup per request per step costs.
                if (
                    tracker is None or tracker.state != RUNNING or tracker.draft_tokens
                    or type(num_tokens) is not int or num_tokens < 0 or (preempted and request_id in preempted)
                ):
                    deferred.append(self._checked_scheduled(request_id, tracker, num_tokens, preempted, rejected))
                    continue
                computed = tracker.num_computed_tokens
                # A GPU hit's first step is deferred even when it stores nothing (after reset_cache,
                # or a hit short of a chunk): build_connector_meta clears gpu_hit_unwritten there.
                if tracker.gpu_hit_unwritten or (storing and computed >= (tracker.stored_chunks + 1) * chunk_tokens):
                    deferred.append((tracker, num_tokens))
                else:
                    tracker.num_computed_tokens = computed + num_tokens
            advanced_all = True
            drafts = self._checked_drafts(scheduler_output)
        except BaseException:
            self._undo_advance(scheduled, _EVERY_ENTRY if advanced_all else request_id, deferred)
            raise
        return deferred, drafts

    def _undo_advance(
        self, scheduled: Mapping[RequestId, object], stop: object, deferred: list[tuple[RequestTracker, int]]
    ) -> None:
        """Take back what _advance_scheduled advanced, up to the entry ``stop`` (excluded)."""
        not_advanced = {id(tracker) for tracker, _ in deferred}
        for request_id, num_tokens in scheduled.items():
            if request_id is stop:
                return
            tracker = self._trackers[request_id]
            if id(tracker) not in not_advanced:
                tracker.num_computed_tokens -= num_tokens  # type: ignore[operator]

    def _checked_drafts(self, scheduler_output: SchedulerOutput) -> dict[RequestId, int]:
        """num_draft_tokens as ints, each for a request scheduled with at least as many tokens."""
        drafts: dict[RequestId, int] = {}
        for request_id, count in scheduler_output.num_draft_tokens.items():
            what = f"build_connector_meta for request {request_id!r}"
            tokens = scheduler_output.num_scheduled_tokens.get(request_id)
            if tokens is None:
                raise ValueError(f"{what}: num_draft_tokens for a request not scheduled in this step")
            drafts[request_id] = _count(count, what, "num_draft_tokens")
            if drafts[request_id] > tokens:
                raise ValueError(f"{what}: num_draft_tokens={count} exceeds its {tokens} scheduled token(s)")
        return drafts

    def _checked_scheduled(
        self,
        request_id: RequestId,
        tracker: RequestTracker | None,
        num_tokens: object,
        preempted: AbstractSet[RequestId],
        rejected: Mapping[RequestId, int],
    ) -> tuple[RequestTracker, int]:
        """The full check of one ``num_scheduled_tokens`` entry; returns its tracker and its count
        as an int."""
        call = "build_connector_meta"
        if tracker is None:
            raise LifecycleViolation(
                "KnownRequest", request_id, call, "unknown", "scheduled without get_num_new_matched_tokens"
            )
        if request_id in preempted:
            raise ValueError(f"{call}: request {request_id!r} is both preempted and scheduled")
        if tracker.state != RUNNING:
            self._require_trigger(tracker, "schedule")
        count = _count(num_tokens, f"{call} for request {request_id!r}", "num_scheduled_tokens")
        if tracker.draft_tokens and request_id not in rejected:
            raise ValueError(
                f"{call}: request {request_id!r} is scheduled with {tracker.draft_tokens} unverified draft "
                f"token(s) of its last step; report how many were rejected in num_rejected_tokens"
            )
        return tracker, count

    def _checked_rejections(
        self, rejections: Mapping[RequestId, int], preempted: set[RequestId]
    ) -> dict[RequestId, int]:
        """num_rejected_tokens as ints, each at most the request's unverified drafts (a finished or
        preempted request's drafts were already dropped: any count is accepted and ignored)."""
        checked: dict[RequestId, int] = {}
        for request_id, count in rejections.items():
            tracker = self._tracker(request_id, "build_connector_meta(num_rejected_tokens)")
            what = f"build_connector_meta for request {request_id!r}"
            checked[request_id] = _count(count, what, "num_rejected_tokens")
            live = tracker.state in (RUNNING, WAITING) and request_id not in preempted
            if live and checked[request_id] > tracker.draft_tokens:
                raise ValueError(
                    f"{what}: num_rejected_tokens={count} exceeds its {tracker.draft_tokens} unverified draft token(s)"
                )
        return checked

    def _require_trigger(self, tracker: RequestTracker, trigger: str) -> None:
        """Raise what ``lifecycle.fire`` would, without firing (for checks before applying)."""
        if not self.lifecycle.can_fire(tracker, trigger):
            raise IllegalTransition(
                self.lifecycle.declaration.name, tracker.request_id, tracker.state, trigger,
                self.lifecycle.allowed_triggers(tracker.state),
            )

    def update_connector_output(self, worker_output: WorkerOutput) -> ConnectorUpdate:
        """Apply the worker's job outcomes; returns what the engine must act on.

        Every outcome is checked first: a job id that is not an int, a job never issued, already
        completed, or prepared but not yet handed out in a ConnectorMetadata, or an outcome that is
        not a bool raises (``UnknownJob`` / ``TypeError``) and nothing is applied. ``loaded`` and
        ``load_failed`` list only requests still live (a load of a request that finished meanwhile
        is not reported: the engine frees it through ``released``)."""
        completed = dict(worker_output.completed)
        records = self._job_records
        for job_id, ok in completed.items():
            if isinstance(job_id, bool) or not isinstance(job_id, int):
                raise UnknownJob(f"worker reported job {job_id!r}, which is not an int job id; nothing was applied")
            if not isinstance(ok, bool):
                raise TypeError(f"worker reported job {job_id} with outcome {ok!r}, not a bool; nothing was applied")
            record = records.get(job_id)
            if record is None:
                state = "already completed" if 0 < job_id < self._next_job_id else "never issued"
                raise UnknownJob(f"worker reported job {job_id}, which was {state}; nothing was applied")
            if record.state == JOB_PREPARED:
                raise UnknownJob(
                    f"worker reported job {job_id}, which was not yet handed out in a ConnectorMetadata; "
                    f"nothing was applied"
                )
        for job_id, ok in completed.items():
            self._complete(job_id, ok)
        if self._reset_pending and not self._stale_jobs:
            self._finish_reset()
        update = ConnectorUpdate(tuple(self._loaded), tuple(self._load_failed), tuple(self._released))
        self._loaded.clear()
        self._load_failed.clear()
        self._released.clear()
        return update

    # ------------------------------------------------------------------ reset
    def reset_cache(self) -> tuple[RequestId, ...]:
        """Forget everything offloaded. Returns the requests whose load was cancelled: the engine
        must recompute those tokens. In-flight jobs become stale and are flushed next step."""
        self.stats.resets += 1
        cancelled_loads: list[RequestId] = []
        for tracker in list(self._trackers.values()):
            for job_id in self._detach_jobs(tracker):
                self._stale_jobs[job_id] = self._jobs.pop(job_id)
                self._pending_flush[job_id] = None
                self.job_lifecycle.fire(self._job_records[job_id], "reset")
            if self.lifecycle.declares(tracker, "reset"):
                if tracker.state == LOADING:
                    cancelled_loads.append(tracker.request_id)
                    tracker.num_computed_tokens = tracker.local_computed_tokens
                self.lifecycle.fire(tracker, "reset")
                tracker.stored_chunks = 0
            elif self.lifecycle.declares(tracker, "signal"):
                self._signal(tracker)
            elif self.lifecycle.declares(tracker, "clean"):
                self._clean(tracker)
        self._finished_pending.clear()
        # Loads prepared this step but not yet handed to the worker never start: unpin them now
        # instead of flushing a job the worker never saw.
        for job in self._pending_loads:
            self._complete(job.job_id, False)
            # Admitted this step: its GPU hit may be blocks that only this step's forward pass
            # writes (rule 9), and it now recomputes from that hit as if admitted without a load.
            tracker = self._trackers.get(job.request_id)
            if tracker is not None and tracker.state == WAITING:
                tracker.gpu_hit_unwritten = tracker.local_computed_tokens > 0
        self._pending_loads = []
        if self._stale_jobs:
            self._reset_pending = True
        else:
            self._finish_reset()
        return tuple(cancelled_loads)

    def _finish_reset(self) -> None:
        self._reset_pending = False
        self.manager.reset_cache()

    # ------------------------------------------------------------------ internals
    def _tracker(self, request_id: RequestId, call: str) -> RequestTracker:
        tracker = self._trackers.get(request_id)
        if tracker is None:
            raise LifecycleViolation(
                "KnownRequest", request_id, call, "unknown",
                "the scheduler does not track this request (never looked up, or already cleaned)",
            )
        return tracker

    def _keys(self, request: EngineRequest, first_chunk: int, end_chunk: int) -> list[OffloadKey]:
        hashes = request.block_hashes
        blocks_per_chunk = self._blocks_per_chunk
        return [hashes[(chunk + 1) * blocks_per_chunk - 1] for chunk in range(first_chunk, end_chunk)]

    def _storable_chunks(self, tracker: RequestTracker) -> int:
        # Only verified tokens: a chunk holding a draft's KV is stored once its drafts are accepted.
        return min(
            (tracker.num_computed_tokens - tracker.draft_tokens) // self._chunk_tokens,
            len(tracker.request.block_hashes) // self._blocks_per_chunk,
            len(tracker.gpu_block_ids) // self._gpu_blocks_per_chunk,
        )

    def _chunks_to_store(self, tracker: RequestTracker) -> int:
        return max(0, self._storable_chunks(tracker) - tracker.stored_chunks)

    def _new_job(
        self,
        tracker: RequestTracker,
        kind: str,
        keys: Sequence[OffloadKey],
        gpu_block_ids: tuple[int, ...],
        cpu_block_ids: tuple[int, ...],
        chunks: tuple[int, ...],
    ) -> TransferJob:
        job = TransferJob(self._next_job_id, tracker.request_id, kind, tuple(keys), gpu_block_ids, cpu_block_ids)  # type: ignore[arg-type]
        self._next_job_id += 1
        self._jobs[job.job_id] = job
        record = JobRecord(
            job_id=job.job_id, request_id=tracker.request_id, kind=kind, chunks=chunks, request_signals=tracker.signals
        )
        self._job_records[job.job_id] = record
        self.job_lifecycle.fire(record, "prepare")
        return job

    def _build_stores(self, tracker: RequestTracker, out: list[TransferJob], final: bool) -> None:
        first = tracker.stored_chunks
        end = self._storable_chunks(tracker)
        if end <= first:
            return
        # Without a null block every chunk is complete: one run, and no generator built per store.
        runs = ((first, end, False),) if self._null_block is None else self._complete_runs(tracker, first, end)
        for run_first, run_end, windowless in runs:
            if not self._store_run(tracker, run_first, run_end, out, windowless):
                # Nothing will free blocks for a finished request's sake: give its chunks up.
                tracker.stored_chunks = end if final else run_first
                return
        # A chunk naming the null block lost a group's block for good: this request never stores it.
        tracker.stored_chunks = end

    def _complete_runs(self, tracker: RequestTracker, first: int, end: int) -> Iterator[tuple[int, int, bool]]:
        """The runs of chunks in ``[first, end)`` whose every GPU block holds their tokens, or
        (True) every full-attention one while a window group's block was freed. Needs
        ``OffloadConfig.null_block``: without it no block is ever lost (_build_stores)."""
        null = self._null_block
        per_chunk = self._gpu_blocks_per_chunk
        kv_groups = self.config.kv_groups
        window_groups = self._window_groups
        blocks = tracker.gpu_block_ids
        run_first, run_windowless = first, False
        for chunk in range(first, end):
            chunk_blocks = range(chunk * per_chunk, (chunk + 1) * per_chunk)
            lost = {index % kv_groups for index in chunk_blocks if blocks[index] == null}
            storable = lost <= window_groups
            windowless = bool(lost)
            if not storable or windowless != run_windowless:
                if run_first < chunk:
                    yield run_first, chunk, run_windowless
                run_first, run_windowless = (chunk, windowless) if storable else (chunk + 1, False)
        if run_first < end:
            yield run_first, end, run_windowless

    def _store_run(
        self, tracker: RequestTracker, first: int, end: int, out: list[TransferJob], windowless: bool = False
    ) -> bool:
        """Store the chunks ``[first, end)`` the tier lacks (``windowless``: without their window
        groups' blocks, under their windowless keys); False if they do not fit."""
        request = tracker.request
        keys = self._keys(request, first, end)
        if windowless:
            keys = [windowless_key(key) for key in keys]
        parent = request.block_hashes[first * self._blocks_per_chunk - 1] if first else None
        plan = self.manager.prepare_store(tracker.request_id, keys, parent)
        if plan is None:
            self.stats.store_allocation_failures += 1
            return False
        tracker.stored_chunks = end
        keys_to_store = plan.keys_to_store
        if not keys_to_store:
            return True
        per_chunk = self._gpu_blocks_per_chunk
        blocks = tracker.gpu_block_ids
        if len(keys_to_store) == end - first:
            # Every chunk offered is new to the tier (keys_to_store keeps the order of keys): one slice.
            chunks: tuple[int, ...] = tuple(range(first, end))
            gpu_block_ids = tuple(blocks[first * per_chunk : end * per_chunk])
        else:
            chunk_of = {key: first + offset for offset, key in enumerate(keys)}
            chunks = tuple(chunk_of[key] for key in keys_to_store)
            gpu_block_ids = tuple(
                block for chunk in chunks for block in blocks[chunk * per_chunk : (chunk + 1) * per_chunk]
            )
        if windowless:
            gpu_block_ids = self._without_window_blocks(gpu_block_ids)
        job = self._new_job(tracker, "store", keys_to_store, gpu_block_ids, plan.cpu_block_ids, chunks)
        job_id = job.job_id
        tracker.store_jobs.add(job_id)
        fence = self._fence
        null = self._null_block
        for block in gpu_block_ids:
            if block == null:
                continue
            readers = fence.get(block)
            if readers is None:
                fence[block] = {job_id}
            else:
                readers.add(job_id)
        stats = self.stats
        stats.stores += 1
        stats.stored_chunks += len(keys_to_store)
        if windowless:
            stats.windowless_chunks += len(keys_to_store)
        out.append(job)
        return True

    def _without_window_blocks(self, gpu_block_ids: tuple[int, ...]) -> tuple[int, ...]:
        """The null block in every window group's position: the worker copies nothing there."""
        kv_groups = self.config.kv_groups
        window_groups = self._window_groups
        null = self._null_block
        if null is None:
            raise ValueError("window groups need OffloadConfig.null_block")
        return tuple(null if index % kv_groups in window_groups else block for index, block in enumerate(gpu_block_ids))

    def blocks_reassigned(self, owners: Mapping[int, RequestId | None], groups: Collection[int]) -> None:
        """The engine gave the GPU blocks ``owners`` names to a new owner this step (the request
        whose block list already names them so, or None), before this step's metadata is built.

        An engine frees the blocks of some groups while a request runs (vLLM frees sliding-window
        blocks that left the window); a freed block keeps its KV until it is given out again, so the
        request may still store it, but not once another owner may write it. Every position of a
        ``groups`` group in a request's chunks that names one of these blocks now holds the null
        block, so that chunk is never stored whole. The chunks already stored are included: a reset
        or a failed store makes them storable again, and their store must not read the block its
        new owner wrote."""
        null = self._null_block
        if null is None:
            raise ValueError("blocks_reassigned needs OffloadConfig.null_block")
        if not owners:
            return
        kv_groups = self.config.kv_groups
        for tracker in self._trackers.values():
            blocks = tracker.gpu_block_ids
            request_id = tracker.request_id
            for group in groups:
                for index in range(group, len(blocks), kv_groups):
                    owner = owners.get(blocks[index], request_id)
                    if owner != request_id:
                        blocks[index] = null

    def _fence_check(self, block_ids: Iterable[int]) -> None:
        fence = self._fence
        if not fence:
            return
        for block in block_ids:
            readers = fence.get(block)
            if readers:
                for job_id in readers:
                    if job_id not in self._flushed and job_id not in self._pending_flush:
                        self._pending_flush[job_id] = None
                        self.stats.fence_flushes += 1

    def _preempt(self, tracker: RequestTracker) -> None:
        # From waiting (only after reset_cache) a self-loop: nothing in flight, nothing to flush.
        self.lifecycle.fire(tracker, "preempt")
        for job_id in sorted(tracker.store_jobs):
            if job_id not in self._flushed:
                self._pending_flush[job_id] = None
        tracker.gpu_block_ids = []
        tracker.num_computed_tokens = 0
        tracker.draft_tokens = 0

    def _signal(self, tracker: RequestTracker) -> None:
        self.lifecycle.fire(tracker, "signal")
        tracker.signals += 1
        self.manager.on_request_finished(tracker.request_id)
        if self.lifecycle.can_fire(tracker, "clean"):
            self._clean(tracker)

    def _clean(self, tracker: RequestTracker) -> None:
        self.lifecycle.fire(tracker, "clean")
        del self._trackers[tracker.request_id]
        self.stats.cleaned += 1
        if tracker.holds_gpu_blocks:
            self._released.append(tracker.request_id)

    def _detach_jobs(self, tracker: RequestTracker) -> list[JobId]:
        jobs = sorted(tracker.store_jobs)
        if tracker.load_job is not None:
            jobs.append(tracker.load_job)
        tracker.store_jobs = set()
        tracker.load_job = None
        return jobs

    def _complete(self, job_id: JobId, ok: bool) -> None:
        self._flushed.discard(job_id)
        # Ended before its flush was handed out (a stale job reported between reset_cache and the
        # next step): there is nothing left to wait for.
        self._pending_flush.pop(job_id, None)
        stale = job_id in self._stale_jobs
        job = self._stale_jobs.pop(job_id) if stale else self._jobs.pop(job_id)
        self.job_lifecycle.fire(self._job_records.pop(job_id), "discard" if stale else "complete" if ok else "fail")
        if job.kind == "load":
            self.manager.complete_load(job.request_id, job.keys)
            keys_loading = self._keys_loading
            for key in job.keys:
                # Drop a key whose count reaches zero (Counter's `+= Counter()` would rebuild the
                # whole table per completion).
                left = keys_loading[key] - 1
                if left:
                    keys_loading[key] = left
                else:
                    del keys_loading[key]
        else:
            # A stale store may have written into a block that reset_cache is about to forget:
            # report it failed so the manager frees it either way.
            self.manager.complete_store(job.request_id, job.keys, ok and not stale)
            for block in job.gpu_block_ids:
                readers = self._fence.get(block)
                if readers is not None:
                    readers.discard(job_id)
                    if not readers:
                        del self._fence[block]
        if stale:
            self.stats.stale_completions += 1
            return
        tracker = self._trackers[job.request_id]
        if job.kind == "load":
            tracker.load_job = None
            live = self.lifecycle.declares(tracker, "load_done")
            if live:
                self.lifecycle.fire(tracker, "load_done")
            if ok:
                if live:
                    self._loaded.append(job.request_id)
            else:
                self.stats.load_failures += 1
                tracker.num_computed_tokens = tracker.local_computed_tokens
                tracker.stored_chunks = tracker.lookup_start_chunk
                if live:
                    self._load_failed.append(job.request_id)
        else:
            tracker.store_jobs.discard(job_id)
            if not ok:
                self.stats.store_failures += 1
        # The set lookup first: most completions are of a running request, which clean cannot leave.
        if tracker.state in self.lifecycle.sources["clean"] and self.lifecycle.can_fire(tracker, "clean"):
            self._clean(tracker)

    # ------------------------------------------------------------------ introspection
    def clone(self) -> Self:
        """An independent copy, its manager cloned too; later calls on either never affect the other.

        Shares only what never changes: the config, the lifecycle runtime (with its observers),
        engine requests and the immutable job records. The model checker copies a scheduler per
        explored transition, so this copies each table directly instead of deep-copying.
        A subclass with state of its own extends this method.
        """
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        clone.manager = self.manager.clone()
        clone.stats = _copy_stats(self.stats)
        trackers = {request_id: tracker.copy() for request_id, tracker in self._trackers.items()}
        clone._trackers = trackers
        # A finished request's tracker is the same object in both tables; keep it one object.
        clone._finished_pending = {
            request_id: trackers.get(request_id) or tracker.copy()
            for request_id, tracker in self._finished_pending.items()
        }
        clone._jobs = self._jobs.copy()
        clone._job_records = {job_id: record.copy() for job_id, record in self._job_records.items()}
        clone._stale_jobs = self._stale_jobs.copy()
        clone._pending_loads = self._pending_loads.copy()
        clone._pending_flush = self._pending_flush.copy()
        clone._flushed = self._flushed.copy()
        clone._released = self._released.copy()
        clone._loaded = self._loaded.copy()
        clone._load_failed = self._load_failed.copy()
        clone._fence = {block: readers.copy() for block, readers in self._fence.items()}
        keys_loading: Counter[OffloadKey] = Counter.__new__(Counter)
        dict.update(keys_loading, self._keys_loading)  # Counter.copy without its Python-level update
        clone._keys_loading = keys_loading
        return clone

    def view(self) -> SchedulerState:
        """The scheduler's tables, read-only (see :class:`SchedulerState`)."""
        return SchedulerState(
            self._trackers, self._jobs, self._stale_jobs, self._pending_loads, self._pending_flush, self._flushed,
            self._finished_pending, self._released, self._loaded, self._load_failed, self._fence,
            self._keys_loading, self._reset_pending,
        )

    def attach_trace(self, writer: TraceWriter) -> None:
        """Record in ``writer``: every request and job transition (with the variables their guards
        and the trace checkers read), and every call of the scheduler's API and of the manager."""

        def step() -> int:
            return self.step

        writer.attach(self.lifecycle, step, self.request_variables)
        writer.attach(self.job_lifecycle, step, job_variables)
        writer.record_calls(self, "scheduler", TRACED_SCHEDULER_CALLS, step, _call_fields)
        writer.record_calls(self.manager, "manager", TRACED_MANAGER_CALLS, step, _call_fields)

    def request_variables(self, tracker: RequestTracker) -> dict[str, object]:
        """What a trace records of a request: its jobs, signals and chunks never offered to prepare_store."""
        return {
            "load_job": tracker.load_job,
            "store_jobs": sorted(tracker.store_jobs),
            "jobs_in_flight": (tracker.load_job is not None) + len(tracker.store_jobs),
            "signals": tracker.signals,
            "pending_store_chunks": self._chunks_to_store(tracker),
        }

    def take_events(self) -> list[OffloadEvent]:
        """CPU-tier changes (stored / removed keys) since the last call."""
        return self.manager.take_events()

    def has_pending_work(self) -> bool:
        """True while any request is tracked or any job or flush is outstanding."""
        return bool(self._trackers or self._jobs or self._stale_jobs or self._pending_flush or self._pending_loads)

    def is_tracked(self, request_id: RequestId) -> bool:
        return request_id in self._trackers

    def tracker(self, request_id: RequestId) -> RequestTracker:
        """The live record of a tracked request (read it; do not change it)."""
        return self._tracker(request_id, "tracker")

    @property
    def trackers(self) -> dict[RequestId, RequestTracker]:
        return self._trackers

    @property
    def jobs_in_flight(self) -> dict[JobId, TransferJob]:
        return {**self._jobs, **self._stale_jobs}

    def leaks(self) -> list[str]:
        """What is left that should not be, once the engine has no request left."""
        found = [f"request {rid!r} still tracked in state {t.state}" for rid, t in self._trackers.items()]
        found += [f"job {job_id} still in flight" for job_id in self.jobs_in_flight]
        if self._fence:
            found.append(f"{len(self._fence)} GPU block(s) still fenced")
        if +self._keys_loading:
            found.append(f"{len(+self._keys_loading)} key(s) still marked as loading")
        if self._pending_flush or self._pending_loads:
            found.append("flushes or loads never handed to the worker")
        return found

    def snapshot(self, gpu_writes_under_store: Sequence[str] = ()) -> SystemSnapshot:
        """The state the invariants of kvoffload.lifecycles read."""
        manager = self.manager
        requests = tuple(
            RequestView(
                t.request_id,
                t.state,
                t.load_job,
                frozenset(t.store_jobs),
                self._chunks_to_store(t),
                t.signals,
                manager.is_known(t.request_id),
            )
            for t in self._trackers.values()
        )
        jobs = tuple(
            JobView(j.job_id, j.request_id, j.kind, j.keys, j.cpu_block_ids, j.gpu_block_ids, stale=stale)
            for stale, table in ((False, self._jobs), (True, self._stale_jobs))
            for j in table.values()
        )
        quiescent = not requests and not jobs
        entries = {}
        for key in manager.resident_keys:
            entry = manager.entry(key)
            assert entry is not None
            entries[key] = ManagerEntryView(entry.block_id, entry.ref_cnt, entry.write_pending)
        return SystemSnapshot(
            requests=requests,
            jobs=jobs,
            manager_entries=entries,
            manager_free_blocks=tuple(manager.view().free),
            manager_requests_in_flight=frozenset(manager.requests_in_flight()),
            num_cpu_blocks=manager.num_blocks,
            # Leaks only mean something at quiescence (NoLeak), so only then are they computed.
            manager_leaks=tuple(manager.leaks()) if quiescent else (),
            scheduler_leaks=tuple(self.leaks()) if quiescent else (),
            gpu_writes_under_store=tuple(gpu_writes_under_store),
        )
