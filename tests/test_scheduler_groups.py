"""Several KV cache groups (vLLM's hybrid KV cache manager): a chunk is every group's blocks for
its tokens, a chunk naming the engine's null block is never stored, a freed sliding-window block
given to a new owner is never stored from, and a load skips the null block."""

from __future__ import annotations

import pytest
import torch

from kvoffload.dataplane.mover import BlockMover
from kvoffload.dataplane.worker import OffloadingWorker
from kvoffload.lifecycles import check_invariants
from kvoffload.offload import ConnectorMetadata, OffloadConfig, OffloadingScheduler, SchedulerOutput, WorkerOutput
from kvoffload.offload.types import TransferJob
from support import request

NULL = 0
FULL, WINDOW = 0, 1
# Request blocks 0..3: the full-attention group's blocks 10..13, the sliding-window group's 20..23,
# listed per engine block in group order.
BLOCKS = [10, 20, 11, 21, 12, 22, 13, 23]


def two_groups() -> OffloadingScheduler:
    return OffloadingScheduler(OffloadConfig(4, 1, 8, "lru", kv_groups=2, null_block=NULL))


def _run_prompt(s: OffloadingScheduler, blocks: list[int]) -> None:
    r = request("r", [1, 2, 3], extra_tokens=1)
    s.get_num_new_matched_tokens(r, 0)
    s.update_state_after_alloc(r, blocks, 0)
    s.build_connector_meta(SchedulerOutput({"r": r.num_tokens}))


def _stores(meta: ConnectorMetadata) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    return [(job.keys, job.gpu_block_ids) for job in meta.stores]


def test_a_chunk_is_every_groups_blocks_in_one_job() -> None:
    s = two_groups()
    _run_prompt(s, BLOCKS)
    meta = s.build_connector_meta(SchedulerOutput({"r": 1}))
    assert _stores(meta) == [((1, 2, 3), (10, 20, 11, 21, 12, 22))]
    # One job, one outcome: a failure fails every group's part of its chunks.
    s.update_connector_output(WorkerOutput({meta.stores[0].job_id: False}))
    assert s.manager.lookup("r", [1, 2, 3]) == 0
    assert check_invariants(s.snapshot()) == []


def test_a_chunk_naming_the_null_block_is_not_stored_and_the_later_ones_are() -> None:
    s = two_groups()
    _run_prompt(s, [10, NULL, 11, 21, 12, 22, 13, 23])
    meta = s.build_connector_meta(SchedulerOutput({"r": 1}))
    assert _stores(meta) == [((2, 3), (11, 21, 12, 22))]
    assert s.tracker("r").stored_chunks == 3, "the incomplete chunk is given up, not retried"


def test_a_freed_window_block_given_to_another_request_is_not_stored_from() -> None:
    s = two_groups()
    _run_prompt(s, list(BLOCKS))
    # vLLM freed the window's first block (20) and gave it out again before the store was built;
    # the full group's 11 appearing elsewhere is a shared prefix hit, and 22 is listed by r itself.
    s.blocks_reassigned({20: "other", 11: "other", 22: "r"}, {WINDOW})
    meta = s.build_connector_meta(SchedulerOutput({"r": 1}))
    assert _stores(meta) == [((2, 3), (11, 21, 12, 22))]


def test_a_store_already_built_is_fenced_not_unlisted() -> None:
    s = two_groups()
    _run_prompt(s, list(BLOCKS))
    meta = s.build_connector_meta(SchedulerOutput({"r": 1}))
    s.blocks_reassigned({20: "other"}, {WINDOW})
    # The chunk's store is in flight: the fence flushes it before block 20 is written.
    later = s.build_connector_meta(SchedulerOutput({"r": 1}, new_block_ids={"r": [30, 20]}))
    assert later.flush == (meta.stores[0].job_id,)


def _mover() -> tuple[BlockMover, torch.Tensor]:
    layer = torch.arange(8 * 4, dtype=torch.float32).reshape(8, 4)
    return BlockMover([layer], 8 * 2, cpu_kernel=False), layer


def test_the_worker_loads_no_null_block_and_stores_none() -> None:
    mover, layer = _mover()
    worker = OffloadingWorker(mover, 2, null_block=NULL)
    store = TransferJob(1, "r", "store", (7,), (3, 4), (0,))
    assert worker.execute(ConnectorMetadata(1, stores=(store,))).completed == {1: True}
    before = layer.clone()
    load = TransferJob(2, "r", "load", (7,), (5, NULL), (0,))
    assert worker.execute(ConnectorMetadata(2, loads=(load,))).completed == {2: True}
    assert torch.equal(layer[5], before[3])
    assert torch.equal(layer[NULL], before[NULL]), "the null block was written"
    bad = TransferJob(3, "r", "store", (8,), (NULL, 4), (1,))
    with pytest.raises(ValueError, match="reads the null block"):
        worker.execute(ConnectorMetadata(3, stores=(bad,)))
