"""The CPU-tier oracle: Belady's rule for the CPU tier, told the trace's future.

A fair target for a CPU-tier policy is not Belady on one cache of G + C blocks (see
:mod:`kvoffload_lab.tracestudy.bounds`): kvoffload's CPU tier is written through behind the engine's LRU GPU
prefix cache, so what the CPU tier can serve depends on what the GPU cache keeps. The oracle keeps
the hierarchy and changes only the CPU tier's decisions: it is an :class:`EvictionPolicy` run by the
real manager in the same replay, through the same scheduler and the same GPU cache, that

- admits an offered key only if it is used again, and, when the tier is full, only if its next use
  comes before that of the resident key with the furthest next use, which it then evicts;
- evicts the resident keys whose next use is furthest (never used again = infinitely far).

"Next use" is the index of the next request of the trace whose prompt holds the key, after the
request being replayed (:meth:`BeladyCPUPolicy.advance` moves the clock). This is Belady's rule
with bypass on the trace's block references; it is not guaranteed optimal for the CPU tier, whose
own reference stream depends on the GPU cache, but no online policy can know more.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Collection, Hashable, Sequence

from kvoffload.offload.policies import Evictable, EvictionPolicy
from kvoffload.offload.types import OffloadKey

NEVER = 1 << 62


class ClairvoyantPolicy:
    """The trace's future for a CPU-tier policy (a mixin next to :class:`EvictionPolicy`): every
    request's keys, in replay order. The replay calls :meth:`advance` before each request, so
    :meth:`next_use` is relative to it. Used only for bounds (this oracle and
    :mod:`kvoffload_lab.tracestudy.oracle_breakdown`), never by an engine."""

    def __init__(self, chains: Sequence[Sequence[OffloadKey]]) -> None:
        self._uses: dict[OffloadKey, list[int]] = {}
        for index, keys in enumerate(chains):
            for key in keys:
                self._uses.setdefault(key, []).append(index)
        self._clock = -1

    def advance(self, index: int, keys: Sequence[OffloadKey]) -> None:
        """Request ``index`` (whose prompt holds ``keys``) is being replayed: move the clock."""
        self._clock = index

    def next_use(self, key: OffloadKey) -> int:
        """The first request after the current one that uses ``key``, or NEVER."""
        uses = self._uses.get(key)
        if not uses:
            return NEVER
        at = bisect_right(uses, self._clock)
        return uses[at] if at < len(uses) else NEVER


class BeladyCPUPolicy(ClairvoyantPolicy, EvictionPolicy):
    """Belady's furthest-next-use rule, with bypass, for the CPU tier (see the module docstring).

    Args:
        chains: every request's keys, in replay order (the trace's future).
        capacity: the CPU tier's size in blocks.
    """

    name = "cpu_oracle"

    def __init__(self, chains: Sequence[Sequence[OffloadKey]], capacity: int) -> None:
        super().__init__(chains)
        self.capacity = capacity
        # Resident key -> its next use; the heap holds (-next use, key), stale entries included
        # (an entry is live while it matches the dict).
        self._next: dict[OffloadKey, int] = {}
        self._heap: list[tuple[int, OffloadKey]] = []
        # Victims chosen by admit() in the current prepare_store, still resident until evicted.
        self._chosen: list[OffloadKey] = []
        self._promised = 0

    def advance(self, index: int, keys: Sequence[OffloadKey]) -> None:
        super().advance(index, keys)
        for key in keys:
            if key in self._next:
                self._set(key)

    def _set(self, key: OffloadKey) -> None:
        upcoming = self.next_use(key)
        self._next[key] = upcoming
        heapq.heappush(self._heap, (-upcoming, key))
        if len(self._heap) > 4 * len(self._next) + 1024:
            self._heap = [(-n, k) for k, n in self._next.items() if k not in self._chosen]
            heapq.heapify(self._heap)

    def _pop_furthest(self) -> tuple[int, OffloadKey] | None:
        """Remove and return the live heap entry with the furthest next use (None: none left)."""
        heap = self._heap
        while heap:
            negative, key = heapq.heappop(heap)
            if self._next.get(key) == -negative and key not in self._chosen:
                return -negative, key
        return None

    def admit(self, key: OffloadKey) -> bool:
        upcoming = self.next_use(key)
        if upcoming == NEVER:
            return False
        if len(self._next) - len(self._chosen) + self._promised < self.capacity:
            self._promised += 1
            return True
        furthest = self._pop_furthest()
        if furthest is None:
            return False
        if furthest[0] <= upcoming:
            heapq.heappush(self._heap, (-furthest[0], furthest[1]))
            return False
        self._chosen.append(furthest[1])
        self._promised += 1
        return True

    def on_insert(self, key: OffloadKey, parent: OffloadKey | None) -> None:
        self._promised = max(0, self._promised - 1)
        self._set(key)

    def on_hit(self, key: OffloadKey) -> None:
        """Nothing to do: next uses move with :meth:`advance`."""

    def on_remove(self, key: OffloadKey) -> None:
        self._next.pop(key, None)

    def victims(
        self, count: int, evictable: Evictable, incoming: Collection[OffloadKey]
    ) -> list[OffloadKey] | None:
        self._promised = 0
        candidates, self._chosen = self._chosen, []
        chosen = [key for key in candidates if evictable(key)][:count]
        skipped = [key for key in candidates if key not in chosen]
        while len(chosen) < count:
            furthest = self._pop_furthest()
            if furthest is None:
                break
            (chosen if evictable(furthest[1]) else skipped).append(furthest[1])
        for key in skipped:
            heapq.heappush(self._heap, (-self._next[key], key))
        if len(chosen) < count:
            for key in chosen:
                heapq.heappush(self._heap, (-self._next[key], key))
            return None
        return chosen

    def reset(self) -> None:
        self._next.clear()
        self._heap.clear()
        self._chosen.clear()
        self._promised = 0

    def fingerprint(self) -> Hashable:
        return (self._clock, tuple(sorted(self._next.items())), tuple(self._chosen), self._promised)
