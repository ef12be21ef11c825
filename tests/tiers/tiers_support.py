"""Builders shared by the tier tests."""

from __future__ import annotations

from kvoffload.offload.manager import CPUOffloadingManager
from kvoffload.tiers.index import LocalTierIndex, SharedTierIndex
from kvoffload.tiers.manager import TieringManager
from kvoffload.tiers.protocol import OK, TierJob, TierOutcome


def tiering(cpu_blocks: int = 4, file_slots: int = 8, shared: bool = False) -> TieringManager:
    tiers = [LocalTierIndex("file", file_slots)] + ([SharedTierIndex("redis")] if shared else [])
    return TieringManager(CPUOffloadingManager(cpu_blocks, "lru"), tiers)


def store(manager: TieringManager, request_id: str, keys: list[int]) -> None:
    """Store ``keys`` into the CPU tier for ``request_id`` (prepare + successful completion)."""
    plan = manager.prepare_store(request_id, keys)
    assert plan is not None
    manager.complete_store(request_id, plan.keys_to_store, True)


def all_ok(job: TierJob) -> TierOutcome:
    return TierOutcome(job.job_id, (OK,) * len(job.keys))
