"""KVOffloadSpec's manager adapter on its own, through vLLM's own types (no engine)."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: `make check-vllm-engine` installs it in .venv-vllm")

from vllm.v1.kv_offload.base import LookupResult, ReqContext, make_offload_key

from kvoffload.offload.errors import LifecycleViolation
from kvoffload.offload.manager import CPUOffloadingManager
from kvoffload.offload.policies import LRUPolicy
from kvoffload.vllm.spec.manager_adapter import StrictManagerAdapter

CHUNK = 32


def _keys(prefix: int, count: int, context: ReqContext) -> list:
    keys = []
    for index in range(count):
        key = make_offload_key(bytes([0, prefix, index]) + bytes(29), 0)
        context.set_offload_key_position(key, (index + 1) * CHUNK)
        keys.append(key)
    return keys


class ParentRecordingLRU(LRUPolicy):
    """LRU that remembers the parent each key was inserted with."""

    def __init__(self) -> None:
        super().__init__()
        self.parents: dict[int, int | None] = {}

    def on_insert(self, key: int, parent: int | None) -> None:
        self.parents[key] = parent
        super().on_insert(key, parent)


def _adapter(blocks: int = 4) -> StrictManagerAdapter:
    return StrictManagerAdapter(CPUOffloadingManager(blocks, ParentRecordingLRU()), CHUNK)


def test_store_then_lookup_and_load_through_vllm_types() -> None:
    adapter = _adapter()
    writer = ReqContext("w")
    adapter.on_new_request(writer)
    keys = _keys(1, 3, writer)
    plan = adapter.prepare_store(keys, writer)
    assert plan is not None
    assert plan.keys_to_store == keys
    assert plan.store_spec.block_ids.tolist() == [0, 1, 2]
    assert adapter.lookup(keys[0], writer) is LookupResult.MISS, "a key being written is not loadable"
    adapter.complete_store(set(keys), writer)
    adapter.on_request_finished(writer)
    stored = list(adapter.take_events())
    # vLLM completes a store with a set of keys, so the event lists them in any order.
    assert [(sorted(event.keys), event.removed) for event in stored] == [(sorted(keys), False)]

    reader = ReqContext("r")
    adapter.on_new_request(reader)
    assert [adapter.lookup(key, reader) for key in keys] == [LookupResult.HIT] * 3
    spec = adapter.prepare_load(keys[:2], reader)
    assert spec.block_ids.tolist() == [0, 1]
    adapter.complete_load(set(keys[:2]), reader)
    adapter.on_request_finished(reader)
    assert adapter.violations == []
    assert adapter.leaks() == []


def test_eviction_reports_vllm_keys_and_the_parent_reaches_the_policy() -> None:
    adapter = _adapter(blocks=2)
    first = ReqContext("a")
    adapter.on_new_request(first)
    old = _keys(1, 2, first)
    adapter.prepare_store(old, first)
    adapter.complete_store(set(old), first)
    adapter.on_request_finished(first)
    second = ReqContext("b")
    adapter.on_new_request(second)
    new = _keys(2, 2, second)
    adapter.prepare_store(new[:1], second)
    plan = adapter.prepare_store(new[1:], second)
    assert plan is not None
    assert len(plan.evicted_keys) == 1 and plan.evicted_keys[0] in old
    # The second call's parent is the first call's key: both chunks form one prefix.
    parents = adapter.manager.policy.parents
    assert parents[adapter.codec.to_int(new[1])] == adapter.codec.to_int(new[0])
    assert parents[adapter.codec.to_int(new[0])] is None


def test_a_call_after_the_finish_is_recorded_and_raised() -> None:
    adapter = _adapter()
    context = ReqContext("x")
    adapter.on_new_request(context)
    key = _keys(1, 1, context)[0]
    adapter.on_request_finished(context)
    with pytest.raises(LifecycleViolation, match="NoManagerCallAfterSignal"):
        adapter.lookup(key, context)
    assert len(adapter.violations) == 1 and adapter.violations[0].startswith("lookup:")


def test_reset_with_transfers_in_flight_completes_them_first() -> None:
    adapter = _adapter()
    writer = ReqContext("w")
    adapter.on_new_request(writer)
    keys = _keys(1, 2, writer)
    adapter.prepare_store(keys[:1], writer)
    adapter.complete_store(set(keys[:1]), writer)
    adapter.prepare_store(keys[1:], writer)  # still in flight
    reader = ReqContext("r")
    adapter.on_new_request(reader)
    adapter.prepare_load(keys[:1], reader)  # still in flight
    adapter.reset_cache()
    assert adapter.manager.resident_keys == frozenset()
    assert adapter.manager.requests_in_flight() == {}
    adapter.on_request_finished(writer)
    adapter.on_request_finished(reader)
    assert adapter.leaks() == []
    assert adapter.violations == []
