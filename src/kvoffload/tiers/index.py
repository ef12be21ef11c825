"""What the sans-IO core knows about each secondary tier.

- :class:`LocalTierIndex`: a tier this process owns alone (the file tier). The index places chunks
  in fixed slots and runs the tier's own eviction policy; every chunk's residency is an instance
  of the declared ``tier_chunk`` lifecycle, so a chunk being written is never read and a chunk
  being read is never evicted.
- :class:`SharedTierIndex`: a tier other engine instances write too (Redis). Nothing local says
  what it holds, so the manager probes it before promoting; eviction is the server's
  (``maxmemory-policy``).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from kvoffload.lifecycles.tier import CHUNK_RESIDENCY, READING, RESIDENT, WRITING
from kvoffload.offload.policies import EvictionPolicy, make_policy
from kvoffload.offload.types import OffloadKey
from kvoffload.statemachine.runtime import DeclaredMachine

CHUNK_MACHINE = DeclaredMachine(CHUNK_RESIDENCY, guards={}, id_attribute="key")


@dataclass(slots=True, eq=False)
class SlotEntry:
    """One chunk in a local tier: its slot and its residency state (changed only by CHUNK_MACHINE)."""

    key: OffloadKey
    slot: int
    state: str = WRITING


class LocalTierIndex:
    """Slots of a tier owned by this process, with the tier's own eviction policy (default LRU)."""

    shared = False

    def __init__(self, name: str, num_slots: int, policy: str | EvictionPolicy = "lru") -> None:
        if not isinstance(num_slots, int) or num_slots < 1:
            raise ValueError(f"tier {name!r}: num_slots must be a positive integer, got {num_slots!r}")
        self.name = name
        self.num_slots = num_slots
        self.policy = make_policy(policy, num_slots) if isinstance(policy, str) else policy
        self._free: list[int] = list(range(num_slots - 1, -1, -1))
        self._entries: dict[OffloadKey, SlotEntry] = {}
        self.evictions = 0

    def candidates(self, keys: Sequence[OffloadKey]) -> int:
        """How many leading ``keys`` are resident (readable) here."""
        count = 0
        for key in keys:
            entry = self._entries.get(key)
            if entry is None or entry.state != RESIDENT:
                break
            count += 1
        return count

    def wants(self, key: OffloadKey) -> bool:
        """True when a cascade should write ``key`` here (not resident, not being written)."""
        return key not in self._entries

    def allocate(self, keys: Sequence[OffloadKey]) -> tuple[int, ...] | None:
        """Slots for ``keys`` (all new here), evicting idle resident chunks; None if they do not fit."""
        shortfall = len(keys) - len(self._free)
        if shortfall > 0:
            victims = self.policy.victims(shortfall, self._evictable, keys)
            if victims is None:
                return None
            for key in victims:
                self._drop(key, "evict")
            self.evictions += len(victims)
        slots = []
        for key in keys:
            slot = self._free.pop()
            self._entries[key] = SlotEntry(key, slot)
            self.policy.on_insert(key, None)
            slots.append(slot)
        return tuple(slots)

    def start_read(self, keys: Sequence[OffloadKey]) -> tuple[int, ...]:
        """Mark resident ``keys`` as being read (not evictable); returns their slots."""
        slots = []
        for key in keys:
            entry = self._entries[key]
            CHUNK_MACHINE.fire(entry, "read")
            self.policy.on_hit(key)
            slots.append(entry.slot)
        return tuple(slots)

    def write_done(self, key: OffloadKey, ok: bool) -> None:
        if ok:
            CHUNK_MACHINE.fire(self._entries[key], "written")
        else:
            self._drop(key, "write_failed")

    def read_done(self, key: OffloadKey, ok: bool) -> None:
        if ok:
            CHUNK_MACHINE.fire(self._entries[key], "read_done")
        else:
            self._drop(key, "corrupt")

    def reset(self) -> None:
        """Forget every resident chunk; only legal with nothing being written or read."""
        busy = [key for key, entry in self._entries.items() if entry.state != RESIDENT]
        if busy:
            raise ValueError(f"tier {self.name!r}: reset with {len(busy)} chunk(s) being written or read")
        for key in list(self._entries):
            self._drop(key, "reset")
        self.policy.reset()

    def busy_keys(self) -> list[OffloadKey]:
        return [key for key, entry in self._entries.items() if entry.state in (WRITING, READING)]

    def state_of(self, key: OffloadKey) -> str | None:
        entry = self._entries.get(key)
        return entry.state if entry else None

    def leaks(self) -> list[str]:
        found = [f"tier {self.name!r}: key {key:#x} still {self._entries[key].state}" for key in self.busy_keys()]
        used = {entry.slot for entry in self._entries.values()}
        if len(used) + len(self._free) != self.num_slots or used & set(self._free):
            found.append(f"tier {self.name!r}: slot accounting broken: resident + free != slots")
        return found

    def fingerprint(self) -> Hashable:
        return tuple(sorted((k, e.slot, e.state) for k, e in self._entries.items()))

    def _evictable(self, key: OffloadKey) -> bool:
        entry = self._entries.get(key)
        return entry is not None and entry.state == RESIDENT

    def _drop(self, key: OffloadKey, trigger: str) -> None:
        entry = self._entries[key]
        CHUNK_MACHINE.fire(entry, trigger)
        del self._entries[key]
        self._free.append(entry.slot)
        self.policy.on_remove(key)


class SharedTierIndex:
    """A tier shared with other engines: every key may be there; a probe finds out."""

    shared = True

    def __init__(self, name: str) -> None:
        self.name = name

    def candidates(self, keys: Sequence[OffloadKey]) -> int:
        return len(keys)

    def wants(self, key: OffloadKey) -> bool:
        return True

    def reset(self) -> None:
        """Nothing local to forget; the shared store is not flushed (other engines use it)."""

    def leaks(self) -> list[str]:
        return []

    def fingerprint(self) -> Hashable:
        return ()


TierIndex = LocalTierIndex | SharedTierIndex
