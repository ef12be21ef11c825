"""The tiering manager: a CPU primary tier plus chained secondary tiers, sans-IO.

It wraps a :class:`~kvoffload.offload.manager.CPUOffloadingManager` through its public API and
offers the same interface to the scheduler, so ``OffloadingScheduler(config, manager=...)`` runs
unchanged. What it adds:

- **Cascade on store.** When a CPU store completes, the stored chunks are written to every
  secondary tier that wants them. The source CPU blocks are pinned (``prepare_load`` under the
  internal owner ``CASCADE_OWNER``) until the cascade job reports, so they are never evicted or
  reused under it (``NoEvictUnderTierJob``).
- **Promotion on lookup.** A lookup that misses in CPU memory asks the secondary tiers in order
  (a shared tier first answers a ``probe`` job: "not yet" meanwhile); if one holds the next
  chunks, CPU blocks are allocated for them (``prepare_store`` under
  ``PROMOTE_OWNER``, write-pending: neither hits nor evictable) and a promotion job is handed out;
  the lookup answers ``None`` ("not yet", as vLLM's ``TieringOffloadingManager``), and so does
  every lookup that needs a chunk still being promoted (``NoLoadWhilePromoting``). Only chunks whose
  bytes matched key and checksum become ready; the rest are freed and the request recomputes.
  A landed chunk is an ordinary evictable CPU chunk: the engine may schedule the request steps
  later, and chunks landed or stored meanwhile can evict it first; the request then recomputes it
  (its promotion is not retried). So ``promoted_keys`` counts chunks read from a tier, and
  ``loaded_keys`` those a load then used: ``promoted_keys = loaded_keys + evicted_before_load_keys``
  + the landed chunks still waiting in CPU memory.
- **Per-request tier state** (the salt, the tier jobs in flight on the request's behalf, the
  promotions already tried) lives until the deferred finish signal AND until the request's CPU
  stores, cascades and promotions drained (``TierStateUntilSignal``): a store that completes after
  the signal still cascades. Dropping it at the signal is the tiering form of vLLM #49635; a
  call that would need dropped state raises ``NoTierCallAfterFinalise``.

Strict like the CPU manager: a completion of a tier job never handed out (or reported twice), a
second ``on_request_finished``, or a lookup after it raises ``LifecycleViolation`` naming the rule
and changes nothing. Promotions, cascade jobs, chunk residencies and request tier states are
instances of the declared lifecycles of :mod:`kvoffload.lifecycles.tier`.
"""

from __future__ import annotations

import copy
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

from kvoffload.lifecycles.tier import (
    CASCADE,
    NO_TIER_JOBS,
    PROBE,
    PROMOTION,
    TIER_ACTIVE,
    TIER_FINALISED,
    TIER_REQUEST,
    TIER_SIGNALED,
)
from kvoffload.offload.errors import LifecycleViolation
from kvoffload.offload.manager import BlockEntry, CPUOffloadingManager, ManagerState, ManagerStats, RequestRecord
from kvoffload.offload.policies import EvictionPolicy
from kvoffload.offload.types import NO_CONTEXT, OffloadEvent, OffloadKey, RequestContext, RequestId, StorePlan
from kvoffload.statemachine.runtime import DeclaredMachine
from kvoffload.tiers.admission import PromotionAdmission
from kvoffload.tiers.index import LocalTierIndex, TierIndex
from kvoffload.tiers.protocol import CORRUPT, FAULT, KEY_RESULTS, MISS, OK, TierJob, TierOutcome

CASCADE_OWNER: RequestId = "<tier-cascade>"
PROMOTE_OWNER: RequestId = "<tier-promote>"
INTERNAL_OWNERS = (CASCADE_OWNER, PROMOTE_OWNER)
DEFAULT_MAX_PROMOTE_CHUNKS = 32


@dataclass(slots=True, eq=False)
class TierRequestState:
    """The manager's tier state of one request; ``state`` only changes through TIER_REQUEST."""

    request_id: RequestId
    state: str = TIER_ACTIVE
    salt: str = ""
    jobs: set[int] = field(default_factory=set)
    # (tier, first key) of promotions already tried, so a miss is not retried forever.
    tried: set[tuple[str, OffloadKey]] = field(default_factory=set)
    # (tier, first key) -> how many leading chunks a shared tier said it holds; probes in flight.
    probed: dict[tuple[str, OffloadKey], int] = field(default_factory=dict)
    probing: set[tuple[str, OffloadKey]] = field(default_factory=set)


@dataclass(slots=True, eq=False)
class TierJobRecord:
    """A tier job in flight; ``state`` only changes through the PROMOTION or CASCADE machine."""

    job: TierJob
    state: str

    @property
    def job_id(self) -> int:
        return self.job.job_id


@dataclass
class TierStats:
    """Counters of one secondary tier since construction."""

    probes: int = 0
    probe_hits: int = 0
    cascades: int = 0
    cascaded_keys: int = 0
    cascade_failed_keys: int = 0
    cascade_skipped_keys: int = 0
    promotions: int = 0
    promoted_keys: int = 0
    # Promoted chunks a load then used (the first load of each): the tier's hits as the engine saw them.
    loaded_keys: int = 0
    # Promoted chunks the CPU tier evicted (or a reset dropped) before any load used them.
    evicted_before_load_keys: int = 0
    failed_promotions: int = 0
    misses: int = 0
    checksum_failures: int = 0
    faults: int = 0
    foreign_keys: int = 0


class TieringManager:
    """The CPU tier (``cpu``) plus ``tiers`` in lookup order; the scheduler's manager."""

    def __init__(
        self,
        cpu: CPUOffloadingManager,
        tiers: Sequence[TierIndex],
        max_promote_chunks: int = DEFAULT_MAX_PROMOTE_CHUNKS,
    ) -> None:
        names = [tier.name for tier in tiers]
        if len(set(names)) != len(names):
            raise ValueError(f"tier names must be unique, got {names}")
        if max_promote_chunks < 1:
            raise ValueError(f"max_promote_chunks must be >= 1, got {max_promote_chunks}")
        self.cpu = cpu
        # Promoted chunks bypass the CPU tier's admission filter (they were admitted once).
        self._admission = PromotionAdmission(cpu.policy)
        cpu.policy = self._admission
        self.tiers: dict[str, TierIndex] = {tier.name: tier for tier in tiers}
        self.max_promote_chunks = max_promote_chunks
        self.request_machine = DeclaredMachine(
            TIER_REQUEST, guards={NO_TIER_JOBS: self._drained}, id_attribute="request_id"
        )
        self.promotion_machine = DeclaredMachine(PROMOTION, guards={}, id_attribute="job_id")
        self.cascade_machine = DeclaredMachine(CASCADE, guards={}, id_attribute="job_id")
        self.probe_machine = DeclaredMachine(PROBE, guards={}, id_attribute="job_id")
        for owner in INTERNAL_OWNERS:
            cpu.on_new_request(owner)
        self._requests: dict[RequestId, TierRequestState] = {}
        self._jobs: dict[int, TierJobRecord] = {}
        self._new_jobs: list[TierJob] = []
        self._next_job_id = 1
        self._promoting: dict[OffloadKey, int] = {}
        # Landed promoted chunks no load has used yet, with the tier that served each.
        self._landed_unloaded: dict[OffloadKey, str] = {}
        self._reset_pending = False
        self.tier_stats: dict[str, TierStats] = {name: TierStats() for name in self.tiers}
        self.deferred_lookups = 0

    # ------------------------------------------------------------------ request lifecycle
    def on_new_request(self, request_id: RequestId, context: RequestContext = NO_CONTEXT) -> None:
        """Announce a request (to the CPU manager too); its tier state starts ``active``. Its tier
        jobs carry ``context.cache_salt``, which namespaces its chunks in shared tiers."""
        if request_id in INTERNAL_OWNERS:
            raise ValueError(f"request id {request_id!r} is reserved for the tiering manager")
        self.cpu.on_new_request(request_id, context)
        self._requests[request_id] = TierRequestState(request_id, salt=context.cache_salt)

    def on_request_finished(self, request_id: RequestId) -> None:
        """The deferred finish signal; the tier state is finalised once the request drained."""
        self.cpu.on_request_finished(request_id)
        record = self._requests[request_id]
        self.request_machine.fire(record, "signal")
        self._finalise_if_drained(record)

    # ------------------------------------------------------------------ lookups and loads
    def lookup(self, request_id: RequestId, keys: Sequence[OffloadKey]) -> int | None:
        """Leading ``keys`` ready in CPU memory, or None ("not yet") while a promotion of the
        next chunk runs (one may start now)."""
        hits = self.cpu.lookup(request_id, keys)
        if self._reset_pending:
            return 0
        if hits == len(keys):
            return hits
        rest = keys[hits:]
        if rest[0] in self._promoting:
            self.deferred_lookups += 1
            return None
        record = self._requests[request_id]
        for tier in self.tiers.values():
            attempt = (tier.name, rest[0])
            if attempt in record.tried:
                continue
            if tier.shared and attempt not in record.probed:
                # Ask first; CPU blocks are allocated only for chunks the tier holds.
                if attempt not in record.probing:
                    self._start_probe(record, tier, rest[: self.max_promote_chunks])
                self.deferred_lookups += 1
                return None
            count = min(record.probed.get(attempt, len(rest)), tier.candidates(rest), self.max_promote_chunks)
            record.tried.add(attempt)
            if count and self._start_promotion(record, tier, rest[:count]):
                self.deferred_lookups += 1
                return None
        return hits

    def touch(self, request_id: RequestId, keys: Sequence[OffloadKey]) -> None:
        """As ``CPUOffloadingManager.touch``."""
        self.cpu.touch(request_id, keys)

    def prepare_load(self, request_id: RequestId, keys: Sequence[OffloadKey]) -> tuple[int, ...]:
        """As ``CPUOffloadingManager.prepare_load`` (a key being promoted is not loadable)."""
        block_ids = self.cpu.prepare_load(request_id, keys)
        for key in keys:
            tier = self._landed_unloaded.pop(key, None)
            if tier is not None:
                self.tier_stats[tier].loaded_keys += 1
        return block_ids

    def complete_load(self, request_id: RequestId, keys: Sequence[OffloadKey]) -> None:
        """As ``CPUOffloadingManager.complete_load``; may finalise a signaled request."""
        self.cpu.complete_load(request_id, keys)
        record = self._requests.get(request_id)
        if record is not None:
            self._finalise_if_drained(record)

    # ------------------------------------------------------------------ stores and cascades
    def prepare_store(
        self, request_id: RequestId, keys: Sequence[OffloadKey], parent: OffloadKey | None = None
    ) -> StorePlan | None:
        """As ``CPUOffloadingManager.prepare_store``; None while a reset waits for tier jobs."""
        if self._reset_pending:
            # Nothing new enters the CPU tier until the pending reset ran (touch checks the caller).
            self.cpu.touch(request_id, ())
            return None
        plan = self.cpu.prepare_store(request_id, keys, parent)
        if plan is not None:
            self._dropped_unloaded(plan.evicted_keys)
        return plan

    def complete_store(self, request_id: RequestId, keys: Sequence[OffloadKey], success: bool) -> None:
        """As ``CPUOffloadingManager.complete_store``; a successful store cascades its keys."""
        record = self._tier_record(request_id, "complete_store")
        self.cpu.complete_store(request_id, keys, success)
        if success and keys and not self._reset_pending:
            self._cascade(record, keys)
        self._finalise_if_drained(record)

    def _cascade(self, record: TierRequestState, keys: Sequence[OffloadKey]) -> None:
        for tier in self.tiers.values():
            stats = self.tier_stats[tier.name]
            wanted = [key for key in keys if tier.wants(key)]
            if not wanted:
                continue
            slots: tuple[int, ...] = ()
            if isinstance(tier, LocalTierIndex):
                allocated = tier.allocate(wanted)
                if allocated is None:
                    stats.cascade_skipped_keys += len(wanted)
                    continue
                slots = allocated
            cpu_block_ids = self._pin(wanted)
            job = TierJob(
                self._next_job_id, "cascade", tier.name, record.request_id, tuple(wanted), cpu_block_ids, slots,
                record.salt,
            )
            self._hand_out(record, job, self.cascade_machine)
            stats.cascades += 1

    def _pin(self, keys: Sequence[OffloadKey]) -> tuple[int, ...]:
        """Pin the ready CPU blocks a cascade reads; returns them."""
        return self.cpu.prepare_load(CASCADE_OWNER, keys)

    def _unpin(self, keys: Sequence[OffloadKey]) -> None:
        self.cpu.complete_load(CASCADE_OWNER, keys)

    def _start_promotion(self, record: TierRequestState, tier: TierIndex, keys: Sequence[OffloadKey]) -> bool:
        with self._admission.promoting(keys):
            plan = self.cpu.prepare_store(PROMOTE_OWNER, keys)
        if plan is None:
            return False
        self._dropped_unloaded(plan.evicted_keys)
        placed = dict(zip(plan.keys_to_store, plan.cpu_block_ids, strict=True))
        lead: list[OffloadKey] = []
        for key in keys:
            if key not in placed:
                break
            lead.append(key)
        unused = [key for key in plan.keys_to_store if key not in set(lead)]
        if unused:
            self.cpu.complete_store(PROMOTE_OWNER, unused, False)
        if not lead:
            return False
        slots = tier.start_read(lead) if isinstance(tier, LocalTierIndex) else ()
        job = TierJob(
            self._next_job_id, "promote", tier.name, record.request_id, tuple(lead),
            tuple(placed[key] for key in lead), slots, record.salt,
        )
        for key in lead:
            self._promoting[key] = job.job_id
        self._hand_out(record, job, self.promotion_machine)
        self.tier_stats[tier.name].promotions += 1
        return True

    def _start_probe(self, record: TierRequestState, tier: TierIndex, keys: Sequence[OffloadKey]) -> None:
        job = TierJob(self._next_job_id, "probe", tier.name, record.request_id, tuple(keys), (), (), record.salt)
        record.probing.add((tier.name, keys[0]))
        self._hand_out(record, job, self.probe_machine)
        self.tier_stats[tier.name].probes += 1

    def _hand_out(self, record: TierRequestState, job: TierJob, machine: DeclaredMachine) -> None:
        self._next_job_id += 1
        self._jobs[job.job_id] = TierJobRecord(job, machine.declaration.initial)
        self._new_jobs.append(job)
        record.jobs.add(job.job_id)

    # ------------------------------------------------------------------ tier job outcomes
    def take_tier_jobs(self) -> list[TierJob]:
        """Tier jobs handed out since the last call, for the I/O driver."""
        jobs, self._new_jobs = self._new_jobs, []
        return jobs

    def complete_tier_job(self, outcome: TierOutcome) -> None:
        """Apply one tier job's outcome (every key's result, in the job's key order)."""
        entry = self._jobs.get(outcome.job_id)
        if entry is None:
            state = "already completed" if 0 < outcome.job_id < self._next_job_id else "never issued"
            raise LifecycleViolation(
                "KnownJob", None, "complete_tier_job", state, f"tier job {outcome.job_id} is not in flight"
            )
        job = entry.job
        if len(outcome.results) != len(job.keys) or not set(outcome.results) <= KEY_RESULTS:
            raise ValueError(
                f"tier job {job.job_id}: {len(outcome.results)} result(s) {outcome.results} for "
                f"{len(job.keys)} key(s); each must be one of {sorted(KEY_RESULTS)}"
            )
        record = self._tier_record(job.request_id, "complete_tier_job")
        del self._jobs[job.job_id]
        stats = self.tier_stats[job.tier]
        tier = self.tiers[job.tier]
        for result in outcome.results:
            if result == CORRUPT:
                stats.checksum_failures += 1
            elif result == FAULT:
                stats.faults += 1
            elif result == MISS and job.kind != "probe":
                stats.misses += 1
        if job.kind == "cascade":
            self._finish_cascade(entry, tier, outcome, stats)
        elif job.kind == "probe":
            self._finish_probe(entry, record, outcome, stats)
        else:
            self._finish_promotion(entry, tier, outcome, stats)
        record.jobs.discard(job.job_id)
        self._finalise_if_drained(record)
        if self._reset_pending and not self._jobs:
            self._finish_reset()

    def _finish_probe(
        self, entry: TierJobRecord, record: TierRequestState, outcome: TierOutcome, stats: TierStats
    ) -> None:
        job = entry.job
        held = 0
        while held < len(job.keys) and outcome.results[held] == OK:
            held += 1
        attempt = (job.tier, job.keys[0])
        record.probing.discard(attempt)
        record.probed[attempt] = held
        stats.probe_hits += held
        self.probe_machine.fire(entry, "fail" if FAULT in outcome.results[:1] else "done")

    def _finish_cascade(self, entry: TierJobRecord, tier: TierIndex, outcome: TierOutcome, stats: TierStats) -> None:
        job = entry.job
        self._unpin(job.keys)
        written = 0
        for key, result in zip(job.keys, outcome.results, strict=True):
            if isinstance(tier, LocalTierIndex):
                tier.write_done(key, result == OK)
            written += result == OK
        stats.cascaded_keys += written
        stats.cascade_failed_keys += len(job.keys) - written
        self.cascade_machine.fire(entry, "done" if written == len(job.keys) else "fail")

    def _finish_promotion(self, entry: TierJobRecord, tier: TierIndex, outcome: TierOutcome, stats: TierStats) -> None:
        job = entry.job
        for key in job.keys:
            del self._promoting[key]
        served = 0
        # Only the leading verified chunks are served (a prefix must be contiguous); after a reset
        # was requested nothing read before it is served.
        while not self._reset_pending and served < len(job.keys) and outcome.results[served] == OK:
            served += 1
        self._land(job.tier, job.keys, served)
        if isinstance(tier, LocalTierIndex):
            for key, result in zip(job.keys, outcome.results, strict=True):
                tier.read_done(key, result == OK)
        stats.promoted_keys += served
        stats.foreign_keys += min(outcome.foreign, served)
        if served:
            self.promotion_machine.fire(entry, "done")
        else:
            stats.failed_promotions += 1
            self.promotion_machine.fire(entry, "fail")

    def _land(self, tier: str, keys: Sequence[OffloadKey], served: int) -> None:
        """The promotion's first ``served`` CPU blocks become ready; the others are freed."""
        if served:
            self.cpu.complete_store(PROMOTE_OWNER, keys[:served], True)
            self._landed_unloaded.update(dict.fromkeys(keys[:served], tier))
        if served < len(keys):
            self.cpu.complete_store(PROMOTE_OWNER, keys[served:], False)

    # ------------------------------------------------------------------ housekeeping
    def reset_cache(self) -> None:
        """Drop every CPU key and the local tiers' indexes; deferred until tier jobs drained
        (lookups miss and nothing is stored meanwhile)."""
        if self._jobs:
            self._reset_pending = True
            return
        self._finish_reset()

    def _dropped_unloaded(self, keys: Sequence[OffloadKey]) -> None:
        """``keys`` left the CPU tier: count the landed promoted chunks among them no load used."""
        for key in keys:
            tier = self._landed_unloaded.pop(key, None)
            if tier is not None:
                self.tier_stats[tier].evicted_before_load_keys += 1

    def _finish_reset(self) -> None:
        self._reset_pending = False
        self._dropped_unloaded(list(self._landed_unloaded))
        self.cpu.reset_cache()
        for tier in self.tiers.values():
            tier.reset()

    def _drained(self, record: TierRequestState) -> bool:
        return not record.jobs and record.request_id not in self.cpu.requests_in_flight()

    def _finalise_if_drained(self, record: TierRequestState) -> None:
        if record.state == TIER_SIGNALED and self.request_machine.can_fire(record, "finalise"):
            self.request_machine.fire(record, "finalise")
            del self._requests[record.request_id]

    def _tier_record(self, request_id: RequestId, call: str) -> TierRequestState:
        record = self._requests.get(request_id)
        if record is None:
            raise LifecycleViolation(
                "NoTierCallAfterFinalise", request_id, call, TIER_FINALISED,
                "the request's tier state was dropped while its transfers were still in flight",
            )
        return record

    def _active(self, request_id: RequestId, call: str) -> TierRequestState:
        record = self._requests.get(request_id)
        if record is None or record.state != TIER_ACTIVE:
            raise LifecycleViolation(
                "NoManagerCallAfterSignal" if record else "KnownRequest", request_id, call,
                record.state if record else "unknown", "the request is not active in the tiering manager",
            )
        return record

    def take_events(self) -> list[OffloadEvent]:
        """The CPU tier's events (promoted chunks appear as stored)."""
        return self.cpu.take_events()

    # ------------------------------------------------------------------ the CPU manager's view
    @property
    def num_blocks(self) -> int:
        return self.cpu.num_blocks

    @property
    def policy(self) -> EvictionPolicy:
        """The CPU tier's own policy (without the promotion admission wrapper)."""
        return self._admission.inner

    @property
    def stats(self) -> ManagerStats:
        return self.cpu.stats

    def view(self) -> ManagerState:
        """The CPU tier's tables, read-only, without the internal owners' request records."""
        cpu = self.cpu.view()
        requests = {rid: record for rid, record in cpu.requests.items() if rid not in INTERNAL_OWNERS}
        return ManagerState(cpu.free, cpu.entries, requests)

    def clone(self) -> Self:
        """An independent copy (CPU tier, tier indexes and policy included) for the explorer.

        The declared machines are shared where they hold no state of this manager: the job
        machines entirely, the request machine's compiled table (its guard is bound to the copy).
        """
        machine = self.request_machine
        shared: list[object] = [
            self.promotion_machine, self.cascade_machine, self.probe_machine, machine.transitions_machine,
            machine.table,
        ]
        return copy.deepcopy(self, {id(item): item for item in shared})

    @property
    def resident_keys(self) -> frozenset[OffloadKey]:
        return self.cpu.resident_keys

    def entry(self, key: OffloadKey) -> BlockEntry | None:
        return self.cpu.entry(key)

    def holds(self, key: OffloadKey) -> bool:
        """Whether a lookup of ``key`` may find it: in CPU memory, or readable in a tier of this
        process (the file tier). A shared tier (Redis) would need a probe to tell, so a chunk only
        there counts as not held."""
        return self.cpu.holds(key) or any(not tier.shared and tier.candidates((key,)) for tier in self.tiers.values())

    def is_known(self, request_id: RequestId) -> bool:
        return request_id not in INTERNAL_OWNERS and self.cpu.is_known(request_id)

    def requests_in_flight(self) -> dict[RequestId, RequestRecord]:
        return {rid: r for rid, r in self.cpu.requests_in_flight().items() if rid not in INTERNAL_OWNERS}

    # ------------------------------------------------------------------ introspection
    @property
    def tier_jobs_in_flight(self) -> dict[int, TierJob]:
        return {job_id: entry.job for job_id, entry in self._jobs.items()}

    def is_promoting(self, key: OffloadKey) -> bool:
        return key in self._promoting

    def tier_state(self, request_id: RequestId) -> str:
        """The request's tier state (``finalised`` once dropped)."""
        record = self._requests.get(request_id)
        return record.state if record is not None else TIER_FINALISED

    def request_summary(self) -> tuple[tuple[Any, ...], ...]:
        """Per request with tier state: (id, state, tier jobs in flight, promotions tried, probes)."""
        return tuple(
            (rid, r.state, len(r.jobs), tuple(sorted(r.tried)), tuple(sorted(r.probed.items())))
            for rid, r in sorted(self._requests.items())
        )

    def leaks(self) -> list[str]:
        """Leftovers not accounted for by a tier job still in flight (the driver reports those)."""
        busy = {key for entry in self._jobs.values() for key in entry.job.keys}
        internal = {f"manager request record {owner!r}" for owner in INTERNAL_OWNERS}
        found = [
            line for line in self.cpu.leaks()
            if line not in internal and not any(line.startswith(f"key {key:#x} ") for key in busy)
        ]
        found += [
            f"tier state of request {rid!r} ({record.state}) not finalised"
            for rid, record in self._requests.items()
            if not record.jobs
        ]
        for tier in self.tiers.values():
            found += [line for line in tier.leaks() if not any(f"key {key:#x} " in line for key in busy)]
        return found

    def fingerprint(self) -> Hashable:
        return (
            self.cpu.fingerprint(),
            tuple(tier.fingerprint() for tier in self.tiers.values()),
            tuple(sorted((job_id, entry.job, entry.state) for job_id, entry in self._jobs.items())),
            tuple(sorted((rid, r.state, tuple(sorted(r.jobs))) for rid, r in self._requests.items())),
            self._reset_pending,
        )
