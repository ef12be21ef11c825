"""Eviction (and admission) policies of the CPU tier.

The manager owns the blocks and decides what may be evicted (nothing being loaded from or written);
a policy only orders candidates. Contract, in the order the manager calls it:

- ``admit(key)``: a store was offered for a key that is not resident; False skips storing it;
- ``on_insert(key, parent)``: the key became resident (write pending); ``parent`` is the key of the
  previous chunk of the same prefix, or None for a first chunk;
- ``on_hit(key)``: a lookup/touch used the key;
- ``victims(count, evictable, incoming)``: up to ``count`` resident keys to evict, best first,
  each passing ``evictable``; None when fewer than ``count`` can be found (the manager then changes
  nothing and reports the allocation failure);
- ``on_remove(key)``: the key left the tier (evicted, failed store, reset);
- ``reset()``: forget everything.

Policies are deterministic and copyable: the explorer copies and compares them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Collection, Hashable

from kvoffload.offload.types import OffloadKey

Evictable = Callable[[OffloadKey], bool]


class EvictionPolicy(ABC):
    """Orders resident keys for eviction; see the module docstring for the call contract."""

    name: str = ""

    def admit(self, key: OffloadKey) -> bool:
        return True

    @abstractmethod
    def on_insert(self, key: OffloadKey, parent: OffloadKey | None) -> None: ...

    @abstractmethod
    def on_hit(self, key: OffloadKey) -> None: ...

    @abstractmethod
    def on_remove(self, key: OffloadKey) -> None: ...

    @abstractmethod
    def victims(
        self, count: int, evictable: Evictable, incoming: Collection[OffloadKey]
    ) -> list[OffloadKey] | None: ...

    @abstractmethod
    def reset(self) -> None: ...

    @abstractmethod
    def fingerprint(self) -> Hashable:
        """A hashable summary of the whole policy state (for the explorer)."""


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


PolicyFactory = Callable[[int], EvictionPolicy]

POLICIES: dict[str, PolicyFactory] = {
    "lru": lambda capacity: LRUPolicy(),
    "arc": ARCPolicy,
}


def make_policy(name: str, capacity: int) -> EvictionPolicy:
    """The policy registered as ``name``, sized for ``capacity`` CPU blocks."""
    try:
        factory = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown eviction policy {name!r}; known: {', '.join(sorted(POLICIES))}") from None
    return factory(capacity)
