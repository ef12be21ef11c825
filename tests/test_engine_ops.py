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


def test_a_held_request_keeps_its_blocks_until_released() -> None:
    pool = BlockPool(4)
    request = _admitted(pool, "a")
    assert request.status == RUNNING
    engine_ops.finish(pool, request, hold=True)
    assert request.status == FINISHED and len(pool.free_queue) == 1
    engine_ops.release(pool, request)
    assert request.status == DONE and len(pool.free_queue) == 4 and request.block_ids == []
