"""The named invariants, as predicates over a snapshot of scheduler + manager (+ engine) state.

The names are those of docs/design.md and tla/KVOffload.tla; ``tests/test_spec_names.py`` checks they
agree. Each predicate returns the list of ways the snapshot breaks it (empty: it holds), so a
checker can report every violation with its invariant's name. History properties that a single
snapshot cannot see (a manager call after the signal, a second signal) are also enforced by the
strict manager, which raises ``LifecycleViolation`` carrying the same invariant name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from kvoffload.lifecycles.request import (
    CLEANED,
    FINISHED_PENDING_STORE,
    LIVE_STATES,
    SIGNALED,
)


@dataclass(frozen=True)
class RequestView:
    """One tracked request: lifecycle state, jobs, and what remains to store."""

    request_id: str
    state: str
    load_job: int | None
    store_jobs: frozenset[int]
    pending_store_chunks: int
    signals: int
    manager_known: bool


@dataclass(frozen=True)
class JobView:
    """One transfer job in flight (``stale``: from before a reset_cache, being flushed)."""

    job_id: int
    request_id: str
    kind: str
    keys: tuple[int, ...]
    cpu_block_ids: tuple[int, ...]
    gpu_block_ids: tuple[int, ...]
    stale: bool = False


@dataclass(frozen=True)
class ManagerEntryView:
    block_id: int
    ref_cnt: int
    write_pending: bool


@dataclass(frozen=True)
class SystemSnapshot:
    """Everything the invariants read. ``gpu_writes_under_store`` is filled by an engine that knows
    which GPU blocks it handed to new work while a store still read them."""

    requests: tuple[RequestView, ...]
    jobs: tuple[JobView, ...]
    manager_entries: Mapping[int, ManagerEntryView]
    manager_free_blocks: tuple[int, ...]
    manager_requests_in_flight: frozenset[str]
    num_cpu_blocks: int
    manager_leaks: tuple[str, ...] = ()
    scheduler_leaks: tuple[str, ...] = ()
    gpu_writes_under_store: tuple[str, ...] = field(default_factory=tuple)

    @property
    def quiescent(self) -> bool:
        return not self.requests and not self.jobs


@dataclass(frozen=True)
class Violation:
    invariant: str
    message: str

    def __str__(self) -> str:
        return f"{self.invariant}: {self.message}"


def signal_after_final_store(s: SystemSnapshot) -> list[str]:
    return [
        f"request {r.request_id!r} is {r.state} with {r.pending_store_chunks} chunk(s) never offered to prepare_store"
        for r in s.requests
        if r.state in (SIGNALED, CLEANED) and r.pending_store_chunks
    ]


def no_manager_call_after_signal(s: SystemSnapshot) -> list[str]:
    # A call after the signal raises in the manager; the snapshot-level symptom is a request the
    # scheduler still treats as live while the manager already forgot it.
    return [
        f"request {r.request_id!r} is {r.state} but the manager was already told it finished"
        for r in s.requests
        if (r.state in LIVE_STATES or r.state == FINISHED_PENDING_STORE) and not r.manager_known
    ]


def signal_exactly_once(s: SystemSnapshot) -> list[str]:
    problems = []
    for r in s.requests:
        expected = 1 if r.state in (SIGNALED, CLEANED) else 0
        if r.signals != expected:
            problems.append(f"request {r.request_id!r} in state {r.state} was signaled {r.signals} time(s)")
    return problems


def clean_only_when_drained(s: SystemSnapshot) -> list[str]:
    tracked = {r.request_id for r in s.requests}
    problems = [
        f"job {j.job_id} ({j.kind}) of request {j.request_id!r} is in flight but the request was cleaned"
        for j in s.jobs
        if not j.stale and j.request_id not in tracked
    ]
    job_owners = {j.request_id for j in s.jobs}
    problems += [
        f"manager still has transfers of request {rid!r} that no scheduler job accounts for"
        for rid in sorted(s.manager_requests_in_flight - job_owners)
    ]
    return problems


def jobs_exclusive(s: SystemSnapshot) -> list[str]:
    return [
        f"request {r.request_id!r} has load job {r.load_job} and store jobs {sorted(r.store_jobs)} at once"
        for r in s.requests
        if r.load_job is not None and r.store_jobs
    ]


def no_evict_while_in_use(s: SystemSnapshot) -> list[str]:
    problems = []
    owner: dict[int, int] = {}
    for key, entry in s.manager_entries.items():
        if entry.block_id in owner:
            problems.append(f"CPU block {entry.block_id} holds keys {owner[entry.block_id]:#x} and {key:#x}")
        owner[entry.block_id] = key
    if set(owner) & set(s.manager_free_blocks):
        problems.append(f"CPU blocks both free and resident: {sorted(set(owner) & set(s.manager_free_blocks))}")
    for j in s.jobs:
        for key, block_id in zip(j.keys, j.cpu_block_ids, strict=True):
            entry = s.manager_entries.get(key)
            if entry is None or entry.block_id != block_id:
                problems.append(
                    f"{j.kind} job {j.job_id} uses CPU block {block_id} for key {key:#x}, which was evicted or reused"
                )
            elif j.kind == "load" and entry.ref_cnt < 1:
                problems.append(f"load job {j.job_id} reads key {key:#x} but it is not pinned")
            elif j.kind == "store" and not entry.write_pending:
                problems.append(f"store job {j.job_id} writes key {key:#x} but it is not write-pending")
    return problems


def gpu_block_fence(s: SystemSnapshot) -> list[str]:
    return list(s.gpu_writes_under_store)


def no_leak(s: SystemSnapshot) -> list[str]:
    if not s.quiescent:
        return []
    return [*s.scheduler_leaks, *s.manager_leaks]


InvariantPredicate = Callable[[SystemSnapshot], list[str]]

INVARIANTS: dict[str, InvariantPredicate] = {
    "SignalAfterFinalStore": signal_after_final_store,
    "NoManagerCallAfterSignal": no_manager_call_after_signal,
    "SignalExactlyOnce": signal_exactly_once,
    "CleanOnlyWhenDrained": clean_only_when_drained,
    "JobsExclusive": jobs_exclusive,
    "NoEvictWhileInUse": no_evict_while_in_use,
    "GpuBlockFence": gpu_block_fence,
    "NoLeak": no_leak,
}

# Checked elsewhere, listed so every docs/design.md name has a home: EventuallyCleaned is liveness
# (TLA+ and the explorer's drain check), DataIntegrity compares bytes in the simulator.
OTHER_PROPERTIES: tuple[str, ...] = ("EventuallyCleaned", "DataIntegrity")


def check_invariants(snapshot: SystemSnapshot) -> list[Violation]:
    """Every violation of every invariant in ``snapshot``."""
    return [Violation(name, message) for name, predicate in INVARIANTS.items() for message in predicate(snapshot)]
