"""The strict CPU manager: lifecycle contract, pins, eviction, failures, reset, policies."""

from __future__ import annotations

import pytest

from kvoffload.offload import CPUOffloadingManager, LifecycleViolation, OffloadEvent, StorePlan
from kvoffload.offload.policies import ARCPolicy, LRUPolicy, make_policy


def entries(manager: CPUOffloadingManager) -> dict[int, tuple[int, int, bool]]:
    """key -> (block, ref_cnt, write_pending): the whole block table."""
    result = {}
    for key in manager.resident_keys:
        entry = manager.entry(key)
        assert entry is not None
        result[key] = (entry.block_id, entry.ref_cnt, entry.write_pending)
    return result


def stored(manager: CPUOffloadingManager, request_id: str, keys: list[int]) -> StorePlan:
    plan = manager.prepare_store(request_id, keys)
    assert plan is not None
    manager.complete_store(request_id, plan.keys_to_store, success=True)
    return plan


def test_store_then_lookup_then_load_whole_state_each_step() -> None:
    manager = CPUOffloadingManager(4, "lru")
    manager.on_new_request("a")
    plan = manager.prepare_store("a", [10, 11])
    assert plan == StorePlan((10, 11), (0, 1), ())
    assert entries(manager) == {10: (0, 0, True), 11: (1, 0, True)}
    assert manager.lookup("a", [10, 11]) == 0, "a key being written is not a hit"
    manager.complete_store("a", [10, 11], success=True)
    assert entries(manager) == {10: (0, 0, False), 11: (1, 0, False)}
    assert manager.take_events() == [OffloadEvent((10, 11), removed=False)]
    manager.on_new_request("b")
    assert manager.lookup("b", [10, 11, 12]) == 2
    assert manager.prepare_load("b", [10, 11]) == (0, 1)
    assert entries(manager) == {10: (0, 1, False), 11: (1, 1, False)}
    manager.complete_load("b", [10, 11])
    assert entries(manager) == {10: (0, 0, False), 11: (1, 0, False)}
    manager.on_request_finished("a")
    manager.on_request_finished("b")
    assert manager.leaks() == []


def test_calls_after_on_request_finished_are_violations_that_change_nothing() -> None:
    manager = CPUOffloadingManager(4, "lru")
    manager.on_new_request("a")
    stored(manager, "a", [1])
    manager.on_request_finished("a")
    before = entries(manager)
    for call, args in [
        ("lookup", ([1],)),
        ("touch", ([1],)),
        ("prepare_load", ([1],)),
        ("prepare_store", ([2],)),
    ]:
        with pytest.raises(LifecycleViolation, match=f"NoManagerCallAfterSignal: {call}\\(\\) for request 'a'"):
            getattr(manager, call)("a", *args)
    with pytest.raises(LifecycleViolation, match="SignalExactlyOnce"):
        manager.on_request_finished("a")
    assert entries(manager) == before
    assert manager.num_free_blocks == 3


def test_unknown_request_and_unknown_completions_are_violations() -> None:
    manager = CPUOffloadingManager(4, "lru")
    with pytest.raises(LifecycleViolation, match="KnownRequest: lookup\\(\\) for request 'x' in state 'unknown'"):
        manager.lookup("x", [1])
    manager.on_new_request("a")
    with pytest.raises(LifecycleViolation, match="SignalExactlyOnce"):
        manager.on_new_request("a")
    with pytest.raises(LifecycleViolation, match="KnownJob: complete_store"):
        manager.complete_store("a", [5], success=True)
    with pytest.raises(LifecycleViolation, match="KnownJob: complete_load"):
        manager.complete_load("a", [5])
    assert entries(manager) == {}


def test_completions_after_the_finish_signal_drain_then_the_record_goes() -> None:
    manager = CPUOffloadingManager(4, "lru")
    manager.on_new_request("a")
    plan = manager.prepare_store("a", [1, 2])
    assert plan is not None
    manager.on_request_finished("a")
    assert manager.requests_in_flight() != {}
    manager.complete_store("a", [1, 2], success=True)
    assert manager.requests_in_flight() == {}
    assert manager.leaks() == []


def test_failed_store_frees_its_blocks_exactly_once() -> None:
    manager = CPUOffloadingManager(2, "lru")
    manager.on_new_request("a")
    manager.prepare_store("a", [1, 2])
    manager.complete_store("a", [1, 2], success=False)
    assert entries(manager) == {}
    assert manager.num_free_blocks == 2
    with pytest.raises(LifecycleViolation, match="KnownJob"):
        manager.complete_store("a", [1, 2], success=False)
    assert manager.num_free_blocks == 2
    assert manager.stats.failed_store_keys == 2


def test_prepare_store_never_evicts_blocks_in_use_or_its_own_keys_and_returns_none() -> None:
    manager = CPUOffloadingManager(3, "lru")
    manager.on_new_request("a")
    stored(manager, "a", [1, 2])
    manager.prepare_load("a", [1])  # 1 is being loaded from
    manager.prepare_store("a", [3])  # 3 is being written
    before = entries(manager)
    assert manager.prepare_store("a", [4, 5]) is None, "only key 2 is evictable; two are needed"
    assert entries(manager) == before
    assert manager.stats.allocation_failures == 1
    # Key 2 is evictable unless it is one of the keys being stored.
    assert manager.prepare_store("a", [2, 6]) is None
    plan = manager.prepare_store("a", [6])
    assert plan == StorePlan((6,), (1,), (2,))
    assert entries(manager) == {1: (0, 1, False), 3: (2, 0, True), 6: (1, 0, True)}


def test_prepare_store_skips_resident_keys_and_rejects_duplicates() -> None:
    manager = CPUOffloadingManager(4, "lru")
    manager.on_new_request("a")
    stored(manager, "a", [1])
    plan = manager.prepare_store("a", [1, 2])
    assert plan == StorePlan((2,), (1,), ())
    with pytest.raises(ValueError, match="duplicate keys"):
        manager.prepare_store("a", [3, 3])


def test_prepare_load_of_a_key_not_ready_is_an_error_that_changes_nothing() -> None:
    manager = CPUOffloadingManager(4, "lru")
    manager.on_new_request("a")
    stored(manager, "a", [1])
    manager.prepare_store("a", [2])
    with pytest.raises(ValueError, match="being written"):
        manager.prepare_load("a", [1, 2])
    with pytest.raises(ValueError, match="not stored"):
        manager.prepare_load("a", [1, 9])
    assert entries(manager)[1] == (0, 0, False)


def test_reset_cache_refuses_while_transfers_are_in_flight_and_drops_everything_after() -> None:
    manager = CPUOffloadingManager(4, "lru")
    manager.on_new_request("a")
    stored(manager, "a", [1, 2])
    manager.prepare_load("a", [1])
    with pytest.raises(LifecycleViolation, match="NoEvictWhileInUse: reset_cache"):
        manager.reset_cache()
    assert len(entries(manager)) == 2
    manager.complete_load("a", [1])
    manager.take_events()
    manager.reset_cache()
    assert entries(manager) == {}
    assert manager.num_free_blocks == 4
    assert manager.take_events() == [OffloadEvent((1, 2), removed=True)]


def test_bad_pool_size_is_rejected() -> None:
    with pytest.raises(ValueError, match="num_blocks must be a positive integer"):
        CPUOffloadingManager(0, "lru")
    with pytest.raises(ValueError, match="unknown eviction policy 'mru'"):
        CPUOffloadingManager(4, "mru")


def test_lru_evicts_least_recently_used_and_touch_refreshes() -> None:
    manager = CPUOffloadingManager(3, "lru")
    manager.on_new_request("a")
    stored(manager, "a", [1, 2, 3])
    manager.touch("a", [1])
    plan = manager.prepare_store("a", [4])
    assert plan is not None and plan.evicted_keys == (2,)
    assert manager.resident_keys == {1, 3, 4}


def test_lru_policy_victims_skip_unevictable_and_report_shortage() -> None:
    policy = LRUPolicy()
    for key in (1, 2, 3):
        policy.on_insert(key, None)
    assert policy.victims(2, lambda k: k != 1, ()) == [2, 3]
    assert policy.victims(3, lambda k: k != 1, ()) is None


def test_arc_keeps_a_reused_key_over_a_scan_of_one_off_keys() -> None:
    lru = CPUOffloadingManager(4, "lru")
    arc = CPUOffloadingManager(4, "arc")
    for manager in (lru, arc):
        manager.on_new_request("a")
        stored(manager, "a", [100])
        manager.touch("a", [100])  # used twice: frequent
        for key in range(1, 8):  # a scan of one-off prefixes
            stored(manager, "a", [key])
    assert 100 not in lru.resident_keys
    assert 100 in arc.resident_keys


def test_arc_ghost_hit_grows_the_recency_target() -> None:
    policy = ARCPolicy(2)
    policy.on_insert(1, None)
    policy.on_insert(2, None)
    policy.on_hit(2)  # 2 moves to the frequency list T2
    assert policy.victims(1, lambda k: True, (3,)) == [1]  # T1 is over its target (0): evict from T1
    policy.on_remove(1)
    policy.on_insert(3, None)
    assert policy.target_t1 == 0.0
    assert policy.victims(1, lambda k: True, (1,)) == [3]
    policy.on_remove(3)
    policy.on_insert(1, None)  # 1 is in the B1 ghost list: recency was undervalued
    assert policy.target_t1 == 1.0
    assert policy.fingerprint() == (1.0, (), (2, 1), (3,), ())


@pytest.mark.parametrize("name", ["lru", "arc"])
def test_policies_are_deterministic(name: str) -> None:
    fingerprints = []
    for _ in range(2):
        manager = CPUOffloadingManager(3, make_policy(name, 3))
        manager.on_new_request("a")
        for key in (1, 2, 3, 1, 4, 5, 2, 6):
            if key in manager.resident_keys:
                manager.touch("a", [key])
            else:
                stored(manager, "a", [key])
        fingerprints.append(manager.fingerprint())
    assert fingerprints[0] == fingerprints[1]
