"""Several KV cache groups (vLLM's hybrid KV cache manager): a chunk is every group's blocks for
its tokens, a chunk naming the engine's null block is never stored whole, a freed sliding-window
block given to a new owner is never stored from, and a load skips the null block. With the
sliding-window groups named (``window_groups``), a chunk that lost only window blocks is stored
without its window part, and a hit needs the window parts of its last window only."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from kvoffload.dataplane.mover import BlockMover
from kvoffload.dataplane.worker import OffloadingWorker
from kvoffload.lifecycles import check_invariants
from kvoffload.offload import ConnectorMetadata, OffloadConfig, OffloadingScheduler, SchedulerOutput, WorkerOutput
from kvoffload.offload.types import TransferJob
from kvoffload.offload.windows import first_window_chunk, windowless_key
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


def test_a_window_block_given_out_after_its_chunk_was_stored_is_not_stored_from_after_a_reset() -> None:
    """vLLM frees a stored chunk's window block and gives it to another request, which writes it;
    a reset then makes every chunk of the running request storable again: its chunk is stored
    again without that block (found by the real-engine fuzzer under async scheduling)."""
    s = two_groups()
    _run_prompt(s, list(BLOCKS))
    meta = s.build_connector_meta(SchedulerOutput({"r": 1}))
    assert _stores(meta) == [((1, 2, 3), (10, 20, 11, 21, 12, 22))]
    s.update_connector_output(WorkerOutput({meta.stores[0].job_id: True}))
    s.blocks_reassigned({20: "other"}, {WINDOW})
    s.build_connector_meta(SchedulerOutput({"r": 1}))
    s.reset_cache()
    again = s.build_connector_meta(SchedulerOutput({"r": 1}))
    # Chunk 1 lost its window block (no window groups named here: a chunk naming the null block is
    # not stored); chunks 2 and 3 kept theirs and are stored again.
    assert _stores(again) == [((2, 3), (11, 21, 12, 22))]


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
    # A chunk stored without a group's part: the null block's position of the CPU chunk is not written.
    cpu_before = mover.cpu_layers[0][2:4].clone()
    windowless = TransferJob(3, "r", "store", (8,), (NULL, 4), (1,))
    assert worker.execute(ConnectorMetadata(3, stores=(windowless,))).completed == {3: True}
    assert torch.equal(mover.cpu_layers[0][2], cpu_before[0]), "the null block was stored"
    assert torch.equal(mover.cpu_layers[0][3], layer[4])


# Window groups: blocks of 4 tokens, one block per chunk, group 1 a sliding window of 8 tokens, so a
# hit ending at chunk c needs the window parts of chunks first_window_chunk(c) = (4c - 7) // 4 on.
WINDOW_TOKENS = 8
HASHES = [1, 2, 3, 4, 5, 6]


def windowed() -> OffloadingScheduler:
    config = OffloadConfig(4, 1, 16, "lru", kv_groups=2, null_block=NULL, window_groups=((WINDOW, WINDOW_TOKENS),))
    return OffloadingScheduler(config)


def _blocks(lost_window: set[int], chunks: int = len(HASHES)) -> list[int]:
    """Chunk i's full block 10 + i and window block 20 + i, or the null block if it was freed."""
    return [block for i in range(chunks) for block in (10 + i, NULL if i in lost_window else 20 + i)]


def _store_all(s: OffloadingScheduler, lost_window: set[int]) -> ConnectorMetadata:
    r = request("r", HASHES, extra_tokens=1)
    s.get_num_new_matched_tokens(r, 0)
    s.update_state_after_alloc(r, _blocks(lost_window), 0)
    s.build_connector_meta(SchedulerOutput({"r": r.num_tokens}))
    meta = s.build_connector_meta(SchedulerOutput({"r": 1}))
    s.update_connector_output(WorkerOutput({job.job_id: True for job in meta.stores}))
    return meta


def test_a_chunk_that_lost_only_window_blocks_is_stored_without_its_window_part() -> None:
    s = windowed()
    meta = _store_all(s, {0, 1, 4})
    assert _stores(meta) == [
        ((windowless_key(1), windowless_key(2)), (10, NULL, 11, NULL)),
        ((3, 4), (12, 22, 13, 23)),
        ((windowless_key(5),), (14, NULL)),
        ((6,), (15, 25)),
    ]
    assert s.stats.windowless_chunks == 3
    assert check_invariants(s.snapshot()) == []


def test_a_chunk_that_lost_a_full_attention_block_is_not_stored() -> None:
    s = windowed()
    r = request("r", HASHES[:2], extra_tokens=1)
    s.get_num_new_matched_tokens(r, 0)
    s.update_state_after_alloc(r, [NULL, 20, 11, NULL], 0)
    s.build_connector_meta(SchedulerOutput({"r": r.num_tokens}))
    meta = s.build_connector_meta(SchedulerOutput({"r": 1}))
    assert _stores(meta) == [((windowless_key(2),), (11, NULL))]


def _second_turn(s: OffloadingScheduler) -> tuple[int | None, bool]:
    return s.get_num_new_matched_tokens(request("again", HASHES, extra_tokens=3), 0)


def test_a_hit_loads_windowless_chunks_before_its_last_window_into_the_null_block() -> None:
    s = windowed()
    _store_all(s, {0, 1, 2, 3})
    # The hit ends at chunk 6 (24 tokens); its last window needs the window parts of chunks 4 and 5.
    assert _second_turn(s) == (24, True)
    again = request("again", HASHES, extra_tokens=3)
    # vLLM names the null block for the window group's blocks before the window, as its
    # SlidingWindowManager does for tokens counted computed outside the window.
    s.update_state_after_alloc(again, [*_blocks({0, 1, 2, 3}), 16, 26], 24)
    meta = s.build_connector_meta(SchedulerOutput({}))
    (load,) = meta.loads
    assert load.keys == (*(windowless_key(h) for h in HASHES[:4]), 5, 6)
    assert load.gpu_block_ids == tuple(_blocks({0, 1, 2, 3}))


def test_a_load_refuses_a_window_block_it_has_nothing_for() -> None:
    """The engine giving a real window block to a chunk stored without its window part would count
    that block loaded with nothing in it: refused before anything changes."""
    s = windowed()
    _store_all(s, {0, 1, 2, 3})
    assert _second_turn(s) == (24, True)
    again = request("again", HASHES, extra_tokens=3)
    with pytest.raises(ValueError, match="chunk 3 is stored without its sliding-window part"):
        s.update_state_after_alloc(again, [*_blocks({0, 1, 2}), 16, 26], 24)
    assert s.tracker("again").load_job is None
    assert s.manager.entry(windowless_key(4)).ref_cnt == 0  # type: ignore[union-attr]


def test_a_hit_stops_where_its_last_window_lacks_a_window_part() -> None:
    s = windowed()
    _store_all(s, {4})
    # Ending at chunk 6 or 5 would need chunk 4's window part: the hit ends at chunk 4.
    assert _second_turn(s) == (16, True)


@given(st.sets(st.integers(0, len(HASHES) - 1)))
def test_the_hit_is_the_longest_whose_last_window_has_every_window_part(lost_window: set[int]) -> None:
    s = windowed()
    _store_all(s, lost_window)
    hit, _ = _second_turn(s)

    def servable(end: int) -> bool:
        return not lost_window & set(range(first_window_chunk(end, 4, 4, (WINDOW_TOKENS,)), end))

    expected = max(end for end in range(len(HASHES) + 1) if servable(end))
    assert hit == expected * 4, f"window parts lost in chunks {sorted(lost_window)}"
    assert check_invariants(s.snapshot()) == []


def test_window_groups_are_checked() -> None:
    with pytest.raises(ValueError, match="window_groups"):
        OffloadConfig(4, 1, 8, kv_groups=2, window_groups=((1, 8),))
    with pytest.raises(ValueError, match="window_groups"):
        OffloadConfig(4, 1, 8, kv_groups=2, null_block=NULL, window_groups=((2, 8),))


def test_a_windowless_chunk_behind_a_gpu_hit_inside_it_keeps_the_engines_own_window_blocks() -> None:
    """Behind a GPU prefix-cache hit ending inside a chunk stored without its window part, the
    positions the hit holds are the engine's own and never written: a real window block there is
    not refused (vLLM names its null block there; another engine need not)."""
    # Blocks of 8 tokens, chunks of 2 blocks, a window of 8 tokens: chunk c is blocks 2c and 2c + 1.
    s = OffloadingScheduler(
        OffloadConfig(8, 2, 16, "lru", kv_groups=2, null_block=NULL, window_groups=((WINDOW, WINDOW_TOKENS),))
    )
    hashes = list(range(1, 9))
    first = request("r", hashes, extra_tokens=1, block_size=8)
    s.get_num_new_matched_tokens(first, 0)
    lost = {0, 1, 2, 3, 4}  # chunks 0, 1 and 2 lose window blocks: stored windowless
    s.update_state_after_alloc(first, [b for i in range(8) for b in (10 + i, NULL if i in lost else 20 + i)], 0)
    s.build_connector_meta(SchedulerOutput({"r": first.num_tokens}))
    meta = s.build_connector_meta(SchedulerOutput({"r": 1}))
    s.update_connector_output(WorkerOutput({job.job_id: True for job in meta.stores}))
    # The GPU hit holds blocks 0..4 (40 tokens, inside chunk 2); the hit ends at chunk 4, whose
    # last window lies in chunk 3, stored whole.
    again = request("again", hashes, extra_tokens=3, block_size=8)
    assert s.get_num_new_matched_tokens(again, 40) == (24, True)
    held = [10, NULL, 11, NULL, 12, NULL, 13, NULL, 14, 24]
    s.update_state_after_alloc(again, [*held, 15, NULL, 16, NULL, 17, 27], 24)
    (load,) = s.build_connector_meta(SchedulerOutput({})).loads
    assert load.keys == (windowless_key(6), 8)
    assert load.gpu_block_ids == (NULL, NULL, 15, NULL, 16, NULL, 17, 27), "a block the GPU hit holds is a target"
