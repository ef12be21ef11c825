"""The CPU tier's eviction policy, except that chunks being promoted are always admitted.

An admission policy (doorkeeper: store a key the second time it is offered) filters chunks the
engine computed. A chunk promoted from a secondary tier was admitted once already and is being
asked for again; filtering it would make the promotion fail and the request recompute.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterator
from contextlib import contextmanager

from kvoffload.offload.policies import Evictable, EvictionPolicy
from kvoffload.offload.types import OffloadKey


class PromotionAdmission(EvictionPolicy):
    """Wraps ``inner``; inside ``promoting(keys)`` those keys pass admission unconditionally."""

    def __init__(self, inner: EvictionPolicy) -> None:
        self.inner = inner
        self.name = inner.name
        self._promoting: frozenset[OffloadKey] = frozenset()

    @contextmanager
    def promoting(self, keys: Collection[OffloadKey]) -> Iterator[None]:
        self._promoting = frozenset(keys)
        try:
            yield
        finally:
            self._promoting = frozenset()

    def admit(self, key: OffloadKey) -> bool:
        return key in self._promoting or self.inner.admit(key)

    def on_insert(self, key: OffloadKey, parent: OffloadKey | None) -> None:
        self.inner.on_insert(key, parent)

    def on_hit(self, key: OffloadKey) -> None:
        self.inner.on_hit(key)

    def on_remove(self, key: OffloadKey) -> None:
        self.inner.on_remove(key)

    def victims(self, count: int, evictable: Evictable, incoming: Collection[OffloadKey]) -> list[OffloadKey] | None:
        return self.inner.victims(count, evictable, incoming)

    def reset(self) -> None:
        self.inner.reset()

    def fingerprint(self) -> Hashable:
        return self.inner.fingerprint()
