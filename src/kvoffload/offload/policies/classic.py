"""The default and the classic policies of the CPU tier: ``lru``, ``arc`` (vLLM), ``prefix_lru``
(SGLang's radix cache), ``lfu`` (LFU with dynamic aging), the second-sighting admissions in front
of them (``doorkeeper``) and the default, ``doorkeeper_lfu``. The call contract is
:class:`~kvoffload.offload.policies.base.EvictionPolicy`'s.
"""

from __future__ import annotations

import copy
import heapq
from collections import OrderedDict
from collections.abc import Collection, Hashable
from typing import Self

from kvoffload.offload.policies.base import Evictable, EvictionPolicy, KeyHistory
from kvoffload.offload.types import OffloadKey


def _oldest_evictable(order: OrderedDict[OffloadKey, None], count: int, evictable: Evictable) -> list[OffloadKey]:
    chosen: list[OffloadKey] = []
    for key in order:
        if evictable(key):
            chosen.append(key)
            if len(chosen) == count:
                break
    return chosen


class LRUPolicy(EvictionPolicy):
    """Least recently used first. Good default for steady traffic with strong recency."""

    name = "lru"

    def __init__(self) -> None:
        self._order: OrderedDict[OffloadKey, None] = OrderedDict()

    def on_insert(self, key: OffloadKey, parent: OffloadKey | None) -> None:
        self._order[key] = None

    def on_hit(self, key: OffloadKey) -> None:
        if key in self._order:
            self._order.move_to_end(key)

    def on_remove(self, key: OffloadKey) -> None:
        self._order.pop(key, None)

    def victims(
        self, count: int, evictable: Evictable, incoming: Collection[OffloadKey]
    ) -> list[OffloadKey] | None:
        chosen = _oldest_evictable(self._order, count, evictable)
        return chosen if len(chosen) == count else None

    def reset(self) -> None:
        self._order.clear()

    def fingerprint(self) -> Hashable:
        return tuple(self._order)

    def clone(self) -> Self:
        if type(self) is not LRUPolicy:  # subclasses keep more state
            return super().clone()
        clone = object.__new__(type(self))
        clone._order = self._order.copy()
        return clone


class ARCPolicy(EvictionPolicy):
    """Adaptive Replacement Cache (Megiddo & Modha): balances recency (T1) against frequency (T2)
    with ghost lists B1/B2 steering the target size ``p`` of T1. Resists scans of one-off prefixes."""

    name = "arc"

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"ARC capacity must be positive, got {capacity}")
        self.capacity = capacity
        self.target_t1 = 0.0
        self._t1: OrderedDict[OffloadKey, None] = OrderedDict()
        self._t2: OrderedDict[OffloadKey, None] = OrderedDict()
        self._b1: OrderedDict[OffloadKey, None] = OrderedDict()
        self._b2: OrderedDict[OffloadKey, None] = OrderedDict()

    def on_insert(self, key: OffloadKey, parent: OffloadKey | None) -> None:
        if key in self._b1:
            self.target_t1 = min(float(self.capacity), self.target_t1 + max(len(self._b2) / len(self._b1), 1.0))
            del self._b1[key]
            self._t2[key] = None
        elif key in self._b2:
            self.target_t1 = max(0.0, self.target_t1 - max(len(self._b1) / len(self._b2), 1.0))
            del self._b2[key]
            self._t2[key] = None
        else:
            self._t1[key] = None
        self._trim_ghosts()

    def on_hit(self, key: OffloadKey) -> None:
        if key in self._t1:
            del self._t1[key]
            self._t2[key] = None
        elif key in self._t2:
            self._t2.move_to_end(key)

    def on_remove(self, key: OffloadKey) -> None:
        # An explicit removal (failed store, reset) is not an eviction: it leaves no ghost.
        self._t1.pop(key, None)
        self._t2.pop(key, None)

    def victims(
        self, count: int, evictable: Evictable, incoming: Collection[OffloadKey]
    ) -> list[OffloadKey] | None:
        prefer_t1 = len(self._t1) > self.target_t1 or (
            len(self._t1) == int(self.target_t1) and any(k in self._b2 for k in incoming)
        )
        first, second = (self._t1, self._t2) if prefer_t1 else (self._t2, self._t1)
        chosen = _oldest_evictable(first, count, evictable)
        if len(chosen) < count:
            chosen += _oldest_evictable(second, count - len(chosen), evictable)
        if len(chosen) < count:
            return None
        for key in chosen:
            if key in self._t1:
                del self._t1[key]
                self._b1[key] = None
            else:
                del self._t2[key]
                self._b2[key] = None
        self._trim_ghosts()
        return chosen

    def _trim_ghosts(self) -> None:
        while self._b1 and len(self._t1) + len(self._b1) > self.capacity:
            self._b1.popitem(last=False)
        while self._b2 and len(self._t1) + len(self._t2) + len(self._b1) + len(self._b2) > 2 * self.capacity:
            self._b2.popitem(last=False)

    def reset(self) -> None:
        self.target_t1 = 0.0
        for part in (self._t1, self._t2, self._b1, self._b2):
            part.clear()

    def fingerprint(self) -> Hashable:
        return (self.target_t1, tuple(self._t1), tuple(self._t2), tuple(self._b1), tuple(self._b2))




class PrefixLRUPolicy(EvictionPolicy):
    """LRU over the leaves of the prefix tree, as SGLang's radix cache: a key is evicted only once
    no resident key extends it, so a chain shrinks from its tail and its head stays servable.
    Orphans (a parent that is not resident) go first: after a CPU miss on the parent they can
    never be hit."""

    name = "prefix_lru"

    def __init__(self) -> None:
        self._clock = 0
        self._stamp: dict[OffloadKey, int] = {}
        self._parent: dict[OffloadKey, OffloadKey | None] = {}
        self._kids: dict[OffloadKey, set[OffloadKey]] = {}
        self._orphans: OrderedDict[OffloadKey, None] = OrderedDict()
        # Leaves by last use; stale entries are skipped when popped (lazy deletion).
        self._heap: list[tuple[int, OffloadKey]] = []

    def _push(self, key: OffloadKey) -> None:
        heapq.heappush(self._heap, (self._stamp[key], key))
        if len(self._heap) > 4 * len(self._stamp) + 64:
            self._heap = [(self._stamp[k], k) for k in self._stamp if not self._kids[k]]
            heapq.heapify(self._heap)

    def on_insert(self, key: OffloadKey, parent: OffloadKey | None) -> None:
        self._clock += 1
        self._stamp[key] = self._clock
        self._parent[key] = parent
        self._kids[key] = set()
        if parent is not None:
            if parent in self._stamp:
                self._kids[parent].add(key)
            else:
                self._orphans[key] = None
        self._push(key)

    def on_hit(self, key: OffloadKey) -> None:
        if key in self._stamp:
            self._clock += 1
            self._stamp[key] = self._clock
            if not self._kids[key]:
                self._push(key)

    def on_remove(self, key: OffloadKey) -> None:
        if key not in self._stamp:
            return
        del self._stamp[key]
        self._orphans.pop(key, None)
        for kid in self._kids.pop(key):
            self._orphans[kid] = None
        parent = self._parent.pop(key)
        if parent is not None and parent in self._stamp:
            siblings = self._kids[parent]
            siblings.discard(key)
            if not siblings:
                self._push(parent)

    def victims(
        self, count: int, evictable: Evictable, incoming: Collection[OffloadKey]
    ) -> list[OffloadKey] | None:
        chosen: dict[OffloadKey, None] = {}
        for key in self._orphans:
            if len(chosen) == count:
                return list(chosen)
            if evictable(key):
                chosen[key] = None
        # Children as if the chosen keys were gone, so one call can empty a chain tail to head.
        gone_kids: dict[OffloadKey, int] = {}
        skipped: list[tuple[int, OffloadKey]] = []
        popped: list[tuple[int, OffloadKey]] = []
        heap = self._heap
        while heap and len(chosen) < count:
            entry = heapq.heappop(heap)
            stamp, key = entry
            if key in chosen or self._stamp.get(key) != stamp:
                continue
            if len(self._kids[key]) > gone_kids.get(key, 0):
                continue  # not a leaf: pushed again when its last child goes
            if not evictable(key):
                skipped.append(entry)
                continue
            chosen[key] = None
            popped.append(entry)
            parent = self._parent[key]
            if parent is not None and parent in self._stamp:
                gone_kids[parent] = gone_kids.get(parent, 0) + 1
                if gone_kids[parent] == len(self._kids[parent]):
                    heapq.heappush(heap, (self._stamp[parent], parent))
        for entry in skipped:
            heapq.heappush(heap, entry)
        if len(chosen) < count:
            # The leaves cannot make room (their tails are in use): any evictable key, LRU first,
            # so None really means "fewer than count evictable keys".
            for key in sorted(self._stamp, key=self._stamp.__getitem__):
                if len(chosen) == count:
                    break
                if key not in chosen and evictable(key):
                    chosen[key] = None
        if len(chosen) < count:
            for entry in popped:
                heapq.heappush(heap, entry)
            return None
        return list(chosen)

    def reset(self) -> None:
        self._clock = 0
        self._stamp.clear()
        self._parent.clear()
        self._kids.clear()
        self._orphans.clear()
        self._heap.clear()

    def fingerprint(self) -> Hashable:
        return (
            self._clock,
            tuple(sorted((k, s, self._parent[k]) for k, s in self._stamp.items())),
            tuple(self._orphans),
        )


class SecondSightingAdmission(EvictionPolicy):
    """Second-sighting admission in front of an eviction order (``inner``): once the tier is full,
    a key is stored only when it is offered again while remembered (a bounded history of
    ``ghost_factor`` x capacity rejected or evicted keys). Three in four prefix blocks of production
    traffic are never reused; this keeps them from flushing the ones that are, and the GPU prefix
    cache in front still serves quick first reuses. While there is free room everything is
    admitted: refusing costs a hit then."""

    def __init__(self, capacity: int, inner: EvictionPolicy, ghost_factor: int = 4) -> None:
        self.capacity = capacity
        self.inner = inner
        self._resident = 0
        self._seen = KeyHistory(ghost_factor * capacity)
        # Keys admitted in this batch on their second sighting: they enter with that use counted.
        self._returning: set[OffloadKey] = set()
        # Free-room admissions granted in the current prepare_store and not inserted yet; every
        # batch ends in on_insert calls or in victims(), so this is 0 when a batch starts.
        self._promised = 0

    @property
    def admits_all(self) -> bool:
        """True while first sightings are admitted too (never, for this class)."""
        return False

    def admit(self, key: OffloadKey) -> bool:
        free_room = self._resident + self._promised < self.capacity
        if free_room:
            self._promised += 1
        if key in self._seen:
            self._seen.discard(key)
            self._returning.add(key)
            return True
        if free_room or self.admits_all:
            return True
        self._seen.add(key)
        return False

    def on_insert(self, key: OffloadKey, parent: OffloadKey | None) -> None:
        if self._promised:
            self._promised -= 1
        self._resident += 1
        self._seen.pop(key, None)
        self.inner.on_insert(key, parent)
        if key in self._returning:
            # Offered before (refused or evicted): for a frequency order, that earlier use counts.
            self._returning.discard(key)
            self.inner.on_hit(key)

    def on_hit(self, key: OffloadKey) -> None:
        self.inner.on_hit(key)

    def on_remove(self, key: OffloadKey) -> None:
        self._resident -= 1
        self.inner.on_remove(key)

    def victims(
        self, count: int, evictable: Evictable, incoming: Collection[OffloadKey]
    ) -> list[OffloadKey] | None:
        self._promised = 0
        chosen = self.inner.victims(count, evictable, incoming)
        if chosen is None:
            self._returning.clear()  # the batch will not be inserted
        for key in chosen or ():
            # An evicted key was worth admitting once: offered again, it comes straight back.
            self._seen.add(key)
        return chosen

    def reset(self) -> None:
        self.inner.reset()
        self._resident = self._promised = 0
        self._seen.clear()
        self._returning.clear()

    def fingerprint(self) -> Hashable:
        return (
            self.inner.fingerprint(),
            self._resident,
            self._promised,
            self._seen.fingerprint(),
            tuple(sorted(self._returning)),
        )


class DoorkeeperLRUPolicy(SecondSightingAdmission):
    """LRU with second-sighting admission (:class:`SecondSightingAdmission`). Best of the LRU
    family when the tier is small next to the traffic, where most blocks are never reused."""

    name = "doorkeeper"

    def __init__(self, capacity: int, ghost_factor: int = 4) -> None:
        super().__init__(capacity, LRUPolicy(), ghost_factor)


class LFUPolicy(EvictionPolicy):
    """LFU with dynamic aging (LFU-DA): a key's priority is its use count plus the tier's age, the
    priority of the last evicted key, so keys that were hot long ago age out instead of staying
    forever. Ties go to the least recently used.

    Keys sit in one bucket per priority, in the order of their stamps (the clock at their last
    use), found through a heap of the priorities; a use moves a key to the back of a higher bucket.
    No call allocates a container per key: the default policy runs three of these (the tier's and
    two shadows') per stored key, and a heap of (priority, stamp, key) tuples made Python's full
    garbage collections twice as frequent at 10^4 live requests (docs/benchmarks.md)."""

    name = "lfu"

    def __init__(self) -> None:
        self._age = 0
        self._clock = 0
        self._uses: dict[OffloadKey, int] = {}
        self._priority: dict[OffloadKey, int] = {}
        # priority -> {key: stamp}, oldest stamp first.
        self._buckets: dict[int, OrderedDict[OffloadKey, int]] = {}
        # A heap of the buckets' priorities. An emptied bucket's priority stays until popped, so a
        # priority whose bucket was emptied and filled again may be in it twice.
        self._priorities: list[int] = []

    def _place(self, key: OffloadKey, priority: int) -> None:
        """Stamp ``key``, which is in no bucket, and put it behind every key of ``priority``."""
        self._clock = clock = self._clock + 1
        self._priority[key] = priority
        # A bucket is dropped when emptied: one that is there is not empty.
        (self._buckets.get(priority) or self._new_bucket(priority))[key] = clock

    def _new_bucket(self, priority: int) -> OrderedDict[OffloadKey, int]:
        bucket = self._buckets[priority] = OrderedDict()
        heapq.heappush(self._priorities, priority)
        if len(self._priorities) > 4 * len(self._buckets) + 64:
            self._priorities = sorted(self._buckets)  # a sorted list is a heap
        return bucket

    def _leave(self, key: OffloadKey, priority: int) -> None:
        bucket = self._buckets[priority]
        del bucket[key]
        if not bucket:
            del self._buckets[priority]

    def on_insert(self, key: OffloadKey, parent: OffloadKey | None) -> None:
        previous = self._priority.get(key)
        if previous is not None:  # inserted again without a removal: starts over
            self._leave(key, previous)
        self._uses[key] = 1
        # _place, inlined: the default policy runs this for its tier and its shadows per key stored.
        priority = self._age + 1
        self._clock = clock = self._clock + 1
        self._priority[key] = priority
        (self._buckets.get(priority) or self._new_bucket(priority))[key] = clock

    def on_hit(self, key: OffloadKey) -> None:
        uses = self._uses.get(key)
        if uses is not None:
            uses += 1
            self._uses[key] = uses
            self._leave(key, self._priority[key])
            self._place(key, self._age + uses)

    def _evict_one(self) -> OffloadKey:
        """``victims(1, every key evictable)`` and ``on_remove`` of the victim, for a non-empty
        order without its generality (the shadows evict this way on every miss once full)."""
        heap, buckets = self._priorities, self._buckets
        while heap[0] not in buckets:
            heapq.heappop(heap)  # an emptied bucket's priority
        priority = heap[0]
        bucket = buckets[priority]
        victim = next(iter(bucket))
        if priority > self._age:
            self._age = priority
        del self._uses[victim], self._priority[victim], bucket[victim]
        if not bucket:
            del buckets[priority]
        return victim

    def on_remove(self, key: OffloadKey) -> None:
        self._uses.pop(key, None)
        priority = self._priority.pop(key, None)
        if priority is not None:
            self._leave(key, priority)

    def victims(
        self, count: int, evictable: Evictable, incoming: Collection[OffloadKey]
    ) -> list[OffloadKey] | None:
        chosen: list[OffloadKey] = []
        visited: list[int] = []
        heap = self._priorities
        while heap and len(chosen) < count:
            priority = heapq.heappop(heap)
            bucket = self._buckets.get(priority)
            if bucket is None or (visited and visited[-1] == priority):
                continue  # emptied, or a second copy of the priority just visited
            visited.append(priority)
            for key in bucket:
                if evictable(key):
                    chosen.append(key)
                    if len(chosen) == count:
                        break
        for priority in visited:
            heapq.heappush(heap, priority)
        if len(chosen) < count:
            return None
        # Chosen in priority order: the last one's is the highest.
        self._age = max(self._age, self._priority[chosen[-1]])
        return chosen

    def reset(self) -> None:
        self._age = self._clock = 0
        self._uses.clear()
        self._priority.clear()
        self._buckets.clear()
        self._priorities.clear()

    def fingerprint(self) -> Hashable:
        # The same summary as when every key's (priority, stamp) was kept in one entry.
        entries = ((k, (priority, self._buckets[priority][k]), self._uses[k]) for k, priority in self._priority.items())
        return (self._age, self._clock, tuple(sorted(entries)))


class _LFUShadow(LFUPolicy):
    """Which keys a tier of ``capacity`` would hold, evicting in LFU-DA order, with or without the
    doorkeeper's second-sighting admission: keys only, no blocks (see :class:`DuelingAdmission`).
    Its own use counts are its key set."""

    def __init__(self, capacity: int, doorkeeper: bool, ghost_factor: int) -> None:
        super().__init__()
        self.capacity = max(1, capacity)
        self.doorkeeper = doorkeeper
        self._seen = KeyHistory(ghost_factor * capacity)

    def access(self, key: OffloadKey) -> bool:
        """A lookup of ``key``: True if this tier holds it; otherwise it is offered for storing."""
        if key in self._uses:
            self.on_hit(key)
            return True
        if len(self._uses) >= self.capacity:
            if self.doorkeeper:
                seen = self._seen
                if key not in seen:
                    seen.add(key)
                    return False
                seen.discard(key)
                seen.add(self._evict_one())
            else:
                self._evict_one()
        self.on_insert(key, None)
        return False

    def clear(self) -> None:
        self.reset()
        self._seen.clear()

    def twin(self, doorkeeper: bool) -> _LFUShadow:
        """A shadow in this one's state, admitting on second sighting if ``doorkeeper``."""
        twin = copy.copy(self)
        twin.doorkeeper = doorkeeper
        twin._seen = copy.copy(self._seen)
        twin._uses, twin._priority = self._uses.copy(), self._priority.copy()
        twin._buckets = {priority: bucket.copy() for priority, bucket in self._buckets.items()}
        twin._priorities = self._priorities.copy()
        return twin

    def fingerprint(self) -> Hashable:
        return (super().fingerprint(), self._seen.fingerprint())


class DuelingAdmission(SecondSightingAdmission):
    """Second-sighting admission, or none, whichever is winning on this traffic at this size, in
    front of an eviction order (``inner``): set dueling, as CPU caches choose an insertion policy.
    Two key-only shadow tiers of the same capacity, each evicting in LFU-DA order, see every access
    the CPU tier sees (an offered store is a miss, a lookup hit a hit), one admitting every key and
    one admitting on second sighting; a saturating counter (``limit``) moves by one towards the
    shadow that alone held an accessed key. While the admit-all shadow leads, every key is
    admitted; otherwise :class:`SecondSightingAdmission`'s rule holds. Costs two more key sets of
    the tier's size, and no bytes."""

    def __init__(self, capacity: int, inner: EvictionPolicy, ghost_factor: int = 4, limit: int = 1024) -> None:
        super().__init__(capacity, inner, ghost_factor)
        self.limit = limit
        self._admit_all = _LFUShadow(capacity, False, ghost_factor)
        # None while the second-sighting shadow is in the admit-all one's state: until they fill,
        # neither evicts nor refuses, so one shadow does the work of both.
        self._second_sight: _LFUShadow | None = None
        self._lead = 0  # > 0: the admit-all shadow leads

    @property
    def admits_all(self) -> bool:
        """True while every offered key is admitted (the admit-all shadow leads)."""
        return self._lead > 0

    def _duel(self, key: OffloadKey) -> None:
        admit_all = self._admit_all
        second_sight = self._second_sight
        if second_sight is None:
            # Both shadows hold key, or both store it without evicting: no lead moves.
            if key in admit_all._uses:
                admit_all.on_hit(key)
                return
            if len(admit_all._uses) < admit_all.capacity:
                admit_all.on_insert(key, None)
                return
            second_sight = self._second_sight = admit_all.twin(doorkeeper=True)
        admit_all_held = admit_all.access(key)
        if admit_all_held != second_sight.access(key):
            step = 1 if admit_all_held else -1
            self._lead = max(-self.limit, min(self.limit, self._lead + step))

    # SecondSightingAdmission's methods named, not super(): no super object per key.
    def admit(self, key: OffloadKey) -> bool:
        self._duel(key)
        return SecondSightingAdmission.admit(self, key)

    def on_hit(self, key: OffloadKey) -> None:
        self._duel(key)
        self.inner.on_hit(key)

    def reset(self) -> None:
        super().reset()
        self._lead = 0
        self._admit_all.clear()
        self._second_sight = None

    def fingerprint(self) -> Hashable:
        admit_all = self._admit_all.fingerprint()
        second_sight = admit_all if self._second_sight is None else self._second_sight.fingerprint()
        return (super().fingerprint(), admit_all, second_sight, self._lead)


class DoorkeeperLFUPolicy(DuelingAdmission):
    """The default: :class:`DuelingAdmission` (second-sighting admission while it wins, admit-all
    otherwise) in front of LFU with dynamic aging. Admission keeps one-off prefixes out of a tier
    that is small next to the traffic; LFU-DA keeps the blocks that were used most while letting
    old fame fade, which beats recency once the tier is large (see docs/policies.md)."""

    name = "doorkeeper_lfu"

    def __init__(self, capacity: int, ghost_factor: int = 4, limit: int = 1024) -> None:
        super().__init__(capacity, LFUPolicy(), ghost_factor, limit)
