"""Secondary tiers behind :class:`~kvoffload.vllm.spec.KVOffloadSpec`: the scheduler side.

vLLM's ``OffloadingConnector`` carries only its own GPU<->CPU jobs between the spec's manager
(scheduler process) and its worker (worker processes), and a worker may only report success. So
the tier jobs never travel: the tiering manager and the tier I/O both run in the scheduler
process, and the I/O reads and writes the CPU tier's bytes in the workers' pools, mapped from
shared memory (:mod:`kvoffload.vllm.spec.shared_pool`).

- :class:`PoolTiers`: per tensor-parallel rank a :class:`~kvoffload.vllm.tier_io.WorkerTiers` (the
  connector's tier I/O: a ``TierDriver`` with that rank's file and Redis backends, gathering and
  scattering chunks in that rank's pool). Every job runs on every rank's shard; the ranks'
  outcomes are combined by :class:`~kvoffload.vllm.rank_reports.RankTally` (a chunk counts only if
  every rank's shard was written or verified).
- :class:`TieredManagerAdapter`: the strict manager adapter over a tiering manager. A lookup the
  tiering manager answers "not yet" (a probe or promotion in flight) is vLLM's ``RETRY``, which
  makes ``get_num_new_matched_tokens`` answer ``(None, False)``. Once per scheduler step
  (``on_schedule_end``, called first in ``build_connector_meta``) the outcomes due are applied and
  the jobs handed out since the last step are started; ``has_pending_work`` keeps the engine
  stepping while any tier job is in flight.

Lifecycle: a cascade is handed out when vLLM reports the CPU store complete on every rank (so its
bytes are in every pool) and its CPU blocks stay pinned until its outcome is applied; a promotion's
CPU blocks stay write-pending (no lookup hits them, so no load job reads them) until its verified
outcome is applied; a request's tier state lives until vLLM's ``on_request_finished`` and until
its stores, cascades and promotions drained.
"""

from __future__ import annotations

from collections.abc import Sequence

from vllm.v1.kv_offload.base import LookupResult, OffloadKey, ReqContext, ScheduleEndContext

from kvoffload.tiers.manager import TieringManager
from kvoffload.vllm.rank_reports import RankReport, RankTally
from kvoffload.vllm.spec.manager_adapter import StrictManagerAdapter
from kvoffload.vllm.tier_io import WorkerTiers


class PoolTiers:
    """The tier I/O of every rank, run from the scheduler process on the ranks' shared pools."""

    def __init__(self, ranks: Sequence[WorkerTiers]) -> None:
        self.ranks = list(ranks)
        self.tally = RankTally(len(self.ranks))
        self.step = 0

    def run(self, manager: TieringManager) -> None:
        """One scheduler step: start the jobs handed out since the last step on every rank, and
        apply the outcomes every rank has reported (each job reports one step after its start)."""
        self.step += 1
        jobs = manager.take_tier_jobs()
        reports = []
        for rank, tiers in enumerate(self.ranks):
            tiers.run(jobs, self.step)
            reports.append(RankReport(rank, {}, tiers.take_outcomes()))
        _, outcomes = self.tally.add(reports)
        for outcome in outcomes:
            manager.complete_tier_job(outcome)

    def stats(self) -> list[dict[str, dict[str, int]]]:
        """Per rank, per tier: the chunks' outcomes and availability (``TierDriver.stats``)."""
        return [tiers.driver.stats() for tiers in self.ranks]

    def close(self) -> None:
        for tiers in self.ranks:
            tiers.close()


class TieredManagerAdapter(StrictManagerAdapter):
    """:class:`StrictManagerAdapter` over a tiering manager whose tier I/O is ``io``."""

    def __init__(self, manager: TieringManager, chunk_tokens: int, io: PoolTiers, policy_name: str = "") -> None:
        # The adapter's calls are the CPU manager's; the tiering manager offers the same ones.
        super().__init__(manager, chunk_tokens, policy_name)  # type: ignore[arg-type]
        self.tiers = manager
        self.io = io

    def lookup(self, key: OffloadKey, req_context: ReqContext) -> LookupResult:
        keys = self._keys((key,), req_context)
        hits = self._strict("lookup", self.tiers.lookup, req_context.req_id, keys)
        if hits is None:
            return LookupResult.RETRY
        return LookupResult.HIT if hits else LookupResult.MISS

    def on_schedule_end(self, context: ScheduleEndContext) -> None:
        self._strict("on_schedule_end", self.io.run, self.tiers)

    def has_pending_work(self) -> bool:
        return bool(self.tiers.tier_jobs_in_flight)

    def shutdown(self) -> None:
        self.io.close()

    def leaks(self) -> list[str]:
        found = self.tiers.leaks() + self.io.tally.waiting()
        return found + [
            f"tier job {job_id} ({job.kind} to {job.tier}) still in flight"
            for job_id, job in sorted(self.tiers.tier_jobs_in_flight.items())
        ]
