"""The offloading scheduler: ordering rules, lifecycle, failures, reset, bad input.

Each test asserts the whole relevant state (every tracked request's lifecycle state and jobs,
the manager's view) after each step, in the style of h11's state tests.
"""

from __future__ import annotations

from typing import Any

import pytest

from kvoffload.lifecycles import check_invariants
from kvoffload.offload import (
    ConnectorMetadata,
    ConnectorUpdate,
    LifecycleViolation,
    OffloadConfig,
    OffloadingScheduler,
    SchedulerOutput,
    UnknownJob,
    WorkerOutput,
)
from kvoffload.statemachine.runtime import IllegalTransition
from support import FakeRequest, request, scheduler


def view(s: OffloadingScheduler) -> dict[str, tuple[str, int | None, tuple[int, ...]]]:
    """request -> (lifecycle state, load job, store jobs)."""
    return {rid: (t.state, t.load_job, tuple(sorted(t.store_jobs))) for rid, t in s.trackers.items()}


def no_violations(s: OffloadingScheduler) -> None:
    assert check_invariants(s.snapshot()) == []


def admit(s: OffloadingScheduler, req: FakeRequest, blocks: list[int], computed: int = 0, load: bool = True) -> int:
    external, _ = s.get_num_new_matched_tokens(req, computed)
    assert external is not None
    s.update_state_after_alloc(req, blocks, external if load else 0)
    return external


def step(s: OffloadingScheduler, scheduled: dict[str, int] | None = None, **kwargs: Any) -> ConnectorMetadata:
    return s.build_connector_meta(SchedulerOutput(scheduled or {}, **kwargs))


def complete(s: OffloadingScheduler, *job_ids: int, ok: bool = True) -> ConnectorUpdate:
    return s.update_connector_output(WorkerOutput(dict.fromkeys(job_ids, ok)))


def test_reference_crash_final_store_is_prepared_before_the_manager_hears_the_finish() -> None:
    s = scheduler()
    a = request("a", [11, 12], extra_tokens=3)  # 2 full blocks + 3 tokens = 11 tokens
    admit(s, a, [0, 1, 2])
    step(s, {"a": 8})  # prefill computes the first two blocks
    meta = step(s, {"a": 3})  # the first two blocks are stored now
    assert [job.keys for job in meta.stores] == [(11, 12)]
    complete(s, meta.stores[0].job_id)
    # Decode fills block 3; the request then finishes (EOS) in the same step.
    a.block_hashes.append(13)
    a.num_tokens = 12
    assert step(s, {"a": 1}).stores == ()
    assert s.request_finished(a, [0, 1, 2]) is True, "the engine must keep the blocks: a store is pending"
    assert view(s) == {"a": ("finished_pending_store", None, ())}
    assert s.manager.is_known("a"), "request_finished only records the finish"
    no_violations(s)
    meta = step(s)
    # The final store was built AND the manager was signaled after it, in the same call.
    assert [(job.kind, job.keys, job.gpu_block_ids) for job in meta.stores] == [("store", (13,), (2,))]
    assert view(s) == {"a": ("signaled", None, (meta.stores[0].job_id,))}
    assert not s.manager.is_known("a")
    assert s.tracker("a").signals == 1
    no_violations(s)
    update = complete(s, meta.stores[0].job_id)
    assert update == ConnectorUpdate(released=("a",))
    assert view(s) == {}
    assert s.manager.resident_keys == {11, 12, 13}
    assert s.leaks() == [] and s.manager.leaks() == []


def test_the_eager_order_is_exactly_what_the_strict_manager_rejects() -> None:
    s = scheduler()
    a = request("a", [11], extra_tokens=0)
    a.num_tokens = 5
    admit(s, a, [0, 1])
    step(s, {"a": 4})
    s.request_finished(a, [0, 1])
    s.manager.on_request_finished("a")  # what the pre-fix connector did in request_finished
    with pytest.raises(LifecycleViolation, match="NoManagerCallAfterSignal: prepare_store\\(\\) for request 'a'"):
        step(s)


def test_finish_with_stores_in_flight_keeps_state_until_they_complete() -> None:
    s = scheduler()
    a = request("a", [1, 2], extra_tokens=1)
    admit(s, a, [0, 1, 2])
    step(s, {"a": 9})
    meta = step(s, {"a": 1})
    (store,) = meta.stores
    assert s.request_finished(a, [0, 1, 2]) is True
    step(s)
    assert view(s) == {"a": ("signaled", None, (store.job_id,))}
    assert s.has_pending_work()
    no_violations(s)
    assert complete(s, store.job_id).released == ("a",)
    assert view(s) == {}
    assert not s.has_pending_work()


def test_finish_with_nothing_to_store_signals_and_cleans_in_the_next_build() -> None:
    s = scheduler()
    a = request("a", [], extra_tokens=3)
    admit(s, a, [0])
    step(s, {"a": 3})
    assert s.request_finished(a, [0]) is False, "nothing uses the blocks: free them now"
    assert view(s) == {"a": ("finished_pending_store", None, ())}
    step(s)
    assert view(s) == {}
    assert s.manager.leaks() == []


def _stored_prefix(s: OffloadingScheduler, hashes: list[int], blocks: list[int]) -> None:
    """Store ``hashes`` through a first request that then finishes and drains."""
    first = request("first", hashes, extra_tokens=1)
    admit(s, first, blocks)
    step(s, {"first": first.num_tokens})
    s.request_finished(first, blocks)
    meta = step(s)  # the final stores
    complete(s, *(job.job_id for job in meta.stores))
    assert view(s) == {}


def test_lookup_loads_offloaded_prefix_then_runs() -> None:
    s = scheduler()
    _stored_prefix(s, [1, 2], [0, 1, 2])
    b = request("b", [1, 2, 3], extra_tokens=1)
    external, is_async = s.get_num_new_matched_tokens(b, 0)
    assert (external, is_async) == (8, True)
    s.update_state_after_alloc(b, [5, 6, 7, 8], 8)
    assert view(s) == {"b": ("loading", 2, ())}
    meta = step(s)
    assert [(j.kind, j.keys, j.gpu_block_ids, j.cpu_block_ids) for j in meta.loads] == [
        ("load", (1, 2), (5, 6), (0, 1))
    ]
    assert s.manager.entry(1).ref_cnt == 1  # type: ignore[union-attr]
    no_violations(s)
    assert complete(s, 2) == ConnectorUpdate(loaded=("b",))
    assert view(s) == {"b": ("running", None, ())}
    assert s.manager.entry(1).ref_cnt == 0  # type: ignore[union-attr]


def test_engine_calls_in_the_wrong_state_are_declared_triggers_that_change_nothing() -> None:
    s = scheduler()
    _stored_prefix(s, [1, 2], [0, 1, 2])
    b = request("b", [1, 2, 3], extra_tokens=1)
    assert s.get_num_new_matched_tokens(b, 0) == (8, True)
    s.update_state_after_alloc(b, [5, 6, 7, 8], 8)
    tracker = s.trackers["b"]

    def seen() -> tuple[object, ...]:
        return (view(s), tracker.gpu_block_ids, tracker.num_computed_tokens, tracker.stored_chunks,
                tracker.local_computed_tokens, tracker.lookup_keys, tracker.gpu_hit_unwritten)

    before = seen()
    with pytest.raises(IllegalTransition, match="request 'b': trigger 'lookup' is not allowed in state 'loading'"):
        s.get_num_new_matched_tokens(b, 4)
    with pytest.raises(IllegalTransition, match="request 'b': trigger 'schedule' is not allowed in state 'loading'"):
        s.update_state_after_alloc(b, [9, 10, 11, 12], 0)
    assert seen() == before
    (load,) = step(s).loads
    complete(s, load.job_id)
    # Scheduled once loaded, the engine hands the blocks over again: the declared realloc.
    s.update_state_after_alloc(b, [5, 6, 7, 8], 0)
    assert view(s) == {"b": ("running", None, ())}
    assert s.lifecycle.declares(tracker, "realloc")


def test_lookup_leaves_at_least_one_token_to_compute() -> None:
    s = scheduler()
    _stored_prefix(s, [1, 2], [0, 1, 2])
    exact = FakeRequest("b", [1, 2], num_tokens=8)  # the whole prompt is offloaded
    assert s.get_num_new_matched_tokens(exact, 0) == (4, True)


def test_abort_while_loading_waits_for_the_load_then_cleans() -> None:
    s = scheduler()
    _stored_prefix(s, [1, 2], [0, 1, 2])
    b = request("b", [1, 2], extra_tokens=2)
    admit(s, b, [5, 6, 7])
    meta = step(s)
    (load,) = meta.loads
    assert s.request_finished(b, [5, 6, 7]) is True, "the load still writes the GPU blocks"
    step(s)
    assert view(s) == {"b": ("signaled", load.job_id, ())}
    no_violations(s)
    update = complete(s, load.job_id)
    assert update.released == ("b",)
    assert view(s) == {}
    assert s.manager.leaks() == []


def test_preemption_flushes_stores_and_defers_readmission_until_they_report() -> None:
    s = scheduler()
    a = request("a", [1, 2], extra_tokens=1)
    admit(s, a, [0, 1, 2])
    step(s, {"a": 9})
    (store,) = step(s, {"a": 1}).stores
    meta = step(s, preempted=("a",))
    assert meta.flush == (store.job_id,)
    assert view(s) == {"a": ("preempted", None, (store.job_id,))}
    assert s.get_num_new_matched_tokens(a, 0) == (None, False), "flushed store has not reported yet"
    assert view(s)["a"][0] == "preempted"
    complete(s, store.job_id)
    external, _ = s.get_num_new_matched_tokens(a, 0)
    assert external == 8, "re-admitted: the stored prefix is found"
    assert view(s) == {"a": ("waiting", None, ())}
    no_violations(s)


def test_concurrent_lookups_of_the_same_prefix_defer_the_second_load() -> None:
    s = scheduler()
    _stored_prefix(s, [1, 2], [0, 1, 2])
    b = request("b", [1, 2, 3], extra_tokens=1)
    c = request("c", [1, 2, 4], extra_tokens=1)
    admit(s, b, [5, 6, 7, 8])
    assert s.get_num_new_matched_tokens(c, 0) == (None, False)
    meta = step(s)
    complete(s, meta.loads[0].job_id)
    # b's load is done: in an engine c now finds the blocks in the GPU prefix cache.
    assert s.get_num_new_matched_tokens(c, 8) == (0, False)
    assert s.get_num_new_matched_tokens(c, 0) == (8, True)
    assert s.stats.deferred_lookups == 1


def test_reset_cache_signals_a_finished_unsignaled_request_exactly_once() -> None:
    s = scheduler()
    a = request("a", [1], extra_tokens=1)
    admit(s, a, [0, 1])
    step(s, {"a": 5})
    assert s.request_finished(a, [0, 1]) is True
    assert view(s) == {"a": ("finished_pending_store", None, ())}
    assert s.reset_cache() == ()
    assert view(s) == {}
    assert s.manager.stats.resets == 1
    assert s.manager.leaks() == []
    with pytest.raises(LifecycleViolation, match="SignalExactlyOnce"):
        s.manager.on_request_finished("a")
    update = complete(s)
    assert update.released == ("a",)


def test_reset_cache_with_transfers_in_flight_makes_them_stale_and_flushes_them() -> None:
    s = scheduler()
    _stored_prefix(s, [1, 2], [0, 1, 2])
    b = request("b", [1, 2], extra_tokens=2)
    admit(s, b, [5, 6, 7])
    (load,) = step(s).loads
    c = request("c", [7, 8], extra_tokens=1)
    admit(s, c, [9, 10, 11])
    step(s, {"c": 9})
    (store,) = step(s, {"c": 1}).stores
    assert s.reset_cache() == ("b",), "b's load is cancelled: the engine recomputes"
    assert view(s) == {"b": ("waiting", None, ()), "c": ("waiting", None, ())}
    assert s.get_num_new_matched_tokens(FakeRequest("d", [1, 2], 9), 0) == (0, False), "lookups miss while draining"
    meta = step(s, {"b": 1, "c": 1})
    assert set(meta.flush) == {load.job_id, store.job_id}
    assert meta.stores == () and meta.loads == ()
    assert view(s) == {"b": ("running", None, ()), "c": ("running", None, ()), "d": ("waiting", None, ())}
    complete(s, load.job_id, store.job_id)
    assert s.stats.stale_completions == 2
    assert s.manager.resident_keys == frozenset()
    assert s.manager.stats.resets == 1
    no_violations(s)


def test_a_stale_job_that_ends_before_its_flush_is_not_flushed() -> None:
    # The worker reports a store made stale by reset_cache before the next step hands out its
    # flush: nothing is left to wait for, and an idle engine (no step to come) must not keep it.
    s = scheduler()
    c = request("c", [7, 8], extra_tokens=1)
    admit(s, c, [9, 10, 11])
    step(s, {"c": 9})
    (store,) = step(s, {"c": 1}).stores
    s.request_finished(c, [9, 10, 11])
    s.reset_cache()
    complete(s, store.job_id)
    assert s.leaks() == [] and not s.has_pending_work()
    assert step(s).flush == ()
    no_violations(s)


def test_a_preemption_reported_after_the_request_finished_is_accepted_and_stores_nothing() -> None:
    # vLLM's reset_prefix_cache(reset_running_requests=True) preempts c between two steps (freeing
    # its GPU blocks) and resets the connector; c is aborted before the next step, which still
    # lists c as preempted. Its finish came with no GPU blocks: nothing may be stored from them.
    s = scheduler()
    c = request("c", [7, 8], extra_tokens=1)
    admit(s, c, [9, 10, 11])
    step(s, {"c": 9})
    s.reset_cache()
    assert s.request_finished(c, []) is False
    meta = step(s, preempted=("c",))
    assert meta.stores == ()
    assert view(s) == {}
    assert s.leaks() == [] and s.manager.leaks() == []
    no_violations(s)
    with pytest.raises(LifecycleViolation, match="KnownRequest"):
        step(s, preempted=("c",))


def test_store_allocation_failure_is_retried_in_a_later_step() -> None:
    s = scheduler(num_cpu_blocks=1)
    _stored_prefix(s, [1], [0, 1])
    b = request("b", [1], extra_tokens=1)
    admit(s, b, [2, 3])
    (load,) = step(s).loads
    c = request("c", [5], extra_tokens=1)
    admit(s, c, [4, 5])
    step(s, {"c": 5})
    assert step(s, {"c": 1}).stores == (), "the only CPU block is being loaded from"
    assert s.stats.store_allocation_failures == 1
    complete(s, load.job_id)
    (store,) = step(s, {"c": 1}).stores
    assert store.keys == (5,)
    assert s.manager.resident_keys == {5}


def test_failed_load_makes_the_request_recompute_and_failed_store_frees_blocks() -> None:
    s = scheduler()
    _stored_prefix(s, [1, 2], [0, 1, 2])
    b = request("b", [1, 2], extra_tokens=2)
    admit(s, b, [5, 6, 7])
    (load,) = step(s).loads
    assert complete(s, load.job_id, ok=False) == ConnectorUpdate(load_failed=("b",))
    assert view(s) == {"b": ("running", None, ())}
    assert s.tracker("b").num_computed_tokens == 0
    c = request("c", [8], extra_tokens=1)
    admit(s, c, [9, 10])
    step(s, {"c": 5})
    (store,) = step(s, {"c": 1}).stores
    complete(s, store.job_id, ok=False)
    assert 8 not in s.manager.resident_keys
    assert s.manager.num_free_blocks == 8 - 2
    no_violations(s)


def test_gpu_block_fence_flushes_a_store_whose_block_is_handed_to_new_work() -> None:
    s = scheduler()
    a = request("a", [1, 2], extra_tokens=1)
    admit(s, a, [0, 1, 2])
    step(s, {"a": 9})
    (store,) = step(s, {"a": 1}).stores
    step(s, preempted=("a",))  # flushes the store
    b = request("b", [3], extra_tokens=1)
    # Same block again before the flushed store reported: already flushed, not flushed twice.
    admit(s, b, [1, 5])
    assert step(s, {"b": 5}).flush == ()
    complete(s, store.job_id)
    # A new store reads block 1; the engine hands block 1 to another request as new work.
    (store2,) = step(s, {"b": 1}).stores
    assert store2.gpu_block_ids == (1,)
    c = request("c", [], extra_tokens=2)
    admit(s, c, [1])
    assert step(s, {"c": 2}).flush == (store2.job_id,)
    assert s.stats.fence_flushes == 1


def test_bad_input_is_rejected_with_a_clear_error_and_changes_nothing() -> None:
    s = scheduler()
    a = request("a", [1], extra_tokens=1)
    admit(s, a, [0, 1])
    before = view(s)
    with pytest.raises(LifecycleViolation, match="KnownRequest: update_state_after_alloc\\(\\) for request 'zz'"):
        s.update_state_after_alloc(FakeRequest("zz", [], 3), [0], 0)
    with pytest.raises(ValueError, match="'n': num_computed_tokens must be >= 0, got -1"):
        s.get_num_new_matched_tokens(FakeRequest("n", [], 3), -1)
    with pytest.raises(IllegalTransition, match="request 'a': trigger 'lookup' is not allowed in state 'running'"):
        s.get_num_new_matched_tokens(a, 0)
    with pytest.raises(UnknownJob, match="job 99, which was never issued"):
        complete(s, 99)
    assert view(s) == before
    step(s, {"a": 5})
    (store,) = step(s, {"a": 1}).stores
    complete(s, store.job_id)
    with pytest.raises(UnknownJob, match=f"job {store.job_id}, which was already completed"):
        complete(s, store.job_id)
    s.request_finished(a, [0, 1])
    with pytest.raises(IllegalTransition, match="request 'a': trigger 'finish' is not allowed in state"):
        s.request_finished(a, [0, 1])
    assert s.manager.resident_keys == {1}, "nothing already stored is lost by a bad call"


def test_a_partial_worker_output_with_one_unknown_job_applies_nothing() -> None:
    s = scheduler()
    a = request("a", [1], extra_tokens=1)
    admit(s, a, [0, 1])
    step(s, {"a": 5})
    (store,) = step(s, {"a": 1}).stores
    with pytest.raises(UnknownJob):
        s.update_connector_output(WorkerOutput({store.job_id: True, 12345: True}))
    assert view(s) == {"a": ("running", None, (store.job_id,))}
    assert s.manager.entry(1).write_pending  # type: ignore[union-attr]


def test_external_tokens_beyond_the_lookup_are_rejected() -> None:
    s = scheduler()
    _stored_prefix(s, [1], [0, 1])
    b = request("b", [1, 2], extra_tokens=1)
    assert s.get_num_new_matched_tokens(b, 0) == (4, True)
    message = "num_external_tokens=8 must be 0 or end a chunk of 4 tokens behind num_computed_tokens=0, at most 4"
    with pytest.raises(ValueError, match=message):
        s.update_state_after_alloc(b, [3, 4, 5], 8)
    assert view(s) == {"b": ("waiting", None, ())}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"gpu_block_size": 0}, "gpu_block_size must be a positive integer"),
        ({"blocks_per_chunk": -1}, "blocks_per_chunk must be a positive integer"),
        ({"num_cpu_blocks": 0}, "num_cpu_blocks must be a positive integer"),
    ],
)
def test_offload_config_rejects_bad_sizes(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        OffloadConfig(**kwargs)


def test_offloaded_block_size_must_be_whole_gpu_blocks() -> None:
    assert OffloadConfig.from_block_sizes(16, 64, 10).blocks_per_chunk == 4
    with pytest.raises(ValueError, match="offloaded_block_size=40 is not a multiple of gpu_block_size=16"):
        OffloadConfig.from_block_sizes(16, 40, 10)


def test_chunks_of_several_gpu_blocks_are_keyed_by_their_last_block() -> None:
    s = scheduler(blocks_per_chunk=2)
    a = request("a", [1, 2, 3, 4], extra_tokens=1)
    admit(s, a, [0, 1, 2, 3, 4])
    step(s, {"a": 17})
    (store,) = step(s, {"a": 1}).stores
    assert store.keys == (2, 4)
    assert store.gpu_block_ids == (0, 1, 2, 3)
    # Without a null block to name where the engine holds blocks, a hit inside a chunk loads nothing
    # (tests/test_scheduler_partial_chunk.py: with one).
    b = request("b", [1, 2, 3, 4], extra_tokens=1)
    complete(s, store.job_id)
    assert s.get_num_new_matched_tokens(b, 4) == (0, False)
    assert s.get_num_new_matched_tokens(b, 8) == (8, True)


def test_a_gpu_hit_behind_a_load_cancelled_by_reset_is_stored_no_earlier_than_the_next_step() -> None:
    # The explorer's counterexample with resets offered where vLLM never calls them: b is admitted
    # with a GPU hit on block 0, which another request computes in this very step, plus a load;
    # reset_cache comes before the step's build. b now recomputes from its hit, so the hit must
    # wait a step (rule 9) before it is stored: this step's forward pass writes it.
    s = scheduler()
    _stored_prefix(s, [1, 2], [0, 1, 2])
    b = request("b", [1, 2, 3], extra_tokens=1)
    assert admit(s, b, [0, 5, 6, 7], computed=4) == 4
    assert s.reset_cache() == ("b",)
    assert view(s) == {"b": ("waiting", None, ())}
    assert step(s, {"b": 4}).stores == (), "the hit's block may still be unwritten"
    assert [job.keys for job in step(s, {"b": 4}).stores] == [(1, 2)]
    no_violations(s)


def test_reset_between_admission_and_build_cancels_a_load_the_worker_never_saw() -> None:
    s = scheduler()
    _stored_prefix(s, [1, 2], [0, 1, 2])
    b = request("b", [1, 2], extra_tokens=2)
    admit(s, b, [5, 6, 7])
    assert s.reset_cache() == ("b",)
    assert s.manager.stats.resets == 1, "nothing was in flight: the manager is reset at once"
    assert s.manager.requests_in_flight() == {}
    meta = step(s, {"b": 10})
    assert (meta.flush, meta.loads) == ((), ())
    assert view(s) == {"b": ("running", None, ())}
    assert s.stats.stale_completions == 1
