"""The CPU-tier policies that peer projects ship, written here from their papers and documentation,
so ``kvoffload replay --sweep`` compares the default against them behind the same manager:

- ``s3fifo``: S3-FIFO (Yang et al., SOSP '23), which LMCache offers;
- ``wtinylfu``: W-TinyLFU (Einziger, Friedman and Manes, "TinyLFU: A Highly Efficient Cache
  Admission Policy"), Caffeine's policy: a 1% window LRU in front of a 20/80 segmented LRU, with
  a count-min sketch and a doorkeeper Bloom filter deciding which of the window's and the main
  space's victims stays;
- ``sieve``: SIEVE (Zhang et al., NSDI '24): a FIFO with a visited bit and a moving hand;
- ``lmcache_admission``: LMCache's admission wrapper over LRU: a decaying frequency counter, and a
  new key is stored (once the tier is full) only if it is more frequent than the coldest resident.

``lfu`` (LFU with dynamic aging, as SGLang HiCache and LMCache offer LFU) is in
:mod:`kvoffload.offload.policies.classic`, as the default evicts by it. The call contract is
:class:`~kvoffload.offload.policies.base.EvictionPolicy`'s.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Hashable
from itertools import islice

from kvoffload.offload.policies.base import Evictable, EvictionPolicy, KeyHistory
from kvoffload.offload.policies.classic import LRUPolicy
from kvoffload.offload.types import OffloadKey

_MASK64 = (1 << 64) - 1
# Odd 64-bit multipliers: multiply-shift hashing, one per sketch row and Bloom filter probe.
_SEEDS = (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93, 0xFF51AFD7ED558CCD)


def _slots(key: OffloadKey, bits: int, count: int) -> list[int]:
    """``count`` indices in [0, 2**bits) for ``key`` (one per seed)."""
    value = key & _MASK64
    shift = 64 - bits
    return [((value * seed) & _MASK64) >> shift for seed in _SEEDS[:count]]


class FrequencySketch:
    """TinyLFU's frequency estimate: a count-min sketch of 4-bit counters (4 rows of a power of two
    at least ``width``) behind a doorkeeper Bloom filter that absorbs each key's first occurrence.
    After ``sample_size`` recorded occurrences every counter is halved and the doorkeeper cleared
    (the paper's reset), so the counts describe recent traffic."""

    ROWS = 4
    PROBES = 3
    MAX_COUNT = 15

    def __init__(self, width: int, sample_size: int) -> None:
        self.bits = max(4, (max(1, width) - 1).bit_length())
        self.door_bits = self.bits + 3  # 8 filter bits per counter column
        self.sample_size = max(1, sample_size)
        self.additions = 0
        self._rows = [bytearray(1 << self.bits) for _ in range(self.ROWS)]
        self._door = bytearray(1 << self.door_bits)

    def estimate(self, key: OffloadKey) -> int:
        """How often ``key`` occurred lately (the doorkeeper's bit counts one)."""
        rows = self._rows
        count = min(rows[row][slot] for row, slot in enumerate(_slots(key, self.bits, self.ROWS)))
        door = self._door
        return count + all(door[slot] for slot in _slots(key, self.door_bits, self.PROBES))

    def record(self, key: OffloadKey) -> None:
        """One more occurrence of ``key``."""
        door = self._door
        probes = _slots(key, self.door_bits, self.PROBES)
        if not all(door[slot] for slot in probes):
            for slot in probes:
                door[slot] = 1
        else:
            for row, slot in enumerate(_slots(key, self.bits, self.ROWS)):
                counters = self._rows[row]
                if counters[slot] < self.MAX_COUNT:
                    counters[slot] += 1
        self.additions += 1
        if self.additions >= self.sample_size:
            self._halve()

    def _halve(self) -> None:
        self.additions //= 2
        self._rows = [bytearray(count >> 1 for count in counters) for counters in self._rows]
        self._door = bytearray(len(self._door))

    def clear(self) -> None:
        self.additions = 0
        self._rows = [bytearray(len(counters)) for counters in self._rows]
        self._door = bytearray(len(self._door))

    def fingerprint(self) -> Hashable:
        return (self.additions, *(bytes(counters) for counters in self._rows), bytes(self._door))


class WTinyLFUPolicy(EvictionPolicy):
    """W-TinyLFU: every key enters a window LRU (``window_fraction`` of the tier, 1%); a key pushed
    out of the window competes with the main space's victim (the least recent key of probation),
    and only the more frequent of the two by the sketch stays. The main space is a segmented LRU:
    probation (20%) and protected (80%), a probation key hit is promoted, a protected key pushed out
    is demoted to probation. The sketch samples ``sample_factor`` x capacity occurrences (10, as the
    paper recommends) between resets."""

    name = "wtinylfu"

    def __init__(
        self, capacity: int, window_fraction: float = 0.01, protected_fraction: float = 0.8, sample_factor: int = 10
    ) -> None:
        if capacity < 1:
            raise ValueError(f"W-TinyLFU capacity must be positive, got {capacity}")
        self.capacity = capacity
        self.window_capacity = max(1, round(capacity * window_fraction))
        self.main_capacity = max(1, capacity - self.window_capacity)
        self.protected_capacity = max(1, int(self.main_capacity * protected_fraction))
        self.sketch = FrequencySketch(capacity, sample_factor * capacity)
        self._window: OrderedDict[OffloadKey, None] = OrderedDict()
        self._probation: OrderedDict[OffloadKey, None] = OrderedDict()
        self._protected: OrderedDict[OffloadKey, None] = OrderedDict()

    def admit(self, key: OffloadKey) -> bool:
        self.sketch.record(key)  # an offered store is a miss: an occurrence
        return True

    def on_insert(self, key: OffloadKey, parent: OffloadKey | None) -> None:
        self._window[key] = None
        # Until the tier first fills, the window's overflow moves to the main space without a
        # contest; afterwards it contests in victims(), even if that leaves the window over its share
        # until the next call (when more keys come in one store than the window holds).
        while (
            len(self._window) > self.window_capacity
            and self._main_size() < self.main_capacity
            and len(self._window) + self._main_size() < self.capacity
        ):
            moved, _ = self._window.popitem(last=False)
            self._probation[moved] = None

    def _main_size(self) -> int:
        return len(self._probation) + len(self._protected)

    def on_hit(self, key: OffloadKey) -> None:
        self.sketch.record(key)
        if key in self._window:
            self._window.move_to_end(key)
        elif key in self._probation:
            del self._probation[key]
            self._protected[key] = None
            while len(self._protected) > self.protected_capacity:
                demoted, _ = self._protected.popitem(last=False)
                self._probation[demoted] = None
        elif key in self._protected:
            self._protected.move_to_end(key)

    def on_remove(self, key: OffloadKey) -> None:
        self._window.pop(key, None)
        self._probation.pop(key, None)
        self._protected.pop(key, None)

    def _main_victim(self, chosen: dict[OffloadKey, None], evictable: Evictable) -> OffloadKey | None:
        for part in (self._probation, self._protected, self._window):
            for key in part:
                if key not in chosen and evictable(key):
                    return key
        return None

    def victims(
        self, count: int, evictable: Evictable, incoming: Collection[OffloadKey]
    ) -> list[OffloadKey] | None:
        chosen: dict[OffloadKey, None] = {}
        window = self._window
        # The ``count`` keys coming will enter the window: its least recent keys beyond its share
        # leave it now, each contesting the main space's victim. Moving a key from window to
        # probation changes only the order, never the resident set.
        overflow = list(islice(window, max(0, len(window) + count - self.window_capacity)))
        for candidate in overflow:
            if len(chosen) == count:
                break
            victim = self._main_victim(chosen, lambda k: k not in window and evictable(k))
            if evictable(candidate) and (
                victim is None or self.sketch.estimate(candidate) <= self.sketch.estimate(victim)
            ):
                chosen[candidate] = None
                continue
            del window[candidate]
            self._probation[candidate] = None
            if victim is not None:
                chosen[victim] = None
        while len(chosen) < count:
            victim = self._main_victim(chosen, evictable)
            if victim is None:
                return None
            chosen[victim] = None
        return list(chosen)

    def segments(self) -> tuple[tuple[OffloadKey, ...], tuple[OffloadKey, ...], tuple[OffloadKey, ...]]:
        """The window, probation and protected keys, each least recent first."""
        return tuple(self._window), tuple(self._probation), tuple(self._protected)

    def reset(self) -> None:
        self.sketch.clear()
        self._window.clear()
        self._probation.clear()
        self._protected.clear()

    def fingerprint(self) -> Hashable:
        return (self.sketch.fingerprint(), tuple(self._window), tuple(self._probation), tuple(self._protected))


class SievePolicy(EvictionPolicy):
    """SIEVE: keys in insertion order with a visited bit set by a hit; a hand sweeps from the
    oldest key towards the newest, clearing visited bits and evicting the first unvisited key, and
    stays where it stopped (wrapping to the oldest). New keys go in at the newest end, so a key
    retained by the hand keeps its place: no reordering on hits."""

    name = "sieve"

    def __init__(self) -> None:
        self._visited: dict[OffloadKey, bool] = {}
        self._newer: dict[OffloadKey, OffloadKey | None] = {}
        self._older: dict[OffloadKey, OffloadKey | None] = {}
        self._oldest: OffloadKey | None = None
        self._newest: OffloadKey | None = None
        self._hand: OffloadKey | None = None

    def on_insert(self, key: OffloadKey, parent: OffloadKey | None) -> None:
        self._visited[key] = False
        self._older[key] = self._newest
        self._newer[key] = None
        if self._newest is not None:
            self._newer[self._newest] = key
        else:
            self._oldest = key
        self._newest = key

    def on_hit(self, key: OffloadKey) -> None:
        if key in self._visited:
            self._visited[key] = True

    def on_remove(self, key: OffloadKey) -> None:
        if key not in self._visited:
            return
        del self._visited[key]
        older, newer = self._older.pop(key), self._newer.pop(key)
        if self._hand == key:
            self._hand = newer
        if older is None:
            self._oldest = newer
        else:
            self._newer[older] = newer
        if newer is None:
            self._newest = older
        else:
            self._older[newer] = older

    def victims(
        self, count: int, evictable: Evictable, incoming: Collection[OffloadKey]
    ) -> list[OffloadKey] | None:
        chosen: dict[OffloadKey, None] = {}
        visited = self._visited
        hand = self._hand if self._hand is not None else self._oldest
        # Two laps clear every visited bit on the first; a third finds nothing new.
        for _ in range(2 * len(visited) + 1):
            if len(chosen) == count or hand is None:
                break
            if visited[hand]:
                visited[hand] = False
            elif hand not in chosen and evictable(hand):
                chosen[hand] = None
            hand = self._newer[hand]
            if hand is None:
                hand = self._oldest
        self._hand = hand
        return list(chosen) if len(chosen) == count else None

    def reset(self) -> None:
        self._visited.clear()
        self._newer.clear()
        self._older.clear()
        self._oldest = self._newest = self._hand = None

    def fingerprint(self) -> Hashable:
        order: list[tuple[OffloadKey, bool]] = []
        key = self._oldest
        while key is not None:
            order.append((key, self._visited[key]))
            key = self._newer[key]
        return (tuple(order), self._hand)


class LMCacheAdmissionPolicy(LRUPolicy):
    """LMCache's admission wrapper over LRU: a decaying count of how often each key was offered or
    hit (all counts halved every ``sample_factor`` x capacity occurrences, zeros forgotten). While
    there is free room every key is stored; once the tier is full, a key not resident is stored
    only if its count exceeds that of the coldest resident key (the LRU end)."""

    name = "lmcache_admission"

    def __init__(self, capacity: int, sample_factor: int = 10) -> None:
        super().__init__()
        self.capacity = capacity
        self.sample_size = max(1, sample_factor * capacity)
        self._counts: dict[OffloadKey, int] = {}
        self._occurrences = 0
        self._promised = 0  # free-room admissions of the current batch, as the doorkeeper's

    def _count(self, key: OffloadKey) -> None:
        self._counts[key] = self._counts.get(key, 0) + 1
        self._occurrences += 1
        if self._occurrences >= self.sample_size:
            self._occurrences = 0
            self._counts = {k: c >> 1 for k, c in self._counts.items() if c > 1}

    def admit(self, key: OffloadKey) -> bool:
        self._count(key)
        if len(self._order) + self._promised < self.capacity:
            self._promised += 1
            return True
        coldest = next(iter(self._order), None)
        return coldest is None or self._counts.get(key, 0) > self._counts.get(coldest, 0)

    def on_insert(self, key: OffloadKey, parent: OffloadKey | None) -> None:
        self._promised = max(0, self._promised - 1)
        super().on_insert(key, parent)

    def on_hit(self, key: OffloadKey) -> None:
        self._count(key)
        super().on_hit(key)

    def victims(
        self, count: int, evictable: Evictable, incoming: Collection[OffloadKey]
    ) -> list[OffloadKey] | None:
        self._promised = 0
        return super().victims(count, evictable, incoming)

    def reset(self) -> None:
        super().reset()
        self._counts.clear()
        self._occurrences = self._promised = 0

    def fingerprint(self) -> Hashable:
        return (super().fingerprint(), tuple(sorted(self._counts.items())), self._occurrences, self._promised)


class S3FIFOPolicy(EvictionPolicy):
    """S3-FIFO (Yang et al., SOSP'23): new keys enter a small FIFO (10%); a key used there moves to
    the main FIFO on eviction, an unused one leaves a ghost; a key re-inserted while a ghost goes
    straight to main; main keys with a use left are reinserted (2-bit frequency). Quick demotion
    of one-hit prefixes, with no per-hit reordering.

    ``victims`` promotes, ages and rotates keys while it searches, even when it then returns None:
    that changes the order only, never the resident set."""

    name = "s3fifo"

    def __init__(self, capacity: int, small_fraction: float = 0.1, ghost_factor: int = 4) -> None:
        self.capacity = capacity
        self.small_target = max(1, int(capacity * small_fraction))
        self._small: OrderedDict[OffloadKey, None] = OrderedDict()
        self._main: OrderedDict[OffloadKey, None] = OrderedDict()
        self._freq: dict[OffloadKey, int] = {}
        self._ghosts = KeyHistory(ghost_factor * capacity)

    def on_insert(self, key: OffloadKey, parent: OffloadKey | None) -> None:
        if key in self._ghosts:
            self._ghosts.discard(key)
            self._main[key] = None
        else:
            self._small[key] = None
        self._freq[key] = 0

    def on_hit(self, key: OffloadKey) -> None:
        if key in self._freq:
            self._freq[key] = min(3, self._freq[key] + 1)

    def on_remove(self, key: OffloadKey) -> None:
        self._small.pop(key, None)
        self._main.pop(key, None)
        self._freq.pop(key, None)

    def victims(
        self, count: int, evictable: Evictable, incoming: Collection[OffloadKey]
    ) -> list[OffloadKey] | None:
        chosen: dict[OffloadKey, None] = {}
        from_small: set[OffloadKey] = set()
        freq = self._freq
        small, main = self._small, self._main
        # The small FIFO gives victims while it is over its share (or main is empty). Keys are
        # looked at from the head and rotated to the tail, so no queue is ever copied.
        for _ in range(len(small)):
            if len(chosen) == count or (len(small) - len(from_small) <= self.small_target and main):
                break
            key = next(iter(small))
            if freq[key] > 0:
                del small[key]
                freq[key] = 0
                main[key] = None
                continue
            if evictable(key):
                chosen[key] = None
                from_small.add(key)
            small.move_to_end(key)
        # Main, CLOCK-like: a key with uses left is aged and rotated; 4 rounds age any key to 0.
        for _ in range(4 * len(main)):
            if len(chosen) == count:
                break
            key = next(iter(main))
            if freq[key] > 0:
                freq[key] -= 1
            elif key not in chosen and evictable(key):
                chosen[key] = None
            main.move_to_end(key)
        if len(chosen) < count:
            for key in (*small, *main):
                if len(chosen) == count:
                    break
                if key not in chosen and evictable(key):
                    chosen[key] = None
                    if key in small:
                        from_small.add(key)
        if len(chosen) < count:
            return None
        for key in from_small:
            self._ghosts.add(key)
        return list(chosen)

    def reset(self) -> None:
        self._small.clear()
        self._main.clear()
        self._freq.clear()
        self._ghosts.clear()

    def fingerprint(self) -> Hashable:
        return (tuple(self._small), tuple(self._main), tuple(sorted(self._freq.items())), self._ghosts.fingerprint())
