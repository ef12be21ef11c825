"""Small builders shared by the core tests (no fixtures with hidden state)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

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


def full_state(value: Any, _stack: frozenset[int] = frozenset()) -> Any:
    """Everything reachable from ``value``, as nested tuples that compare by content and order."""
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return value
    if id(value) in _stack:
        return ("<cycle>", type(value).__name__)
    stack = _stack | {id(value)}
    if isinstance(value, dict):
        return (type(value).__name__, tuple((full_state(k, stack), full_state(v, stack)) for k, v in value.items()))
    if isinstance(value, (list, tuple)) or type(value).__name__ == "deque":
        return (type(value).__name__, tuple(full_state(item, stack) for item in value))
    if isinstance(value, (set, frozenset)):
        return (type(value).__name__, tuple(sorted((full_state(item, stack) for item in value), key=repr)))
    if callable(value) and not hasattr(value, "__dict__"):
        return ("<callable>", getattr(value, "__qualname__", repr(value)))
    names = [name for klass in type(value).__mro__ for name in getattr(klass, "__slots__", ())]
    attributes = {name: getattr(value, name) for name in names if hasattr(value, name)}
    attributes.update(getattr(value, "__dict__", {}))
    # The lifecycle runtime is the immutable declaration shared by every scheduler.
    attributes.pop("lifecycle", None)
    return (type(value).__name__, tuple((name, full_state(item, stack)) for name, item in sorted(attributes.items())))
