"""What every policy of the CPU tier shares: the call contract (:class:`EvictionPolicy`, described in
:mod:`kvoffload.offload.policies`) and the bounded key history admission reads (:class:`KeyHistory`).
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Collection, Hashable
from typing import Any, Self

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

    def clone(self) -> Self:
        """An independent copy (the manager's ``clone`` uses it)."""
        return copy.deepcopy(self)


class KeyHistory(OrderedDict[OffloadKey, None]):
    """A bounded FIFO set of keys no longer (or not yet) resident: the history admission reads
    (and S3-FIFO's ghost queue). An ordered dict, so ``key in history`` is no Python call."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = max(1, capacity)

    def add(self, key: OffloadKey) -> None:
        self[key] = None
        self.move_to_end(key)
        while len(self) > self.capacity:
            self.popitem(last=False)

    def discard(self, key: OffloadKey) -> None:
        self.pop(key, None)

    def fingerprint(self) -> Hashable:
        return tuple(self)

    def __reduce__(self) -> tuple[Any, ...]:
        # For copy and deepcopy: OrderedDict's would call KeyHistory() without the capacity.
        return (KeyHistory, (self.capacity,), None, None, iter(self.items()))
