"""Offline bounds on the prefix-cache hit ratio of a block trace.

The measure (shared with the replay): each request is a chain of full-block keys; it is served
from the cache for its longest cached prefix (hits count until the first missing block, as prefix
caching does), then all of its blocks are used (inserted, or refreshed).

- ``infinite_hit_ratio``: unbounded memory: only first sightings miss (apart from the blocks after a
  request's first miss, which prefix semantics cannot serve either).
- ``belady_hit_ratio``: ONE cache of ``capacity`` blocks with Belady's offline rule: when full,
  drop the block whose next use is furthest in the future (never used again = infinitely far;
  the incoming block is a candidate too, so a block with no future is simply not kept). Ties are
  broken deepest-first: a child is never used without its parent, so its next use is never
  earlier, and dropping the deeper one keeps the chain servable.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

NEVER = 1 << 62


@dataclass(frozen=True)
class BoundResult:
    """Hits and block counts of one bound."""

    blocks: int
    hits: int

    @property
    def hit_ratio(self) -> float:
        return self.hits / self.blocks if self.blocks else 0.0


def infinite_cache(chains: Sequence[Sequence[int]]) -> BoundResult:
    """Hits with unbounded memory under prefix semantics."""
    seen: set[int] = set()
    hits = blocks = 0
    for keys in chains:
        blocks += len(keys)
        for key in keys:
            if key not in seen:
                break
            hits += 1
        seen.update(keys)
    return BoundResult(blocks, hits)


def next_uses(chains: Sequence[Sequence[int]]) -> list[list[int]]:
    """For block j of request i: the index of the next request that uses the same key, or NEVER."""
    upcoming: dict[int, int] = {}
    result: list[list[int]] = [[] for _ in chains]
    for index in range(len(chains) - 1, -1, -1):
        keys = chains[index]
        result[index] = [upcoming.get(key, NEVER) for key in keys]
        for key in keys:
            upcoming[key] = index
    return result


def belady(chains: Sequence[Sequence[int]], capacity: int) -> BoundResult:
    """Hits of one ``capacity``-block cache under Belady's furthest-next-use eviction."""
    if capacity < 1:
        raise ValueError(f"capacity must be positive, got {capacity}")
    nexts = next_uses(chains)
    # key -> (next use, depth) of the resident copy; the heap holds stale entries too (lazy delete).
    resident: dict[int, int] = {}
    heap: list[tuple[int, int, int]] = []
    hits = blocks = 0
    for keys, key_nexts in zip(chains, nexts, strict=True):
        blocks += len(keys)
        for key in keys:
            if key not in resident:
                break
            hits += 1
        for depth, (key, upcoming) in enumerate(zip(keys, key_nexts, strict=True)):
            resident[key] = upcoming
            heapq.heappush(heap, (-upcoming, -depth, key))
            while len(resident) > capacity:
                negative_next, _, victim = heapq.heappop(heap)
                if resident.get(victim) == -negative_next:
                    del resident[victim]
        if len(heap) > 4 * capacity + 1024:
            heap = [(-n, -d, k) for n, d, k in _live_entries(heap, resident)]
            heapq.heapify(heap)
    return BoundResult(blocks, hits)


def _live_entries(heap: list[tuple[int, int, int]], resident: dict[int, int]) -> list[tuple[int, int, int]]:
    # Keep one entry per resident key: the one matching its current next use.
    live: dict[int, tuple[int, int, int]] = {}
    for negative_next, negative_depth, key in heap:
        if resident.get(key) == -negative_next:
            live[key] = (-negative_next, -negative_depth, key)
    return list(live.values())
