"""Manager-side historical bugs, each a subclass of ``CPUOffloadingManager`` overriding the minimum."""

from __future__ import annotations

from collections.abc import Sequence

from kvoffload.offload.manager import CPUOffloadingManager
from kvoffload.offload.types import OffloadKey, RequestId


class EvictWhileLoadingManager(CPUOffloadingManager):
    """LMCache #3381, SGLang #35769: a CPU block that a load is reading is evicted and reused.

    Interleaving: request 1 stored the shared chunk; request 2's lookup hits it and its load pins
    the block; request 1 stores its next chunks into a full pool, and eviction picks the pinned
    block: the load now reads a block that holds another key (``NoEvictWhileInUse``)."""

    def _evictable(self, key: OffloadKey, protected: set[OffloadKey]) -> bool:
        entry = self._entries.get(key)
        # The bug: ref_cnt (loads in flight) is not consulted.
        return entry is not None and not entry.write_pending and key not in protected

    def _remove(self, key: OffloadKey) -> None:
        entry = self._entries.pop(key)
        self._free.append(entry.block_id)
        self.policy.on_remove(key)


class _FailedStoreHook(CPUOffloadingManager):
    """Marks the ``_remove`` calls made for a failed store, the only path these bugs change."""

    _failing_store = False

    def complete_store(self, request_id: RequestId, keys: Sequence[OffloadKey], success: bool) -> None:
        self._failing_store = not success
        try:
            super().complete_store(request_id, keys, success)
        finally:
            del self._failing_store


class FailedStoreLeakManager(_FailedStoreHook):
    """A failed store forgets its keys but never returns their CPU blocks to the free list
    (the leak half of "a failed store leaking or double-freeing its blocks", seen in several
    offloading connectors' error paths).

    Interleaving: a store fails; the key is dropped, the block is lost; at quiescence the pool has
    fewer blocks than it started with (``NoLeak``)."""

    def _remove(self, key: OffloadKey) -> None:
        if not self._failing_store:
            super()._remove(key)
            return
        self._entries.pop(key)  # the bug: the block id goes nowhere
        self.policy.on_remove(key)


class FailedStoreDoubleFreeManager(_FailedStoreHook):
    """A failed store returns its CPU block to the free list twice (the double-free half of "a
    failed store leaking or double-freeing its blocks").

    Interleaving: a store fails (its block is freed twice); at quiescence the pool holds more
    entries than blocks (``NoLeak``'s accounting check); with more traffic two keys get the same
    CPU block, or a resident key's block is also listed free (``NoEvictWhileInUse``)."""

    def _remove(self, key: OffloadKey) -> None:
        entry = self._entries.get(key)
        super()._remove(key)
        if self._failing_store and entry is not None:
            self._free.append(entry.block_id)  # the bug: freed again
