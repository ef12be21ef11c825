"""Outcomes of tensor-parallel workers, combined on the scheduler side (no vLLM import).

With tensor parallelism every worker (rank) runs the same jobs on its own shard of the KV cache:
its GPU<->CPU copies and its tier I/O (tier keys carry the rank). A job is done for the scheduler
only when every rank reported it, and it succeeded only if it succeeded on every rank: a chunk
one rank failed to store, promote or load is not there. Ranks may report a job in different
steps, so the scheduler side keeps each job's reports until the last rank's arrives.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kvoffload.offload.types import JobId
from kvoffload.tiers.protocol import CORRUPT, FAULT, MISS, OK, TierOutcome

# When ranks disagree about a key, the combined result is the worst of theirs.
_SEVERITY = {OK: 0, MISS: 1, FAULT: 2, CORRUPT: 3}


@dataclass(frozen=True)
class RankReport:
    """What one rank finished since its last report."""

    rank: int
    completed: Mapping[JobId, bool] = field(default_factory=dict)
    tier_outcomes: tuple[TierOutcome, ...] = ()


def combine_tier_outcomes(outcomes: Iterable[TierOutcome]) -> TierOutcome:
    """One outcome for the job from every rank's: per key the worst result, the fewest foreign."""
    reports = list(outcomes)
    columns = zip(*(outcome.results for outcome in reports), strict=True)
    results = tuple(max(column, key=_SEVERITY.__getitem__) for column in columns)
    return TierOutcome(reports[0].job_id, results, min(o.foreign for o in reports))


class RankTally:
    """Collects rank reports; hands out each job once every one of ``world_size`` ranks reported it."""

    def __init__(self, world_size: int) -> None:
        if world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {world_size}")
        self.world_size = world_size
        self._jobs: dict[JobId, dict[int, bool]] = {}
        self._tier_jobs: dict[int, dict[int, TierOutcome]] = {}

    def add(self, reports: Iterable[RankReport]) -> tuple[dict[JobId, bool], tuple[TierOutcome, ...]]:
        """The GPU<->CPU jobs and tier jobs that every rank has now reported, combined."""
        completed: dict[JobId, bool] = {}
        tier_done: list[TierOutcome] = []
        for report in reports:
            if not 0 <= report.rank < self.world_size:
                raise ValueError(f"a report from rank {report.rank}; this engine has {self.world_size} rank(s)")
            for job_id, ok in report.completed.items():
                seen = self._jobs.setdefault(job_id, {})
                if report.rank in seen:
                    raise ValueError(f"rank {report.rank} reported job {job_id} twice")
                seen[report.rank] = ok
                if len(seen) == self.world_size:
                    completed[job_id] = all(self._jobs.pop(job_id).values())
            for outcome in report.tier_outcomes:
                tier_seen = self._tier_jobs.setdefault(outcome.job_id, {})
                if report.rank in tier_seen:
                    raise ValueError(f"rank {report.rank} reported tier job {outcome.job_id} twice")
                tier_seen[report.rank] = outcome
                if len(tier_seen) == self.world_size:
                    tier_done.append(combine_tier_outcomes(self._tier_jobs.pop(outcome.job_id).values()))
        return completed, tuple(sorted(tier_done))

    def waiting(self) -> list[str]:
        """Jobs some ranks reported and others not yet."""
        return [f"job {job_id}: ranks {sorted(ranks)} of {self.world_size} reported"
                for job_id, ranks in sorted(self._jobs.items())] + [
                f"tier job {job_id}: ranks {sorted(ranks)} of {self.world_size} reported"
                for job_id, ranks in sorted(self._tier_jobs.items())]
