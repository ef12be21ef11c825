"""The CPU offloading manager: which chunk keys live in which CPU block, and who is using them.

Rules (the manager is STRICT: a call that breaks one raises LifecycleViolation and changes nothing):

- A request is announced by ``on_new_request`` and retired by ``on_request_finished``, exactly once.
  After that only completions of its jobs already in flight may arrive (``complete_load``,
  ``complete_store``): any lookup, prepare or touch is a ``NoManagerCallAfterSignal`` violation.
- A block being loaded from (``ref_cnt > 0``) or being written (``write_pending``) is never
  evicted, reused or handed out twice (``NoEvictWhileInUse``). ``prepare_store`` evicts only idle
  blocks that are not among its own input keys, and returns None when it cannot place them.
- A key being written is not a hit: ``lookup`` counts only ready keys, so no load reads a block
  before its store completed.
- A failed store frees its blocks and forgets the keys; a completion the manager did not hand out
  is an error.
- ``reset_cache`` drops every key; it is only legal when nothing is in flight (the scheduler flushes
  first), so no in-flight copy can touch a block that was handed to someone else.

Sans-IO and deterministic: no clock, no randomness, no threads; ``fingerprint()`` summarises the
whole state for the explorer.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Self

from kvoffload.offload.errors import LifecycleViolation
from kvoffload.offload.policies import EvictionPolicy, make_policy
from kvoffload.offload.types import (
    DEFAULT_POLICY,
    NO_CONTEXT,
    OffloadEvent,
    OffloadKey,
    RequestContext,
    RequestId,
    StorePlan,
)


def _key_text(key: object) -> str:
    """A key for an error message: hex for the int keys the manager stores, repr for anything else."""
    return f"{key:#x}" if isinstance(key, int) and not isinstance(key, bool) else repr(key)


# How many retired request ids to remember, so a late call names "after on_request_finished"
# rather than "unknown request"; bounded so a long-running server does not grow without limit.
RETIRED_MEMORY = 4096


@dataclass(slots=True)
class BlockEntry:
    """A resident key: its CPU block, how many loads read it, whether a store is writing it."""

    block_id: int
    ref_cnt: int = 0
    write_pending: bool = False

    def copy(self) -> BlockEntry:
        return BlockEntry(self.block_id, self.ref_cnt, self.write_pending)


@dataclass(slots=True)
class RequestRecord:
    """The manager's view of one request: its in-flight loads and stores, by key."""

    finished: bool = False
    # key -> number of in-flight loads / stores of this request on that key (never zero).
    loading: dict[OffloadKey, int] = field(default_factory=dict)
    storing: dict[OffloadKey, int] = field(default_factory=dict)

    @property
    def drained(self) -> bool:
        return not self.loading and not self.storing

    def copy(self) -> RequestRecord:
        return RequestRecord(self.finished, self.loading.copy(), self.storing.copy())


class ManagerState(NamedTuple):
    """A read-only view of the manager's tables (live references: read them, never change them).

    ``free``: free CPU blocks, the next one handed out last; ``entries``: resident keys;
    ``requests``: announced requests not yet drained after ``on_request_finished``.
    """

    free: Sequence[int]
    entries: Mapping[OffloadKey, BlockEntry]
    requests: Mapping[RequestId, RequestRecord]


@dataclass
class ManagerStats:
    """Counters since construction (reset_cache does not clear them)."""

    lookups: int = 0
    lookup_keys: int = 0
    hit_keys: int = 0
    loaded_keys: int = 0
    store_offered_keys: int = 0
    stored_keys: int = 0
    failed_store_keys: int = 0
    rejected_by_admission: int = 0
    # Keys the policy admitted and the manager gave a block (a store then writes them).
    admitted_keys: int = 0
    evictions: int = 0
    allocation_failures: int = 0
    resets: int = 0


class CPUOffloadingManager:
    """A fixed pool of ``num_blocks`` CPU blocks, each holding one chunk."""

    def __init__(
        self, num_blocks: int, policy: str | EvictionPolicy = DEFAULT_POLICY, enable_events: bool = True
    ) -> None:
        if not isinstance(num_blocks, int) or num_blocks < 1:
            raise ValueError(f"num_blocks must be a positive integer, got {num_blocks!r}")
        self.num_blocks = num_blocks
        self.policy = make_policy(policy, num_blocks) if isinstance(policy, str) else policy
        # Popped from the end, so block 0 is handed out first: deterministic layouts.
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))
        self._entries: dict[OffloadKey, BlockEntry] = {}
        self._requests: dict[RequestId, RequestRecord] = {}
        self._retired: OrderedDict[RequestId, None] = OrderedDict()
        # Off for engines that publish no KV events: otherwise they pile up until take_events().
        self.enable_events = enable_events
        self._events: list[OffloadEvent] = []
        self.stats = ManagerStats()

    # ----------------------------------------------------------------- request lifecycle
    def on_new_request(self, request_id: RequestId, context: RequestContext = NO_CONTEXT) -> None:
        """Announce a request. The CPU tier keys chunks by their key alone, so ``context`` (the
        salt) is not kept: the engine mixes the salt into the block hashes."""
        if request_id in self._requests or request_id in self._retired:
            state = "retired" if request_id in self._retired else "active"
            raise LifecycleViolation(
                "SignalExactlyOnce", request_id, "on_new_request", state, "request id already used"
            )
        self._requests[request_id] = RequestRecord()

    def on_request_finished(self, request_id: RequestId) -> None:
        record = self._active(request_id, "on_request_finished", invariant="SignalExactlyOnce")
        record.finished = True
        self._retired[request_id] = None
        if len(self._retired) > RETIRED_MEMORY:
            self._retired.popitem(last=False)
        if record.drained:
            del self._requests[request_id]

    def _active(self, request_id: RequestId, call: str, invariant: str = "NoManagerCallAfterSignal") -> RequestRecord:
        record = self._requests.get(request_id)
        if record is None or record.finished:
            if record is not None or request_id in self._retired:
                state = "finished (draining)" if record is not None else "retired"
                raise LifecycleViolation(invariant, request_id, call, state, "after on_request_finished")
            raise LifecycleViolation(
                "KnownRequest", request_id, call, "unknown", "request was never announced by on_new_request"
            )
        return record

    def _record(self, request_id: RequestId, call: str) -> RequestRecord:
        record = self._requests.get(request_id)
        if record is None:
            state = "retired" if request_id in self._retired else "unknown"
            raise LifecycleViolation("KnownJob", request_id, call, state, "no job of this request is in flight")
        return record

    # ----------------------------------------------------------------- lookups and loads
    def lookup(self, request_id: RequestId, keys: Sequence[OffloadKey]) -> int:
        """How many leading ``keys`` are stored and ready to load."""
        self._active(request_id, "lookup")
        hits = 0
        for key in keys:
            entry = self._entries.get(key)
            if entry is None or entry.write_pending:
                break
            hits += 1
        self.stats.lookups += 1
        self.stats.lookup_keys += len(keys)
        self.stats.hit_keys += hits
        return hits

    def touch(self, request_id: RequestId, keys: Sequence[OffloadKey]) -> None:
        """Mark resident ``keys`` as used now (recency for the policy)."""
        self._active(request_id, "touch")
        for key in keys:
            if key in self._entries:
                self.policy.on_hit(key)

    def prepare_load(self, request_id: RequestId, keys: Sequence[OffloadKey]) -> tuple[int, ...]:
        """Pin ``keys`` for reading and return their CPU blocks (in order)."""
        record = self._active(request_id, "prepare_load")
        for key in keys:
            entry = self._entries.get(key)
            if entry is None or entry.write_pending:
                raise ValueError(
                    f"prepare_load for request {request_id!r}: key {_key_text(key)} is "
                    f"{'being written' if entry else 'not stored'}; load only keys that lookup() counted"
                )
        block_ids = []
        for key in keys:
            entry = self._entries[key]
            entry.ref_cnt += 1
            record.loading[key] = record.loading.get(key, 0) + 1
            block_ids.append(entry.block_id)
        self.stats.loaded_keys += len(keys)
        return tuple(block_ids)

    def complete_load(self, request_id: RequestId, keys: Sequence[OffloadKey]) -> None:
        """A load of ``keys`` for the request finished (successfully or not): unpin them."""
        record = self._record(request_id, "complete_load")
        needed = Counter(keys)
        for key, count in needed.items():
            if record.loading.get(key, 0) < count:
                raise LifecycleViolation(
                    "KnownJob", request_id, "complete_load", "loading" if record.loading else "no loads",
                    f"key {_key_text(key)} has no such load in flight",
                )
        for key, count in needed.items():
            left = record.loading[key] - count
            if left:
                record.loading[key] = left
            else:
                del record.loading[key]
            self._entries[key].ref_cnt -= count
        self._drop_if_drained(request_id, record)

    # ----------------------------------------------------------------- stores
    def prepare_store(
        self, request_id: RequestId, keys: Sequence[OffloadKey], parent: OffloadKey | None = None
    ) -> StorePlan | None:
        """Place the keys not yet resident; evict idle blocks if needed. None if they do not fit.

        ``keys`` are consecutive chunks of one prefix; ``parent`` is the key before ``keys[0]``.
        """
        record = self._active(request_id, "prepare_store")
        if len(keys) > 1 and len(set(keys)) != len(keys):
            raise ValueError(f"prepare_store for request {request_id!r}: duplicate keys in {list(keys)}")
        for key in keys:
            if type(key) is not int:
                raise TypeError(f"prepare_store for request {request_id!r}: key {key!r} is not an int")
        stats = self.stats
        stats.store_offered_keys += len(keys)
        entries = self._entries
        admit = self.policy.admit
        wanted: list[tuple[OffloadKey, OffloadKey | None]] = []
        previous = parent
        for key in keys:
            if key not in entries:
                if admit(key):
                    wanted.append((key, previous))
                else:
                    stats.rejected_by_admission += 1
            previous = key
        free = self._free
        shortfall = len(wanted) - len(free)
        evicted: list[OffloadKey] = []
        if shortfall > 0:
            protected = set(keys)
            victims = self.policy.victims(shortfall, lambda k: self._evictable(k, protected), keys)
            if victims is None:
                stats.allocation_failures += 1
                return None
            for key in victims:
                self._remove(key)
            evicted = victims
            stats.evictions += len(victims)
            self._emit(tuple(victims), removed=True)
        stats.admitted_keys += len(wanted)
        on_insert = self.policy.on_insert
        storing = record.storing
        keys_to_store = []
        block_ids = []
        for key, key_parent in wanted:
            block_id = free.pop()
            entries[key] = BlockEntry(block_id, 0, True)
            on_insert(key, key_parent)
            storing[key] = storing.get(key, 0) + 1
            keys_to_store.append(key)
            block_ids.append(block_id)
        return StorePlan(tuple(keys_to_store), tuple(block_ids), tuple(evicted))

    def complete_store(self, request_id: RequestId, keys: Sequence[OffloadKey], success: bool) -> None:
        """A store of ``keys`` finished: mark them ready, or on failure free their blocks."""
        record = self._record(request_id, "complete_store")
        entries = self._entries
        storing = record.storing
        if len(keys) > 1 and len(set(keys)) != len(keys):
            raise ValueError(f"complete_store for request {request_id!r}: duplicate keys in {list(keys)}")
        for key in keys:
            entry = entries.get(key)
            if storing.get(key, 0) < 1 or entry is None or not entry.write_pending:
                raise LifecycleViolation(
                    "KnownJob", request_id, "complete_store", "storing" if storing else "no stores",
                    f"key {_key_text(key)} has no store in flight",
                )
        for key in keys:
            left = storing[key] - 1
            if left:
                storing[key] = left
            else:
                del storing[key]
            entries[key].write_pending = False
            if not success:
                self._remove(key)
        if success:
            self.stats.stored_keys += len(keys)
            if keys:
                self._emit(tuple(keys), removed=False)
        else:
            self.stats.failed_store_keys += len(keys)
        if record.finished and not storing and not record.loading:
            del self._requests[request_id]

    # ----------------------------------------------------------------- housekeeping
    def reset_cache(self) -> None:
        """Drop every key. Only legal when no load or store is in flight."""
        busy = [rid for rid, record in self._requests.items() if not record.drained]
        if busy:
            raise LifecycleViolation(
                "NoEvictWhileInUse", busy[0], "reset_cache", "transfers in flight",
                f"{len(busy)} request(s) still have loads or stores in flight; flush them first",
            )
        if self._entries:
            self._emit(tuple(self._entries), removed=True)
        self._entries.clear()
        self._free = list(range(self.num_blocks - 1, -1, -1))
        self.policy.reset()
        self.stats.resets += 1

    def _emit(self, keys: tuple[OffloadKey, ...], removed: bool) -> None:
        if self.enable_events:
            self._events.append(OffloadEvent(keys, removed))

    def take_events(self) -> list[OffloadEvent]:
        events, self._events = self._events, []
        return events

    def _evictable(self, key: OffloadKey, protected: set[OffloadKey]) -> bool:
        entry = self._entries.get(key)
        return entry is not None and entry.ref_cnt == 0 and not entry.write_pending and key not in protected

    def _remove(self, key: OffloadKey) -> None:
        entry = self._entries.pop(key)
        if entry.ref_cnt or entry.write_pending:
            raise AssertionError(f"NoEvictWhileInUse: removing key {key:#x} while in use: {entry}")
        self._free.append(entry.block_id)
        self.policy.on_remove(key)

    def _drop_if_drained(self, request_id: RequestId, record: RequestRecord) -> None:
        if record.finished and record.drained:
            del self._requests[request_id]

    # ----------------------------------------------------------------- introspection
    def clone(self) -> Self:
        """An independent copy (policy included); later calls on either never affect the other.

        A subclass with state of its own extends this method.
        """
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        clone.policy = self.policy.clone()
        clone._free = self._free.copy()
        clone._entries = {key: entry.copy() for key, entry in self._entries.items()}
        clone._requests = {request_id: record.copy() for request_id, record in self._requests.items()}
        clone._retired = self._retired.copy()
        clone._events = self._events.copy()
        stats = object.__new__(ManagerStats)
        stats.__dict__.update(self.stats.__dict__)
        clone.stats = stats
        return clone

    def view(self) -> ManagerState:
        """The manager's tables, read-only (see :class:`ManagerState`)."""
        return ManagerState(self._free, self._entries, self._requests)

    def is_known(self, request_id: RequestId) -> bool:
        """True while the request is announced and not yet retired."""
        record = self._requests.get(request_id)
        return record is not None and not record.finished

    def entry(self, key: OffloadKey) -> BlockEntry | None:
        return self._entries.get(key)

    def holds(self, key: OffloadKey) -> bool:
        """Whether a lookup of ``key`` may find it here (its chunk is in CPU memory)."""
        return key in self._entries

    @property
    def resident_keys(self) -> frozenset[OffloadKey]:
        return frozenset(self._entries)

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    def requests_in_flight(self) -> dict[RequestId, RequestRecord]:
        """Per request: the loads and stores the manager handed out and not yet saw completed."""
        return {rid: record for rid, record in self._requests.items() if not record.drained}

    def leaks(self) -> list[str]:
        """What would be left over at quiescence: request records, pins, pending writes."""
        found = [f"manager request record {rid!r}" for rid in self._requests]
        for key, entry in self._entries.items():
            if entry.ref_cnt:
                found.append(f"key {key:#x} still pinned by {entry.ref_cnt} load(s)")
            if entry.write_pending:
                found.append(f"key {key:#x} still write-pending")
        used = {entry.block_id for entry in self._entries.values()}
        if len(used) + len(self._free) != self.num_blocks or used & set(self._free):
            found.append("CPU block accounting broken: resident + free != pool")
        return found

    def fingerprint(self) -> Hashable:
        return (
            tuple(sorted(self._free)),
            tuple(sorted((k, e.block_id, e.ref_cnt, e.write_pending) for k, e in self._entries.items())),
            tuple(
                sorted(
                    (rid, r.finished, tuple(sorted(r.loading.items())), tuple(sorted(r.storing.items())))
                    for rid, r in self._requests.items()
                )
            ),
            self.policy.fingerprint(),
        )
