"""``kvoffload replay TRACE --tier-blocks file=N[,redis=M]``: the trace replay with secondary tiers.

The replay of kvoffload_lab.tracestudy.replay (sequential, one 512-token block per scheduling unit),
with a :class:`TieringManager` as the CPU tier's manager and one LRU tier index per named tier of
N blocks, in the order given. Tier I/O is not performed: every cascade and promotion succeeds at
once (this measures where hits come from, not bandwidth). A lookup that starts a promotion is
retried after it, as an engine would one step later. Reports, besides the replay's figures, the
share of full prompt blocks each secondary tier served (promoted, then loaded).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvoffload.offload.manager import CPUOffloadingManager
from kvoffload.offload.scheduler import OffloadingScheduler
from kvoffload.offload.types import ConnectorUpdate, EngineRequest, WorkerOutput
from kvoffload.tiers.index import LocalTierIndex
from kvoffload.tiers.manager import TieringManager
from kvoffload.tiers.protocol import OK, TierOutcome
from kvoffload_lab.tracestudy.mooncake import TraceRequest, block_chains
from kvoffload_lab.tracestudy.replay import ReplayAnomaly, TraceReplay

# A lookup still deferred after this many promotions in a row is a scheduler that stopped progressing.
MAX_PROMOTION_ROUNDS = 64


class InstantTierScheduler(OffloadingScheduler):
    """The real scheduler over a TieringManager whose tier jobs complete as soon as they exist."""

    manager: TieringManager  # type: ignore[assignment]

    def _run_tier_jobs(self) -> None:
        for job in self.manager.take_tier_jobs():
            self.manager.complete_tier_job(TierOutcome(job.job_id, (OK,) * len(job.keys)))

    def get_num_new_matched_tokens(self, request: EngineRequest, num_computed_tokens: int) -> tuple[int | None, bool]:
        for _ in range(MAX_PROMOTION_ROUNDS):
            tokens, load_async = super().get_num_new_matched_tokens(request, num_computed_tokens)
            if tokens is not None:
                return tokens, load_async
            self._run_tier_jobs()
        raise ReplayAnomaly(f"request {request.request_id}: lookup deferred {MAX_PROMOTION_ROUNDS} times in a row")

    def update_connector_output(self, worker_output: WorkerOutput) -> ConnectorUpdate:
        update = super().update_connector_output(worker_output)
        self._run_tier_jobs()
        return update


class TieredTraceReplay(TraceReplay):
    """TraceReplay whose manager is a TieringManager over ``tier_blocks`` (name -> blocks)."""

    def __init__(self, gpu_blocks: int, cpu_blocks: int, policy: str, tier_blocks: dict[str, int], **kw: Any) -> None:
        super().__init__(gpu_blocks, cpu_blocks, policy, **kw)
        tiers = [LocalTierIndex(name, blocks) for name, blocks in tier_blocks.items()]
        self.manager = TieringManager(CPUOffloadingManager(cpu_blocks, policy), tiers)  # type: ignore[assignment]
        self.scheduler = InstantTierScheduler(self.config, self.manager)  # type: ignore[arg-type]


def replay_tiered(
    requests: Sequence[TraceRequest], gpu_blocks: int, cpu_blocks: int, policy: str, tier_blocks: dict[str, int],
    check_every: int = 100,
) -> dict[str, Any]:
    """The replay's figures plus ``tiers`` (per tier: blocks, hit ratio, promoted, cascaded)."""
    replay = TieredTraceReplay(gpu_blocks, cpu_blocks, policy, tier_blocks, check_every=check_every)
    result = replay.run(block_chains(requests))
    manager: TieringManager = replay.manager  # type: ignore[assignment]
    blocks = result.blocks or 1
    tiers = {
        name: {
            "blocks": tier_blocks[name],
            "hit_ratio": stats.promoted_keys / blocks,
            "promoted_blocks": stats.promoted_keys,
            "cascaded_blocks": stats.cascaded_keys,
            "skipped_cascades": stats.cascade_skipped_keys,
            "failed_promotions": stats.failed_promotions,
        }
        for name, stats in manager.tier_stats.items()
    }
    promoted = sum(tier["promoted_blocks"] for tier in tiers.values())
    data = result.as_dict()
    data.update(tiers=tiers, cpu_resident_hit_ratio=(result.cpu_hits - promoted) / blocks)
    return data
