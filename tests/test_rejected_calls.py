"""Each finding of the API probe (issue 11), pinned: a rejected call raises and changes nothing."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pytest

from kvoffload.offload import OffloadingScheduler, SchedulerOutput, UnknownJob, WorkerOutput
from kvoffload.offload.errors import LifecycleViolation
from kvoffload.statemachine.runtime import IllegalTransition
from support import FakeRequest, full_state, request, scheduler


def _with_stored_prefix(hashes: list[int]) -> OffloadingScheduler:
    """A scheduler whose CPU tier holds ``hashes`` (stored by a request that finished and drained)."""
    s = scheduler()
    first = request("first", hashes, extra_tokens=1)
    external, _ = s.get_num_new_matched_tokens(first, 0)
    s.update_state_after_alloc(first, list(range(len(hashes) + 1)), external or 0)
    s.build_connector_meta(SchedulerOutput({"first": first.num_tokens}))
    s.request_finished(first, list(range(len(hashes) + 1)))
    meta = s.build_connector_meta(SchedulerOutput())
    s.update_connector_output(WorkerOutput(dict.fromkeys((job.job_id for job in meta.stores), True)))
    assert not s.has_pending_work()
    return s


def _running(s: OffloadingScheduler, rid: str, hashes: list[int], blocks: list[int]) -> FakeRequest:
    req = request(rid, hashes, extra_tokens=1)
    s.get_num_new_matched_tokens(req, 0)
    s.update_state_after_alloc(req, blocks, 0)
    return req


def _rejected(s: OffloadingScheduler, error: type[Exception], match: str, call, *args) -> None:  # type: ignore[no-untyped-def]
    before = full_state(s)
    with pytest.raises(error, match=match):
        call(*args)
    assert full_state(s) == before


def test_build_with_an_unknown_request_builds_no_store_for_the_earlier_ones() -> None:
    s = scheduler()
    _running(s, "a", [1, 2], [0, 1, 2])
    s.build_connector_meta(SchedulerOutput({"a": 9}))
    # "a" has two full chunks to store in this build; "ghost" comes after it.
    _rejected(s, LifecycleViolation, "KnownRequest: build_connector_meta.*'ghost'",
              s.build_connector_meta, SchedulerOutput({"a": 1, "ghost": 1}))
    meta = s.build_connector_meta(SchedulerOutput({"a": 1}))
    assert [job.keys for job in meta.stores] == [(1, 2)]
    assert meta.step == 2, "the rejected call did not count a step"


@pytest.mark.parametrize(
    ("bad", "error", "match"),
    [
        (SchedulerOutput({"c": 1, "a": 1, "b": 2, "ghost": 1}), LifecycleViolation, "KnownRequest"),
        (SchedulerOutput({"c": 1, "a": 1, "b": 2, "d": -1}), ValueError, "num_scheduled_tokens must be >= 0"),
        (SchedulerOutput({"c": 1, "a": 1, "b": 2}, num_draft_tokens={"ghost": 1}), ValueError, "not scheduled"),
    ],
    ids=["unknown-last", "negative-last", "bad-drafts-after-every-entry"],
)
def test_build_takes_back_the_counts_it_advanced_before_the_bad_entry(
    bad: SchedulerOutput, error: type[Exception], match: str
) -> None:
    # build_connector_meta checks and advances each scheduled request in one pass: "c" and "b"
    # are advanced (no chunk due), "a" has a chunk due (handled after the pass), then it fails.
    s = scheduler()
    for rid, hashes in (("a", [1, 2]), ("b", [3, 4]), ("c", [5, 6]), ("d", [7, 8])):
        _running(s, rid, hashes, [0, 1, 2])
    s.build_connector_meta(SchedulerOutput({"a": 4, "b": 1, "c": 2, "d": 1}))
    _rejected(s, error, match, s.build_connector_meta, bad)
    meta = s.build_connector_meta(SchedulerOutput({"c": 1, "a": 1, "b": 2}))
    assert [job.keys for job in meta.stores] == [(1,)]
    assert {rid: s.tracker(rid).num_computed_tokens for rid in "abcd"} == {"a": 5, "b": 3, "c": 3, "d": 1}


class _BreaksAfterTwo(Mapping[str, int]):
    """A mapping whose iteration fails after its first two entries."""

    def __init__(self, entries: dict[str, int]) -> None:
        self._entries = entries

    def __getitem__(self, key: str) -> int:
        return self._entries[key]

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[str]:
        keys = list(self._entries)
        yield from keys[:2]
        raise RuntimeError("the engine's mapping broke")


def test_build_with_a_mapping_that_fails_mid_iteration_changes_nothing() -> None:
    s = scheduler()
    for rid, hashes in (("a", [1, 2]), ("b", [3, 4]), ("c", [5, 6])):
        _running(s, rid, hashes, [0, 1, 2])
    s.build_connector_meta(SchedulerOutput({"a": 1, "b": 1, "c": 1}))
    _rejected(s, RuntimeError, "mapping broke", s.build_connector_meta,
              SchedulerOutput(_BreaksAfterTwo({"a": 1, "b": 1, "c": 1})))


def test_build_scheduling_a_loading_request_changes_nothing() -> None:
    s = _with_stored_prefix([1, 2])
    _running(s, "a", [7], [5, 6])
    b = request("b", [1, 2], extra_tokens=2)
    external, _ = s.get_num_new_matched_tokens(b, 0)
    s.update_state_after_alloc(b, [8, 9, 10], external or 0)
    s.build_connector_meta(SchedulerOutput({"a": 4}))
    _rejected(s, IllegalTransition, "request 'b': trigger 'schedule' is not allowed in state 'loading'",
              s.build_connector_meta, SchedulerOutput({"a": 1, "b": 1}))


def test_build_with_a_request_both_preempted_and_scheduled_keeps_the_pending_flush() -> None:
    s = scheduler()
    _running(s, "a", [1, 2], [0, 1, 2])
    s.build_connector_meta(SchedulerOutput({"a": 9}))
    (store,) = s.build_connector_meta(SchedulerOutput({"a": 1})).stores
    _running(s, "b", [5], [0, 3])  # GPU block 0 is still read by the store: a flush is pending
    _rejected(s, ValueError, "'a' is both preempted and scheduled",
              s.build_connector_meta, SchedulerOutput({"a": 1, "b": 4}, preempted=["a"]))
    assert s.build_connector_meta(SchedulerOutput({"b": 4})).flush == (store.job_id,)


def test_worker_output_with_one_bad_entry_applies_no_completion() -> None:
    s = scheduler()
    _running(s, "a", [1, 2], [0, 1, 2])
    s.build_connector_meta(SchedulerOutput({"a": 9}))
    (store,) = s.build_connector_meta(SchedulerOutput({"a": 1})).stores
    _rejected(s, UnknownJob, "job 'x', which is not an int job id",
              s.update_connector_output, WorkerOutput({store.job_id: True, "x": True}))  # type: ignore[dict-item]
    _rejected(s, TypeError, f"job {store.job_id} with outcome 'yes', not a bool",
              s.update_connector_output, WorkerOutput({store.job_id: "yes"}))  # type: ignore[dict-item]
    assert store.job_id in s.jobs_in_flight


def test_completion_of_a_load_not_yet_handed_out_is_rejected() -> None:
    s = _with_stored_prefix([1, 2])
    b = request("b", [1, 2], extra_tokens=2)
    external, _ = s.get_num_new_matched_tokens(b, 0)
    s.update_state_after_alloc(b, [5, 6, 7], external or 0)
    load_job = s.tracker("b").load_job
    assert load_job is not None
    _rejected(s, UnknownJob, f"job {load_job}, which was not yet handed out in a ConnectorMetadata",
              s.update_connector_output, WorkerOutput({load_job: True}))
    (load,) = s.build_connector_meta(SchedulerOutput()).loads
    assert load.job_id == load_job
    assert s.update_connector_output(WorkerOutput({load_job: True})).loaded == ("b",)


@pytest.mark.parametrize("tokens", [-1, -100])
def test_negative_scheduled_tokens_are_rejected(tokens: int) -> None:
    s = scheduler()
    _running(s, "a", [1], [0, 1])
    _rejected(s, ValueError, f"'a': num_scheduled_tokens must be >= 0, got {tokens}",
              s.build_connector_meta, SchedulerOutput({"a": tokens}))


def test_a_non_integer_job_id_is_named_in_the_error() -> None:
    s = scheduler()
    _rejected(s, UnknownJob, r"job 1.5, which is not an int job id",
              s.update_connector_output, WorkerOutput({1.5: True}))  # type: ignore[dict-item]


def test_allocation_after_reset_cache_without_a_new_lookup_pins_nothing() -> None:
    s = _with_stored_prefix([1, 2])
    _running(s, "a", [9], [0, 1])
    s.build_connector_meta(SchedulerOutput({"a": 5}))
    (store,) = s.build_connector_meta(SchedulerOutput({"a": 1})).stores
    b = request("b", [1, 2], extra_tokens=2)
    external, _ = s.get_num_new_matched_tokens(b, 0)
    assert external == 8
    s.reset_cache()  # the store is stale: the manager's reset waits for it
    _rejected(s, ValueError, "'b': num_external_tokens=8 after reset_cache: look the request up again",
              s.update_state_after_alloc, b, [5, 6, 7], 8)
    s.update_state_after_alloc(b, [5, 6, 7], 0)
    s.build_connector_meta(SchedulerOutput({"b": 10}))
    s.update_connector_output(WorkerOutput({store.job_id: True}))
    assert s.manager.stats.resets == 1, "no pinned key blocked the manager's reset"


def test_allocation_after_a_finished_reset_without_a_new_lookup_is_rejected() -> None:
    s = _with_stored_prefix([1, 2])
    b = request("b", [1, 2], extra_tokens=2)
    s.get_num_new_matched_tokens(b, 0)
    s.reset_cache()
    _rejected(s, ValueError, "key 0x1 is not stored", s.update_state_after_alloc, b, [5, 6, 7], 8)


def test_request_finished_for_an_unknown_request_returns_false_and_counts_it() -> None:
    s = scheduler()
    assert s.request_finished(FakeRequest("never-looked-up", [1], 5), [3]) is False
    assert s.stats.unknown_finished == 1
    assert not s.has_pending_work()


def test_loaded_lists_only_requests_still_live() -> None:
    s = _with_stored_prefix([1, 2])
    b = request("b", [1, 2], extra_tokens=2)
    external, _ = s.get_num_new_matched_tokens(b, 0)
    s.update_state_after_alloc(b, [5, 6, 7], external or 0)
    (load,) = s.build_connector_meta(SchedulerOutput()).loads
    assert s.request_finished(b, [5, 6, 7]) is True
    s.build_connector_meta(SchedulerOutput())
    update = s.update_connector_output(WorkerOutput({load.job_id: True}))
    assert (update.loaded, update.load_failed, update.released) == ((), (), ("b",))


def test_load_failed_lists_only_requests_still_live() -> None:
    s = _with_stored_prefix([1, 2])
    b = request("b", [1, 2], extra_tokens=2)
    external, _ = s.get_num_new_matched_tokens(b, 0)
    s.update_state_after_alloc(b, [5, 6, 7], external or 0)
    (load,) = s.build_connector_meta(SchedulerOutput()).loads
    s.request_finished(b, [5, 6, 7])
    update = s.update_connector_output(WorkerOutput({load.job_id: False}))
    assert (update.loaded, update.load_failed) == ((), ())
    assert s.stats.load_failures == 1


def test_manager_complete_store_with_a_duplicate_key_changes_nothing() -> None:
    s = scheduler()
    _running(s, "a", [1], [0, 1])
    s.build_connector_meta(SchedulerOutput({"a": 5}))
    s.build_connector_meta(SchedulerOutput({"a": 1}))
    _rejected(s, ValueError, "duplicate keys", s.manager.complete_store, "a", [1, 1], True)


def test_manager_prepare_store_rejects_a_key_that_is_not_an_int() -> None:
    s = scheduler()
    _running(s, "a", [1], [0, 1])
    _rejected(s, TypeError, "key 'k' is not an int", s.manager.prepare_store, "a", ["k"])
