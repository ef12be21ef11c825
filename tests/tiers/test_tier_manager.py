"""The sans-IO tiering manager: cascade, promotion, pins, deferred finalisation, strictness."""

from __future__ import annotations

import pytest
from tiers_support import all_ok, store, tiering

from kvoffload.lifecycles.tier import PROMOTION, TIER_FINALISED, TIER_SIGNALED
from kvoffload.offload import OffloadConfig, OffloadingScheduler
from kvoffload.offload.errors import LifecycleViolation
from kvoffload.offload.types import NO_CONTEXT, RequestContext
from kvoffload.offload.windows import windowless_key
from kvoffload.statemachine.runtime import IllegalTransition
from kvoffload.tiers.manager import TieringManager
from kvoffload.tiers.protocol import CORRUPT, MISS, OK, TierOutcome
from support import FakeRequest, request


def cascade_everything(manager: TieringManager) -> None:
    for job in manager.take_tier_jobs():
        assert job.kind == "cascade"
        manager.complete_tier_job(all_ok(job))


def evicted_to_file(keys: list[int]) -> TieringManager:
    """A manager of as many CPU blocks as ``keys`` whose file tier holds ``keys``, which the CPU tier
    evicted."""
    manager = tiering(cpu_blocks=len(keys))
    manager.on_new_request("writer")
    store(manager, "writer", keys)
    cascade_everything(manager)
    manager.on_new_request("evictor")
    store(manager, "evictor", [1000 + index for index in range(len(keys))])
    cascade_everything(manager)
    assert not set(keys) & manager.resident_keys
    return manager


def test_a_completed_store_cascades_with_its_cpu_blocks_pinned() -> None:
    manager = tiering()
    manager.on_new_request("r1")
    store(manager, "r1", [1, 2])
    (job,) = manager.take_tier_jobs()
    assert (job.kind, job.tier, job.keys, job.request_id) == ("cascade", "file", (1, 2), "r1")
    assert all(manager.entry(key).ref_cnt == 1 for key in (1, 2))
    # The pool is full of pinned or new keys: the pinned ones are not evicted for a new store.
    manager.on_new_request("r2")
    store(manager, "r2", [3, 4])
    assert manager.prepare_store("r2", [5]) is None
    assert {1, 2} <= manager.resident_keys
    manager.complete_tier_job(all_ok(job))
    assert all(manager.entry(key).ref_cnt == 0 for key in (1, 2))
    assert manager.tiers["file"].state_of(1) == "resident"


def test_a_lookup_promotes_and_answers_not_yet_until_the_chunks_are_ready() -> None:
    manager = evicted_to_file([1, 2])
    manager.on_new_request("reader")
    assert manager.lookup("reader", [1, 2]) is None
    (job,) = manager.take_tier_jobs()
    assert (job.kind, job.tier, job.keys) == ("promote", "file", (1, 2))
    assert manager.is_promoting(1) and manager.entry(1).write_pending
    manager.on_new_request("other")
    assert manager.lookup("other", [1]) is None  # not yet: no load from a chunk being promoted
    with pytest.raises(ValueError, match="being written"):
        manager.prepare_load("other", [1])
    manager.complete_tier_job(all_ok(job))
    assert manager.lookup("reader", [1, 2]) == 2
    assert manager.tier_stats["file"].promoted_keys == 2


def test_a_corrupt_chunk_is_a_failed_promotion_never_served_and_not_retried() -> None:
    manager = evicted_to_file([1, 2])
    manager.on_new_request("reader")
    assert manager.lookup("reader", [1, 2]) is None
    (job,) = manager.take_tier_jobs()
    manager.complete_tier_job(TierOutcome(job.job_id, (CORRUPT, OK)))
    assert not {1, 2} & manager.resident_keys  # the chunk after a corrupt one is not served either
    assert manager.tiers["file"].state_of(1) is None  # dropped from the tier
    assert manager.lookup("reader", [1, 2]) == 0
    assert manager.take_tier_jobs() == []
    assert manager.tier_stats["file"].checksum_failures == 1
    assert manager.tier_stats["file"].failed_promotions == 1


def test_tier_state_is_finalised_only_after_the_signal_and_the_last_cascade() -> None:
    manager = tiering()
    manager.on_new_request("r1")
    plan = manager.prepare_store("r1", [1])
    manager.on_request_finished("r1")  # the deferred signal; the store is still in flight
    assert manager.tier_state("r1") == TIER_SIGNALED
    manager.complete_store("r1", plan.keys_to_store, True)  # cascades for a signaled request
    (job,) = manager.take_tier_jobs()
    assert job.request_id == "r1" and manager.tier_state("r1") == TIER_SIGNALED
    manager.complete_tier_job(all_ok(job))
    assert manager.tier_state("r1") == TIER_FINALISED
    assert manager.leaks() == []


def test_contract_breaks_raise_and_change_nothing() -> None:
    manager = tiering()
    manager.on_new_request("r1")
    store(manager, "r1", [1])
    (job,) = manager.take_tier_jobs()
    before = manager.fingerprint()
    with pytest.raises(ValueError, match="1 key"):
        manager.complete_tier_job(TierOutcome(job.job_id, (OK, OK)))
    with pytest.raises(LifecycleViolation, match=r"KnownJob.*never issued"):
        manager.complete_tier_job(TierOutcome(99, (OK,)))
    assert manager.fingerprint() == before
    manager.complete_tier_job(all_ok(job))
    with pytest.raises(LifecycleViolation, match="already completed"):
        manager.complete_tier_job(all_ok(job))
    manager.on_request_finished("r1")
    with pytest.raises(LifecycleViolation, match="NoManagerCallAfterSignal"):
        manager.lookup("r1", [1])
    with pytest.raises(LifecycleViolation, match="SignalExactlyOnce"):
        manager.on_request_finished("r1")


def test_reset_waits_for_tier_jobs_and_misses_meanwhile() -> None:
    manager = tiering()
    manager.on_new_request("r1")
    store(manager, "r1", [1])
    (job,) = manager.take_tier_jobs()
    manager.reset_cache()
    assert 1 in manager.resident_keys  # still pinned by the cascade: not dropped under it
    assert manager.lookup("r1", [1]) == 0
    assert manager.prepare_store("r1", [2]) is None
    manager.complete_tier_job(all_ok(job))
    assert manager.resident_keys == frozenset()
    assert manager.tiers["file"].state_of(1) is None


def test_a_shared_tier_is_probed_before_any_cpu_block_is_allocated() -> None:
    manager = tiering(cpu_blocks=2, shared=True)
    manager.on_new_request("r1")
    store(manager, "r1", [1, 2])  # a full CPU tier: a promotion would have to evict
    cascade_everything(manager)
    manager.on_new_request("r2")
    assert manager.lookup("r2", [5, 6, 7]) is None  # the file tier has nothing; redis may
    (probe,) = manager.take_tier_jobs()
    assert (probe.kind, probe.tier, probe.keys, probe.cpu_block_ids) == ("probe", "redis", (5, 6, 7), ())
    assert manager.resident_keys == {1, 2}  # nothing allocated, nothing evicted for a probe
    assert manager.lookup("r2", [5, 6, 7]) is None  # still probing
    assert manager.take_tier_jobs() == []
    manager.complete_tier_job(TierOutcome(probe.job_id, (OK, OK, MISS)))
    assert manager.lookup("r2", [5, 6, 7]) is None  # now promoting what redis holds
    (promote,) = manager.take_tier_jobs()
    assert (promote.kind, promote.keys) == ("promote", (5, 6))
    # The key vanished between probe and read (maxmemory eviction): a failed promotion, not an error.
    manager.complete_tier_job(TierOutcome(promote.job_id, (MISS, MISS)))
    assert manager.lookup("r2", [5, 6, 7]) == 0
    stats = manager.tier_stats["redis"]
    assert (stats.probes, stats.probe_hits, stats.failed_promotions, stats.misses) == (1, 2, 1, 2)


def test_a_shared_tier_that_holds_nothing_costs_no_promotion() -> None:
    manager = tiering(shared=True)
    manager.on_new_request("r1")
    assert manager.lookup("r1", [5, 6]) is None
    (probe,) = manager.take_tier_jobs()
    manager.complete_tier_job(TierOutcome(probe.job_id, (MISS, MISS)))
    assert manager.lookup("r1", [5, 6]) == 0
    assert manager.take_tier_jobs() == [] and manager.tier_stats["redis"].promotions == 0


def test_the_scheduler_defers_admission_while_a_promotion_runs() -> None:
    manager = evicted_to_file([11, 12])
    scheduler = OffloadingScheduler(OffloadConfig(4, 1, 2, "lru"), manager=manager)  # type: ignore[arg-type]
    reader: FakeRequest = request("reader", [11, 12])
    assert scheduler.get_num_new_matched_tokens(reader, 0) == (None, False)
    (job,) = manager.take_tier_jobs()
    manager.complete_tier_job(all_ok(job))
    assert scheduler.get_num_new_matched_tokens(reader, 0) == (8, True)


def test_a_chunk_stored_without_its_window_part_is_promoted_from_the_file_tier() -> None:
    """A windowless chunk the CPU tier evicted is looked up under its windowless key, which only the
    file tier holds (under the CPU tier's entries alone the lookup asked for its full key: a miss)."""
    manager = evicted_to_file([windowless_key(11), 12, 13])
    # Blocks of 4 tokens, group 1 a window of 8 tokens: a hit ending at chunk 3 needs the window
    # parts of chunks 1 and 2 only.
    config = OffloadConfig(4, 1, 3, "lru", kv_groups=2, null_block=0, window_groups=((1, 8),))
    scheduler = OffloadingScheduler(config, manager=manager)  # type: ignore[arg-type]
    reader: FakeRequest = request("reader", [11, 12, 13], extra_tokens=1)
    assert scheduler.get_num_new_matched_tokens(reader, 0) == (None, False)
    (job,) = manager.take_tier_jobs()
    assert (job.kind, job.tier, job.keys) == ("promote", "file", (windowless_key(11), 12, 13))
    manager.complete_tier_job(all_ok(job))
    assert scheduler.get_num_new_matched_tokens(reader, 0) == (12, True)


def test_a_promotion_reports_exactly_once() -> None:
    from kvoffload.statemachine.runtime import DeclaredMachine
    from kvoffload.tiers.manager import TierJobRecord
    from kvoffload.tiers.protocol import TierJob

    machine = DeclaredMachine(PROMOTION, guards={}, id_attribute="job_id")
    record = TierJobRecord(TierJob(1, "promote", "file", "r", (1,), (0,)), PROMOTION.initial)
    machine.fire(record, "done")
    with pytest.raises(IllegalTransition, match="'fail' is not allowed in state 'promoted'"):
        machine.fire(record, "fail")


def test_the_cache_salt_goes_with_every_tier_job_of_the_request() -> None:
    manager = tiering(shared=True)
    manager.on_new_request("tenant-a", RequestContext(cache_salt="a"))
    store(manager, "tenant-a", [1])
    assert {job.salt for job in manager.take_tier_jobs()} == {"a"}
    manager.on_new_request("tenant-b", RequestContext(cache_salt="b"))
    assert manager.lookup("tenant-b", [7]) is None  # redis may hold 7 under salt b
    (job,) = manager.take_tier_jobs()
    assert (job.kind, job.salt) == ("probe", "b")
    manager.complete_tier_job(TierOutcome(job.job_id, (OK,)))
    assert manager.lookup("tenant-b", [7]) is None
    (job,) = manager.take_tier_jobs()
    assert (job.kind, job.salt) == ("promote", "b")
    manager.on_new_request("no-tenant", NO_CONTEXT)
    store(manager, "no-tenant", [2])
    assert {job.salt for job in manager.take_tier_jobs()} == {""}


def promoted_then_evicted() -> TieringManager:
    """A CPU tier of 2 blocks whose file tier holds [1, 2] and [3, 4]: reader A's promotion of
    [1, 2] lands, then reader B's promotion of [3, 4] evicts it before A loaded it."""
    manager = tiering(cpu_blocks=2)
    manager.on_new_request("writer")
    for keys in ([1, 2], [3, 4], [1000, 1001]):
        store(manager, "writer", keys)
        cascade_everything(manager)
    for reader, keys in (("a", [1, 2]), ("b", [3, 4])):
        manager.on_new_request(reader)
        assert manager.lookup(reader, keys) is None
        (job,) = manager.take_tier_jobs()
        manager.complete_tier_job(all_ok(job))
    assert manager.resident_keys == {3, 4}
    return manager


def test_a_promoted_chunk_counts_as_a_tier_hit_only_once_a_load_used_it() -> None:
    manager = promoted_then_evicted()
    # A's promotion is not retried: its prefix is recomputed. B loads what its promotion landed.
    assert manager.lookup("a", [1, 2]) == 0
    assert manager.lookup("b", [3, 4]) == 2
    manager.prepare_load("b", [3, 4])
    manager.complete_load("b", [3, 4])
    manager.prepare_load("b", [3, 4])  # a second load of the same chunks is a CPU hit
    stats = manager.tier_stats["file"]
    assert (stats.promoted_keys, stats.loaded_keys, stats.evicted_before_load_keys) == (4, 2, 2)


def test_a_reset_drops_landed_chunks_no_load_used() -> None:
    manager = promoted_then_evicted()
    manager.reset_cache()
    stats = manager.tier_stats["file"]
    assert (stats.promoted_keys, stats.loaded_keys, stats.evicted_before_load_keys) == (4, 0, 4)
