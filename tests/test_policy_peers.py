"""The peers' policies (LFU with aging, W-TinyLFU, SIEVE, LMCache's admission over LRU): each
against a reference model written the plain way, in a cache driven as the manager drives it."""

from __future__ import annotations

from collections import OrderedDict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvoffload.offload.policies import EvictionPolicy, LFUPolicy, make_policy
from kvoffload.offload.policies.peers import (
    FrequencySketch,
    LMCacheAdmissionPolicy,
    SievePolicy,
    WTinyLFUPolicy,
)

PEERS = ("lfu", "wtinylfu", "sieve", "lmcache_admission")
CAPACITY = 5

# Accesses of keys 0-11; a key in ``pinned`` cannot be evicted at that access (a load or store).
accesses = st.lists(st.tuples(st.integers(0, 11), st.frozensets(st.integers(0, 11), max_size=3)), max_size=80)


class LFUModel:
    """LFU-DA by brute force: priority = age + uses, ties to the least recently stamped."""

    def __init__(self) -> None:
        self.age = self.clock = 0
        self.uses: dict[int, int] = {}
        self.entry: dict[int, tuple[int, int]] = {}

    def _stamp(self, key: int) -> None:
        self.clock += 1
        self.entry[key] = (self.age + self.uses[key], self.clock)

    def insert(self, key: int) -> None:
        self.uses[key] = 1
        self._stamp(key)

    def hit(self, key: int) -> None:
        self.uses[key] += 1
        self._stamp(key)

    def victim(self, evictable: set[int]) -> int | None:
        if not evictable:
            return None
        key = min(evictable, key=self.entry.__getitem__)
        self.age = max(self.age, self.entry[key][0])
        return key

    def remove(self, key: int) -> None:
        del self.uses[key], self.entry[key]


class SieveModel:
    """SIEVE on a list, oldest first, and the hand as an index."""

    def __init__(self) -> None:
        self.order: list[int] = []
        self.visited: dict[int, bool] = {}
        self.hand: int | None = None  # the key the hand is on

    def insert(self, key: int) -> None:
        self.order.append(key)
        self.visited[key] = False

    def hit(self, key: int) -> None:
        self.visited[key] = True

    def victim(self, evictable: set[int]) -> int | None:
        index = self.order.index(self.hand) if self.hand in self.visited else 0
        for _ in range(2 * len(self.order) + 1):
            key = self.order[index]
            index = (index + 1) % len(self.order)
            if self.visited[key]:
                self.visited[key] = False
            elif key in evictable:
                self.hand = self.order[index]
                return key
        self.hand = self.order[index] if self.order else None
        return None

    def remove(self, key: int) -> None:
        index = self.order.index(key)
        if self.hand == key:
            self.hand = self.order[index + 1] if index + 1 < len(self.order) else None
        self.order.pop(index)
        del self.visited[key]


class LMCacheModel:
    """LRU, and admission once full only for a key counted more often than the LRU end."""

    def __init__(self, capacity: int, sample_size: int) -> None:
        self.capacity, self.sample_size = capacity, sample_size
        self.order: OrderedDict[int, None] = OrderedDict()
        self.counts: dict[int, int] = {}
        self.occurrences = 0

    def count(self, key: int) -> None:
        self.counts[key] = self.counts.get(key, 0) + 1
        self.occurrences += 1
        if self.occurrences == self.sample_size:
            self.occurrences = 0
            self.counts = {k: c // 2 for k, c in self.counts.items() if c // 2}

    def admit(self, key: int) -> bool:
        self.count(key)
        if len(self.order) < self.capacity:
            return True
        coldest = next(iter(self.order))
        return self.counts.get(key, 0) > self.counts.get(coldest, 0)

    def insert(self, key: int) -> None:
        self.order[key] = None

    def hit(self, key: int) -> None:
        self.count(key)
        self.order.move_to_end(key)

    def victim(self, evictable: set[int]) -> int | None:
        return next((key for key in self.order if key in evictable), None)

    def remove(self, key: int) -> None:
        del self.order[key]


def _resident_by_policy(policy: EvictionPolicy, resident: set[int]) -> set[int] | None:
    """The keys the policy would evict if asked for all of them (on a copy): exactly what it tracks."""
    chosen = policy.clone().victims(len(resident), lambda key: True, ())
    return set(chosen) if chosen is not None else None


def _run(policy: EvictionPolicy, model: object | None, script: list[tuple[int, frozenset[int]]]) -> None:
    """Drive ``policy`` (and ``model``, if any, step for step) as the manager does, one key per
    store, and check after every access: at most CAPACITY resident keys, the policy tracks exactly
    the resident set, and no pinned key is evicted."""
    resident: set[int] = set()
    for key, pinned in script:
        if key in resident:
            policy.on_hit(key)
            if model is not None:
                model.hit(key)  # type: ignore[attr-defined]
            continue
        admitted = policy.admit(key)
        if isinstance(model, LMCacheModel):
            assert admitted == model.admit(key)
        if not admitted:
            continue
        if len(resident) == CAPACITY:
            evictable = resident - pinned
            victims = policy.victims(1, lambda k, evictable=evictable: k in evictable, (key,))
            if model is not None:
                expected = model.victim(evictable)  # type: ignore[attr-defined]
                assert victims == (None if expected is None else [expected])
            if victims is None:
                assert not evictable
                continue
            (victim,) = victims
            assert victim in evictable
            resident.discard(victim)
            policy.on_remove(victim)
            if model is not None:
                model.remove(victim)  # type: ignore[attr-defined]
        resident.add(key)
        policy.on_insert(key, None)
        if model is not None:
            model.insert(key)  # type: ignore[attr-defined]
        assert len(resident) <= CAPACITY
        assert _resident_by_policy(policy, resident) == resident


@settings(max_examples=150, deadline=None)
@given(script=accesses)
def test_lfu_matches_its_reference_model(script: list[tuple[int, frozenset[int]]]) -> None:
    _run(LFUPolicy(), LFUModel(), script)


@settings(max_examples=150, deadline=None)
@given(script=accesses)
def test_sieve_matches_its_reference_model(script: list[tuple[int, frozenset[int]]]) -> None:
    _run(SievePolicy(), SieveModel(), script)


@settings(max_examples=150, deadline=None)
@given(script=accesses)
def test_lmcache_admission_matches_its_reference_model(script: list[tuple[int, frozenset[int]]]) -> None:
    _run(LMCacheAdmissionPolicy(CAPACITY, sample_factor=2), LMCacheModel(CAPACITY, 2 * CAPACITY), script)


@settings(max_examples=150, deadline=None)
@given(script=accesses)
def test_wtinylfu_segments_partition_the_resident_set(script: list[tuple[int, frozenset[int]]]) -> None:
    policy = WTinyLFUPolicy(CAPACITY, window_fraction=0.2)
    _run(policy, None, script)
    window, probation, protected = policy.segments()
    assert not (set(window) & set(probation)) and not (set(protected) & (set(window) | set(probation)))
    assert len(protected) <= policy.protected_capacity


def test_wtinylfu_window_key_stays_only_if_more_frequent_than_the_main_victim() -> None:
    policy = WTinyLFUPolicy(100)  # a window of 1 key, 99 in the main space
    resident = set(range(100))
    for _ in range(3):
        policy.admit(98)  # offered 3 times before (stores that found no room, say)
    for key in range(100):
        policy.admit(key)
        policy.on_insert(key, None)
    # The tier filled at 99: 98 and 99 stay in the window, to contest the next evictions.
    assert policy.segments()[0] == (98, 99)
    policy.on_hit(0)  # promoted to protected: probation's least recent is now 1
    policy.admit(500)
    assert policy.victims(1, resident.__contains__, (500,)) == [1]
    resident.discard(1)
    policy.on_remove(1)
    assert 98 in policy.segments()[1]  # won the contest: now in probation
    resident.add(500)
    policy.on_insert(500, None)
    policy.admit(501)
    # 99 was offered once, as often as probation's least recent key (2): the window's key goes.
    assert policy.victims(1, resident.__contains__, (501,)) == [99]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 30), max_size=40))
def test_sketch_never_undercounts_before_a_reset(keys: list[int]) -> None:
    sketch = FrequencySketch(16, sample_size=1000)
    for key in keys:
        sketch.record(key)
    for key in set(keys):
        assert sketch.estimate(key) >= min(keys.count(key), FrequencySketch.MAX_COUNT)


def test_sketch_halves_after_its_sample() -> None:
    sketch = FrequencySketch(16, sample_size=10)
    for _ in range(9):
        sketch.record(7)
    assert sketch.estimate(7) == 9  # 1 in the doorkeeper, 8 in the counters
    sketch.record(7)  # the 10th occurrence resets: counters halved, doorkeeper cleared
    assert sketch.estimate(7) == 4


@pytest.mark.parametrize("name", PEERS)
def test_peer_is_registered_and_runs_in_the_replay(name: str) -> None:
    from kvoffload.tracestudy.replay import TraceReplay

    chains = [[1, 2, 3], [1, 2, 4], [5, 6], [1, 2, 3, 7], [5, 6, 8], [9, 10], [1, 2, 3]] * 3
    result = TraceReplay(5, 3, make_policy(name, 3)).run(chains)
    assert result.violations == 0 and result.leaks == 0
    assert result.cpu_hits > 0


@settings(max_examples=150, deadline=None)
@given(script=accesses)
def test_default_tracks_exactly_the_resident_set(script: list[tuple[int, frozenset[int]]]) -> None:
    _run(make_policy("doorkeeper_lfu", CAPACITY), None, script)
