"""Small builders shared by the core tests (no fixtures with hidden state)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from kvoffload.offload import OffloadConfig, OffloadingScheduler, RequestTracker


@dataclass
class FakeRequest:
    """An engine request reduced to what the scheduler reads."""

    request_id: str
    block_hashes: list[int] = field(default_factory=list)
    num_tokens: int = 0


def request(request_id: str, hashes: list[int], extra_tokens: int = 1, block_size: int = 4) -> FakeRequest:
    """A request whose prompt fills ``len(hashes)`` blocks plus ``extra_tokens`` tokens."""
    return FakeRequest(request_id, list(hashes), len(hashes) * block_size + extra_tokens)


def scheduler(num_cpu_blocks: int = 8, block_size: int = 4, blocks_per_chunk: int = 1, policy: str = "lru"):
    return OffloadingScheduler(OffloadConfig(block_size, blocks_per_chunk, num_cpu_blocks, policy))


class NoFenceScheduler(OffloadingScheduler):
    """The scheduler without its GPU block fence and without the flush on preemption."""

    def _fence_check(self, block_ids: Iterable[int]) -> None:
        return None

    def _preempt(self, tracker: RequestTracker) -> None:
        self.lifecycle.fire(tracker, "preempt")
        tracker.gpu_block_ids = []
        tracker.num_computed_tokens = 0
