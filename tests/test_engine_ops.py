"""The engine operations both engine models call (kvoffload_lab.sim.engine_ops)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from kvoffload_lab.sim import engine_ops
from kvoffload_lab.sim.block_pool import BlockPool
from kvoffload_lab.sim.request import DONE, FINISHED, LOADING, RUNNING, WAITING, SimRequest


class _Connector:
    """Records what ``update_state_after_alloc`` hears (the real scheduler would refuse a load that
    no lookup offered)."""

    def __init__(self) -> None:
        self.allocations: list[tuple[str, list[int], int]] = []

    def update_state_after_alloc(self, request: SimRequest, block_ids: Sequence[int], external: int) -> None:
        self.allocations.append((request.request_id, list(block_ids), external))

    def reset_cache(self) -> list[str]:
        return [request_id for request_id, _, external in self.allocations if external]


def _connector() -> Any:
    return cast(Any, _Connector())


def _admitted(pool: BlockPool, request_id: str, external: int = 0) -> SimRequest:
    request = SimRequest.of_blocks(request_id, [11, 12, 13])
    connector = _connector()
    assert engine_ops.admit(pool, connector, request, engine_ops.gpu_hit(pool, request), 3, external)
    assert connector.allocations == [(request_id, request.block_ids, external)]
    return request


def test_a_preempted_request_hits_its_own_blocks_but_not_its_last_token() -> None:
    pool = BlockPool(4)
    request = _admitted(pool, "a")
    blocks = list(request.block_ids)
    assert engine_ops.cache_scheduled(pool, request, 3) == blocks
    engine_ops.preempt(pool, request)
    assert (request.status, request.block_ids, request.num_computed_tokens) == (WAITING, [], 0)
    assert engine_ops.gpu_hit(pool, request) == blocks[:2]


def test_admission_fails_without_free_blocks_and_holds_nothing() -> None:
    pool = BlockPool(4)
    first = _admitted(pool, "a")
    engine_ops.cache_scheduled(pool, first, 3)
    second = SimRequest.of_blocks("b", [11, 12, 99, 98, 97])
    hit = engine_ops.gpu_hit(pool, second)
    assert hit == first.block_ids[:2]
    connector = _connector()
    assert not engine_ops.admit(pool, connector, second, hit, 5, 0)
    assert connector.allocations == []
    assert pool.ref_cnt[hit[0]] == 1 and second.block_ids == []


def test_a_load_waits_and_only_intact_blocks_are_cached() -> None:
    pool = BlockPool(4)
    request = _admitted(pool, "a", external=2)
    assert request.status == LOADING
    wrong = engine_ops.complete_load(pool, request, lambda block, block_hash: block_hash != 12)
    assert wrong == [request.block_ids[1]]
    assert pool.cached == {11: request.block_ids[0]}
    assert (request.status, request.num_computed_tokens) == (RUNNING, 2)


def test_a_reset_forgets_free_blocks_and_cancelled_loads_recompute() -> None:
    pool = BlockPool(8)
    connector = _connector()
    freed = SimRequest.of_blocks("a", [11, 12, 13])
    assert engine_ops.admit(pool, connector, freed, [], 3, 0)
    engine_ops.cache_scheduled(pool, freed, 3)
    engine_ops.finish(pool, freed, hold=False)
    loading = SimRequest.of_blocks("b", [21, 22, 23])
    assert engine_ops.admit(pool, connector, loading, [], 3, 2)
    assert engine_ops.reset_cache(pool, connector, {"a": freed, "b": loading}) == [loading]
    assert pool.cached == {}
    assert (loading.status, loading.num_computed_tokens, len(loading.block_ids)) == (RUNNING, 0, 3)


def test_a_held_request_keeps_its_blocks_until_released() -> None:
    pool = BlockPool(4)
    request = _admitted(pool, "a")
    assert request.status == RUNNING
    engine_ops.finish(pool, request, hold=True)
    assert request.status == FINISHED and len(pool.free_queue) == 1
    engine_ops.release(pool, request)
    assert request.status == DONE and len(pool.free_queue) == 4 and request.block_ids == []
