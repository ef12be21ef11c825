"""Tiering bugs of real offloading connectors, each reintroduced as a subclass of our
:class:`TieringManager` (or of its file tier index) overriding the minimum.
``kvoffload explore --tiers --mutant NAME`` must catch each with the invariant it declares
(``tests/tiers/test_tier_mutants.py`` checks it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kvoffload.offload.manager import CPUOffloadingManager
from kvoffload.offload.types import OffloadKey, RequestId
from kvoffload.tiers.index import CHUNK_MACHINE, LocalTierIndex, TierIndex
from kvoffload.tiers.manager import PROMOTE_OWNER, TieringManager, TierJobRecord, TierRequestState, TierStats
from kvoffload.tiers.protocol import FAULT, OK, TierOutcome


class EagerTierFinaliseManager(TieringManager):
    """vLLM #49635, tiering form: ``TieringOffloadingManager`` dropped the request's tier state
    when told the request finished, while a store (and so its cascade) was still pending; the
    store's completion then looked the state up (a KeyError that killed the engine)."""

    def on_request_finished(self, request_id: RequestId) -> None:
        super().on_request_finished(request_id)
        self._requests.pop(request_id, None)  # the bug: dropped at the signal, drained or not


class StickyFailedChunkIndex(LocalTierIndex):
    """A tier index that keeps reporting a chunk whose read failed (vLLM #49176's lookup layer)."""

    def read_done(self, key: OffloadKey, ok: bool) -> None:
        CHUNK_MACHINE.fire(self._entries[key], "read_done")


class RetryFailedPromotionManager(TieringManager):
    """vLLM #49176: a promotion that failed (torn file, bit rot, EIO) was not remembered and the
    tier kept reporting the block, so every later lookup started the same doomed promotion and the
    request never got past admission: a livelock (``EventuallyCleaned``)."""

    def lookup(self, request_id: RequestId, keys: Sequence[OffloadKey]) -> int | None:
        hits = super().lookup(request_id, keys)
        self._requests[request_id].tried.clear()  # the bug: nothing remembers a failed promotion
        return hits


class CascadeWithoutPinManager(TieringManager):
    """A cascade that does not pin its source CPU blocks (vLLM's tiering framework, PR #40020,
    pins them with ``prepare_read`` for exactly this reason): a block is evicted and reused
    while the cascade still reads it, so the tier would store another chunk's bytes under this
    key with a valid checksum (``NoEvictUnderTierJob``; once served, ``DataIntegrity``)."""

    def _pin(self, keys: Sequence[OffloadKey]) -> tuple[int, ...]:
        return tuple(entry.block_id for key in keys if (entry := self.cpu.entry(key)))

    def _unpin(self, keys: Sequence[OffloadKey]) -> None:
        return None


class ServeUnverifiedPromotionManager(TieringManager):
    """A promotion that serves what it read without the checksum verdict (vLLM #49176's torn or
    bit-rotted block files, served instead of recomputed): a corrupt chunk becomes a CPU hit and
    is loaded into GPU memory (``DataIntegrity``)."""

    def complete_tier_job(self, outcome: TierOutcome) -> None:
        entry = self._jobs.get(outcome.job_id)
        if entry is not None and entry.job.kind == "promote":
            served = tuple(r if r == FAULT else OK for r in outcome.results)
            outcome = TierOutcome(outcome.job_id, served, outcome.foreign)
        super().complete_tier_job(outcome)


class ReadyBeforePromotionLandsManager(TieringManager):
    """Promoted CPU blocks marked ready when the promotion starts, not when its read landed (the
    staging mistake vLLM's "retry later" answer exists to prevent): a lookup hits them and a load
    reads blocks the tier has not filled (``NoEvictUnderTierJob`` / ``NoLoadWhilePromoting``)."""

    def _start_promotion(self, record: TierRequestState, tier: TierIndex, keys: Sequence[OffloadKey]) -> bool:
        started = super()._start_promotion(record, tier, keys)
        if started:
            job = self._new_jobs[-1]
            self.cpu.complete_store(PROMOTE_OWNER, job.keys, True)  # the bug: ready before the bytes
            for key in job.keys:
                del self._promoting[key]
        return started

    def _finish_promotion(self, entry: TierJobRecord, tier: TierIndex, outcome: TierOutcome, stats: TierStats) -> None:
        for key in entry.job.keys:
            self._promoting[key] = entry.job_id
        super()._finish_promotion(entry, tier, outcome, stats)

    def _land(self, keys: Sequence[OffloadKey], served: int) -> None:
        return None  # already "landed" at the start


ManagerFactory = Callable[[CPUOffloadingManager, list[LocalTierIndex]], TieringManager]


@dataclass(frozen=True)
class TierMutant:
    """One tiering bug; ``make_manager(cpu, tiers)`` builds the buggy tiering manager."""

    name: str
    source: str
    invariant: str
    summary: str
    make_manager: ManagerFactory
    also_caught_by: tuple[str, ...] = ()
    # A livelock is only seen by a drain from a state that still has work: "all" runs it everywhere.
    drain: str = "final"

    @property
    def caught_by(self) -> tuple[str, ...]:
        return (self.invariant, *self.also_caught_by)

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "source": self.source, "invariant": self.invariant, "summary": self.summary}


def _sticky(cpu: CPUOffloadingManager, tiers: list[LocalTierIndex]) -> TieringManager:
    return RetryFailedPromotionManager(cpu, [StickyFailedChunkIndex(t.name, t.num_slots, "lru") for t in tiers])


TIER_MUTANTS: dict[str, TierMutant] = {
    mutant.name: mutant
    for mutant in (
        TierMutant("tier_eager_finalise", "vLLM #49635 (tiering form)", "TierStateUntilSignal",
                   "the tier state is dropped at the finish signal while a store's cascade is pending",
                   EagerTierFinaliseManager, also_caught_by=("NoTierCallAfterFinalise",)),
        TierMutant("retry_failed_promotion", "vLLM #49176", "EventuallyCleaned",
                   "a failed promotion is forgotten and retried forever: the request never gets admitted",
                   _sticky, drain="all"),
        TierMutant("cascade_without_pin", "vLLM PR #40020 (ref_cnt protection)", "NoEvictUnderTierJob",
                   "a cascade does not pin its CPU blocks, which are evicted and reused under it",
                   CascadeWithoutPinManager, also_caught_by=("DataIntegrity",)),
        TierMutant("serve_unverified_promotion", "vLLM #49176 (corrupt block files)", "DataIntegrity",
                   "a promotion serves bytes whose checksum did not match",
                   ServeUnverifiedPromotionManager),
        TierMutant("ready_before_promotion_lands", "vLLM PR #40020 (staged promotion)", "NoEvictUnderTierJob",
                   "promoted CPU blocks are readable before the tier read filled them",
                   ReadyBeforePromotionLandsManager, also_caught_by=("NoLoadWhilePromoting", "DataIntegrity")),
    )
}
