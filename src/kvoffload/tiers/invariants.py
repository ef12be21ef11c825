"""The tiering invariants, checked by the tiered simulator after every step (names as in
tla/KVOffloadTiers.tla):

- ``NoEvictUnderTierJob``: a CPU block read by a cascade is resident, holds the job's key and is
  pinned; a CPU block written by a promotion is resident, holds the key and is write-pending.
- ``NoLoadWhilePromoting``: no GPU load job reads a chunk that is still being promoted.
- ``TierStateUntilSignal``: every request the scheduler still tracks still has its tier state.
- ``NoTierCallAfterFinalise``: every tier job in flight belongs to a request whose tier state
  still exists (the manager itself raises a LifecycleViolation of that name on such a call).
"""

from __future__ import annotations

from kvoffload.lifecycles.invariants import Violation
from kvoffload.lifecycles.tier import TIER_FINALISED
from kvoffload.offload.scheduler import OffloadingScheduler
from kvoffload.tiers.manager import TieringManager

TIER_INVARIANTS: tuple[str, ...] = (
    "NoEvictUnderTierJob", "NoLoadWhilePromoting", "TierStateUntilSignal", "NoTierCallAfterFinalise"
)


def check_tier_invariants(scheduler: OffloadingScheduler, manager: TieringManager) -> list[Violation]:
    """Every violation of a tiering invariant right now."""
    found: list[Violation] = []
    for job in manager.tier_jobs_in_flight.values():
        # A probe touches no CPU block.
        for key, block in zip(job.keys, job.cpu_block_ids, strict=job.kind != "probe"):
            entry = manager.entry(key)
            if entry is None or entry.block_id != block:
                found.append(Violation("NoEvictUnderTierJob", f"{job.kind} job {job.job_id}: CPU block {block} "
                                       f"of key {key:#x} was evicted or reused"))
            elif job.kind == "cascade" and entry.ref_cnt < 1:
                found.append(Violation("NoEvictUnderTierJob", f"cascade job {job.job_id} reads key {key:#x} unpinned"))
            elif job.kind == "promote" and not entry.write_pending:
                found.append(Violation("NoEvictUnderTierJob",
                                       f"promotion {job.job_id} writes key {key:#x}, which is not write-pending"))
        if manager.tier_state(job.request_id) == TIER_FINALISED:
            found.append(Violation("NoTierCallAfterFinalise",
                                   f"tier job {job.job_id} in flight for {job.request_id!r}, whose state was dropped"))
    for job in scheduler.jobs_in_flight.values():
        if job.kind == "load":
            for key in job.keys:
                if manager.is_promoting(key):
                    found.append(Violation("NoLoadWhilePromoting",
                                           f"load job {job.job_id} reads key {key:#x} while it is being promoted"))
    for request_id in scheduler.trackers:
        if manager.tier_state(request_id) == TIER_FINALISED:
            found.append(Violation("TierStateUntilSignal",
                                   f"request {request_id!r} is tracked but its tier state was dropped"))
    return found
