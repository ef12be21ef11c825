"""Eviction policies: the EvictionPolicy contract for every registered policy, and one behaviour
test per policy."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvoffload.offload.manager import CPUOffloadingManager
from kvoffload.offload.policies import (
    POLICIES,
    ARCPolicy,
    DoorkeeperLFUPolicy,
    DoorkeeperLRUPolicy,
    EvictionPolicy,
    LFUPolicy,
    LRUPolicy,
    PrefixLRUPolicy,
    SecondSightingAdmission,
    make_policy,
)
from kvoffload.offload.policies.peers import S3FIFOPolicy

ALL = sorted(POLICIES)
EXPECTED = {
    "lru", "arc", "prefix_lru", "doorkeeper", "doorkeeper_lfu", "s3fifo", "lfu", "wtinylfu", "sieve",
    "lmcache_admission",
}

# An op: ("insert", key, parent) | ("hit", key) | ("evict", count, blocked-mask) | ("remove", key)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), st.integers(0, 15), st.one_of(st.none(), st.integers(0, 15))),
        st.tuples(st.just("hit"), st.integers(0, 15)),
        st.tuples(st.just("evict"), st.integers(1, 4), st.integers(0, 0xFFFF)),
        st.tuples(st.just("remove"), st.integers(0, 15)),
    ),
    max_size=60,
)


def _drive(policy: EvictionPolicy, script: list[tuple]) -> list[object]:
    """Run ``script`` as a manager would (a resident set, admission, victims then removals) and
    check the contract on every victims() answer. Returns the observable outcomes."""
    resident: set[int] = set()
    seen: list[object] = []
    for op in script:
        if op[0] == "insert":
            _, key, parent = op
            if key in resident:
                continue
            admitted = policy.admit(key)
            seen.append(("admit", key, admitted))
            if admitted:
                resident.add(key)
                policy.on_insert(key, parent)
        elif op[0] == "hit":
            if op[1] in resident:
                policy.on_hit(op[1])
        elif op[0] == "remove":
            if op[1] in resident:
                resident.discard(op[1])
                policy.on_remove(op[1])
        else:
            _, count, mask = op

            def evictable(key: int, mask: int = mask) -> bool:
                return key in resident and not (mask >> key) & 1

            incoming = (16, 17)
            victims = policy.victims(count, evictable, incoming)
            possible = sum(1 for key in resident if evictable(key))
            if victims is None:
                assert possible < count, f"None although {possible} keys were evictable for {count}"
            else:
                assert len(victims) == count and len(set(victims)) == count
                assert all(evictable(key) for key in victims), "victims returned a non-evictable key"
                for key in victims:
                    resident.discard(key)
                    policy.on_remove(key)
            seen.append(("victims", victims))
    return seen


@pytest.mark.parametrize("name", ALL)
@settings(max_examples=60, deadline=None)
@given(script=ops)
def test_contract(name: str, script: list[tuple]) -> None:
    first, second = make_policy(name, 6), make_policy(name, 6)
    outcome = _drive(first, script)
    # Deterministic: the same calls give the same answers and the same state.
    assert _drive(second, script) == outcome
    assert first.fingerprint() == second.fingerprint()
    hash(first.fingerprint())
    first.reset()
    assert first.fingerprint() == make_policy(name, 6).fingerprint()


def test_registry() -> None:
    assert set(POLICIES) >= EXPECTED
    with pytest.raises(ValueError, match="unknown eviction policy"):
        make_policy("nope", 4)
    for name in ALL:
        assert make_policy(name, 4).name == name


@pytest.mark.parametrize("name", ALL)
def test_none_when_nothing_evictable(name: str) -> None:
    policy = make_policy(name, 4)
    for key in range(4):
        if policy.admit(key):
            policy.on_insert(key, key - 1 if key else None)
    assert policy.victims(1, lambda key: False, ()) is None
    assert policy.victims(5, lambda key: True, ()) is None


@pytest.mark.parametrize("name", ALL)
@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(st.integers(0, 40), min_size=1, max_size=6), max_size=30))
def test_inside_the_real_manager(name: str, requests: list[list[int]]) -> None:
    manager = CPUOffloadingManager(8, name)
    for index, keys in enumerate(requests):
        keys = list(dict.fromkeys(keys))
        rid = f"r{index}"
        manager.on_new_request(rid)
        hits = manager.lookup(rid, keys)
        if hits:
            manager.touch(rid, keys[:hits])
            manager.prepare_load(rid, keys[:hits])
        plan = manager.prepare_store(rid, keys[hits:], keys[hits - 1] if hits else None)
        manager.on_request_finished(rid)
        if hits:
            manager.complete_load(rid, keys[:hits])
        if plan is not None and plan.keys_to_store:
            manager.complete_store(rid, plan.keys_to_store, success=True)
        assert len(manager.resident_keys) <= 8
    assert manager.leaks() == []


def _fill(policy: EvictionPolicy, keys: list[int], parent: Callable[[int], int | None] = lambda k: None) -> None:
    for key in keys:
        assert policy.admit(key)
        policy.on_insert(key, parent(key))


def ANY(key: int) -> bool:
    return True


def test_lru_evicts_least_recently_used() -> None:
    policy = LRUPolicy()
    _fill(policy, [1, 2, 3])
    policy.on_hit(1)
    assert policy.victims(2, ANY, ()) == [2, 3]


def test_arc_keeps_a_frequent_key_over_a_scan() -> None:
    arc, lru = ARCPolicy(4), LRUPolicy()
    for policy in (arc, lru):
        resident: set[int] = set()

        def use(key: int, policy: EvictionPolicy = policy, resident: set[int] = resident) -> None:
            if key in resident:
                policy.on_hit(key)
                return
            if len(resident) == 4:
                (victim,) = policy.victims(1, lambda k: k in resident, (key,)) or [None]
                resident.discard(victim)
                policy.on_remove(victim)
            resident.add(key)
            policy.on_insert(key, None)

        for _ in range(3):
            use(0)
        for key in range(100, 110):  # a scan of one-off prefixes
            use(key)
            use(0) if key % 3 == 0 else None
        for key in range(200, 205):
            use(key)
        assert (0 in resident) == (policy is arc)


def test_prefix_lru_evicts_chains_from_the_tail_and_orphans_first() -> None:
    policy = PrefixLRUPolicy()
    _fill(policy, [1, 2, 3], lambda k: k - 1 if k > 1 else None)  # chain 1 <- 2 <- 3
    _fill(policy, [10])
    for key in (1, 2, 3):  # a request reads the chain in order: the head is the oldest of the three
        policy.on_hit(key)
    assert policy.victims(1, ANY, ()) == [10]
    policy.on_remove(10)
    assert policy.victims(2, ANY, ()) == [3, 2]  # plain LRU would take 1 and 2, killing the chain
    policy.on_remove(3)
    policy.on_remove(2)
    _fill(policy, [21], lambda k: 20)  # parent 20 is not resident: an orphan, never servable
    assert policy.victims(1, ANY, ()) == [21]
    policy.on_remove(21)
    _fill(policy, [2], lambda k: 1)  # chain 1 <- 2 again
    # A leaf that cannot go (a store is writing it) does not block: any evictable key will do.
    assert policy.victims(1, lambda k: k != 2, ()) == [1]


def test_doorkeeper_admits_on_second_sighting_once_full() -> None:
    policy = DoorkeeperLRUPolicy(capacity=2)
    _fill(policy, [1, 2])  # free room: admitted at first sight
    assert policy.admit(3) is False  # full: first sighting remembered, not stored
    assert policy.admit(3) is True  # offered again while remembered
    policy.on_insert(3, None)
    victims = policy.victims(1, ANY, (3,))
    assert victims == [1]
    policy.on_remove(1)
    assert policy.admit(1) is True  # an evicted key comes straight back


def test_s3fifo_demotes_one_hit_keys_and_promotes_used_ones() -> None:
    policy = S3FIFOPolicy(capacity=10, small_fraction=0.2)
    _fill(policy, list(range(10)))
    policy.on_hit(0)  # used while in the small FIFO: moves to main instead of leaving
    victims = policy.victims(3, ANY, ())
    assert victims is not None and 0 not in victims
    for key in victims:
        policy.on_remove(key)
    # An evicted one-hit key that comes back is a ghost hit: it goes straight to main.
    policy.on_insert(victims[0], None)
    assert victims[0] in policy._main


def test_lfu_evicts_the_least_used_and_ages_old_fame() -> None:
    policy = LFUPolicy()
    _fill(policy, [1, 2, 3])
    for _ in range(3):
        policy.on_hit(1)  # priority 4
    policy.on_hit(2)  # priority 2
    assert policy.victims(1, ANY, ()) == [3]  # priority 1
    policy.on_remove(3)  # the tier's age is now 1
    # New keys start at age + 1: each eviction raises the age, until 1's old uses no longer save it.
    for key in range(10, 14):
        _fill(policy, [key])
        (victim,) = policy.victims(1, lambda k, new=key: k != new, ()) or [None]
        policy.on_remove(victim)
    assert policy.victims(3, ANY, ()) is None  # only 2 keys are left: 1 and 13
    assert policy.victims(1, ANY, ()) == [1]


class _ReferenceLFU:
    """LFU-DA by definition: every key's (priority, stamp) and uses, victims by sorting them."""

    def __init__(self) -> None:
        self.age = self.clock = 0
        self.keys: dict[int, tuple[int, int, int]] = {}  # key -> (priority, stamp, uses)

    def stamp(self, key: int, uses: int) -> None:
        self.clock += 1
        self.keys[key] = (self.age + uses, self.clock, uses)

    def victims(self, count: int, evictable: Callable[[int], bool]) -> list[int] | None:
        chosen = [key for key in sorted(self.keys, key=lambda k: self.keys[k][:2]) if evictable(key)][:count]
        if len(chosen) < count:
            return None
        self.age = max(self.age, max(self.keys[key][0] for key in chosen))
        return chosen

    def fingerprint(self) -> object:
        return (self.age, self.clock, tuple(sorted((k, (p, s), u) for k, (p, s, u) in self.keys.items())))


@settings(max_examples=200, deadline=None)
@given(script=st.lists(st.tuples(st.sampled_from(["insert", "hit", "evict", "remove", "reset"]), st.integers(0, 7),
                                 st.integers(0, 0xFF)), max_size=120))
def test_lfu_matches_its_definition(script: list[tuple[str, int, int]]) -> None:
    """Every victims() answer and every fingerprint equal the definition's, under any call order
    (a key inserted again without a removal, hits and removals of keys not resident included)."""
    policy, reference = LFUPolicy(), _ReferenceLFU()
    for op, key, mask in script:
        if op == "insert":
            policy.on_insert(key, None)
            reference.stamp(key, 1)
        elif op == "hit":
            policy.on_hit(key)
            if key in reference.keys:
                reference.stamp(key, reference.keys[key][2] + 1)
        elif op == "remove":
            policy.on_remove(key)
            reference.keys.pop(key, None)
        elif op == "evict":
            count = key % 3 + 1

            def evictable(k: int, mask: int = mask) -> bool:
                return not (mask >> k) & 1

            assert policy.victims(count, evictable, ()) == reference.victims(count, evictable)
        else:
            policy.reset()
            reference = _ReferenceLFU()
        assert policy.fingerprint() == reference.fingerprint()


def _offer(policy: DoorkeeperLFUPolicy, key: int, resident: list[int]) -> bool:
    """Offer ``key`` as the manager would: admit, then evict the LRU key when the tier is full."""
    if not policy.admit(key):
        return False
    if len(resident) == policy.capacity:
        (victim,) = policy.victims(1, lambda k: True, [key]) or [None]
        resident.remove(victim)
        policy.on_remove(victim)
    resident.append(key)
    policy.on_insert(key, None)
    return True


def test_dueling_admits_first_sightings_once_admitting_all_would_have_hit_more() -> None:
    policy, resident = DoorkeeperLFUPolicy(capacity=2, limit=2), []
    assert _offer(policy, 1, resident) and _offer(policy, 2, resident)  # free room
    assert not _offer(policy, 3, resident)  # full: the doorkeeper refuses a first sighting
    assert not policy.admits_all
    # 3 comes back: only the admit-all shadow holds it (the other one has just seen it once), so
    # it leads by one; the doorkeeper would admit 3 now anyway (second sighting).
    assert _offer(policy, 3, resident)
    assert policy.admits_all
    assert _offer(policy, 4, resident)  # a first sighting, admitted now
    assert resident == [3, 4]
    # 2 comes back: only the second-sighting shadow still holds it, so the lead is gone; 2 itself
    # is admitted (the tier evicted it, so the doorkeeper remembers it), a new key is not.
    assert _offer(policy, 2, resident)
    assert not policy.admits_all
    assert not _offer(policy, 6, resident)
    # LFU eviction: 3 entered on its second sighting with that use counted; 4 was used once.
    assert resident == [3, 2]


def test_dueling_stays_a_doorkeeper_when_second_sighting_would_have_hit_more() -> None:
    policy, resident = DoorkeeperLFUPolicy(capacity=2, limit=4), []
    assert _offer(policy, 1, resident) and _offer(policy, 2, resident)
    for key in range(10, 20):  # a scan of one-off keys: it flushes only the admit-all shadow
        policy.admit(key)
    policy.on_hit(1)  # only the second-sighting shadow still holds 1
    policy.on_hit(2)
    assert not policy.admits_all
    assert not _offer(policy, 30, resident)
    assert resident == [1, 2]
    policy.reset()
    assert not policy.admits_all and policy.fingerprint() == DoorkeeperLFUPolicy(2, limit=4).fingerprint()


class _ReferenceShadow:
    """A shadow tier of DoorkeeperLFUPolicy by definition: LFU-DA by _ReferenceLFU, a FIFO list
    of refused and evicted keys (with ``doorkeeper``), nothing shared with the other shadow."""

    def __init__(self, capacity: int, doorkeeper: bool) -> None:
        self.capacity, self.doorkeeper = capacity, doorkeeper
        self.lfu = _ReferenceLFU()
        self.seen: list[int] = []

    def access(self, key: int) -> bool:
        keys = self.lfu.keys
        if key in keys:
            self.lfu.stamp(key, keys[key][2] + 1)
            return True
        full = len(keys) >= self.capacity
        if self.doorkeeper and full:
            if key not in self.seen:
                self._remember(key)
                return False
            self.seen.remove(key)
        if full:
            (victim,) = self.lfu.victims(1, ANY) or [-1]
            del keys[victim]
            if self.doorkeeper:
                self._remember(victim)
        self.lfu.stamp(key, 1)
        return False

    def _remember(self, key: int) -> None:
        if key in self.seen:
            self.seen.remove(key)
        self.seen.append(key)
        del self.seen[: -4 * self.capacity]

    def fingerprint(self) -> object:
        return (self.lfu.fingerprint(), tuple(self.seen))


class _ReferenceDueling(SecondSightingAdmission):
    """DoorkeeperLFUPolicy by definition: two independent shadows, every access through both."""

    def __init__(self, capacity: int, limit: int) -> None:
        super().__init__(capacity, LFUPolicy())
        self.limit = limit
        self.reset()

    @property
    def admits_all(self) -> bool:
        return self.lead > 0

    def _duel(self, key: int) -> None:
        admit_all_held, second_sight_held = (shadow.access(key) for shadow in self.shadows)
        if admit_all_held != second_sight_held:
            self.lead = max(-self.limit, min(self.limit, self.lead + (1 if admit_all_held else -1)))

    def admit(self, key: int) -> bool:
        self._duel(key)
        return super().admit(key)

    def on_hit(self, key: int) -> None:
        self._duel(key)
        super().on_hit(key)

    def reset(self) -> None:
        super().reset()
        self.lead = 0
        self.shadows = (_ReferenceShadow(self.capacity, False), _ReferenceShadow(self.capacity, True))

    def fingerprint(self) -> object:
        return (super().fingerprint(), *(shadow.fingerprint() for shadow in self.shadows), self.lead)


@settings(max_examples=150, deadline=None)
@given(capacity=st.integers(1, 4), limit=st.integers(1, 3), script=st.lists(
    st.tuples(st.sampled_from(["offer", "offer", "hit", "reset"]), st.integers(0, 11), st.integers(0, 0xFFF)),
    max_size=80))
def test_doorkeeper_lfu_matches_its_definition(capacity: int, limit: int, script: list[tuple[str, int, int]]) -> None:
    """Every admission, eviction and fingerprint equal those of two independent shadows fed every
    access (the policy keeps one shadow until they fill, and evicts in them without victims())."""
    policy, reference = DoorkeeperLFUPolicy(capacity, limit=limit), _ReferenceDueling(capacity, limit)
    resident: list[int] = []
    for op, key, mask in script:
        if op == "offer" and key not in resident:
            admitted = policy.admit(key)
            assert admitted == reference.admit(key)
            if admitted and len(resident) == capacity:

                def evictable(k: int, mask: int = mask) -> bool:
                    return not (mask >> k) & 1

                chosen = policy.victims(1, evictable, [key])
                assert chosen == reference.victims(1, evictable, [key])
                for victim in chosen or ():
                    resident.remove(victim)
                    policy.on_remove(victim)
                    reference.on_remove(victim)
            if admitted and len(resident) < capacity:
                resident.append(key)
                policy.on_insert(key, None)
                reference.on_insert(key, None)
        elif op == "hit":
            policy.on_hit(key)
            reference.on_hit(key)
        elif op == "reset":
            resident.clear()
            policy.reset()
            reference.reset()
        assert policy.admits_all == reference.admits_all
        assert policy.fingerprint() == reference.fingerprint()
