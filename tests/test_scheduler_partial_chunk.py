"""A lookup behind a GPU prefix-cache hit that ends inside a chunk (issue 38 item 4).

The hit covers the rest of the first chunk and the following whole chunks; the load job names the
engine's null block at every position the engine's prefix cache already holds, so the worker writes
only the blocks the engine does not hold (those it holds may be shared with other running requests).
The bytes go through a real worker and mover: the blocks the engine holds carry a sentinel that a
load writing them would replace.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kvoffload.dataplane.mover import BlockMover
from kvoffload.dataplane.worker import OffloadingWorker
from kvoffload.lifecycles import check_invariants
from kvoffload.offload import OffloadConfig, OffloadingScheduler, SchedulerOutput, WorkerOutput
from kvoffload.offload.manager import CPUOffloadingManager
from kvoffload.offload.types import ConnectorMetadata, EngineRequest, OffloadKey
from support import FakeRequest

NULL = 0
BLOCK_TOKENS = 4
GPU_BLOCKS = 64
SENTINEL = -1.0


class NullBlockRig:
    """One scheduler with a null block, its worker on a one-layer mover, and a GPU block allocator."""

    def __init__(self, blocks_per_chunk: int, groups: int, scheduler: type[OffloadingScheduler]) -> None:
        config = OffloadConfig(BLOCK_TOKENS, blocks_per_chunk, 16, "lru", kv_groups=groups, null_block=NULL)
        self.scheduler = scheduler(config)
        self.groups = groups
        self.layer = torch.arange(GPU_BLOCKS * 2, dtype=torch.float32).reshape(GPU_BLOCKS, 2)
        mover = BlockMover([self.layer], 16 * config.gpu_blocks_per_chunk, cpu_kernel=False)
        self.worker = OffloadingWorker(mover, config.gpu_blocks_per_chunk, null_block=NULL)
        self._next_block = 1  # block 0 is the null block

    def allocate(self, engine_blocks: int) -> list[int]:
        """Fresh GPU blocks: every group's block of ``engine_blocks`` engine blocks."""
        first = self._next_block
        self._next_block += engine_blocks * self.groups
        return list(range(first, self._next_block))

    def run(self, scheduled: dict[str, int]) -> ConnectorMetadata:
        """One step: the metadata, run by the worker, whose outcomes go back to the scheduler."""
        meta = self.scheduler.build_connector_meta(SchedulerOutput(scheduled))
        outcome = self.worker.execute(meta)
        self.scheduler.update_connector_output(WorkerOutput(outcome.completed))
        return meta

    def store_prompt(self, prompt: FakeRequest) -> list[int]:
        """Compute and store ``prompt`` (its whole blocks) through a request that then finishes."""
        s = self.scheduler
        blocks = self.allocate(prompt.num_tokens // BLOCK_TOKENS + 1)
        assert s.get_num_new_matched_tokens(prompt, 0) == (0, False)
        s.update_state_after_alloc(prompt, blocks, 0)
        self.run({prompt.request_id: prompt.num_tokens})
        s.request_finished(prompt, blocks)
        self.run({})
        assert s.trackers == {}, "the stores drained"
        return blocks


def _request(request_id: str, hashes: list[int]) -> FakeRequest:
    return FakeRequest(request_id, hashes, len(hashes) * BLOCK_TOKENS + 1)


def _admit_behind_gpu_hit(
    engine: NullBlockRig, stored_chunks: int, held_blocks: int
) -> tuple[FakeRequest, list[int], int, int]:
    """Store ``stored_chunks`` chunks, then admit a longer request whose first ``held_blocks``
    engine blocks the engine's prefix cache holds (the stored prompt's own GPU blocks, carrying
    the sentinel). Returns the request, its GPU blocks, the lookup's tokens and the GPU hit's tokens."""
    per_chunk = engine.scheduler.config.blocks_per_chunk
    hashes = list(range(100, 100 + stored_chunks * per_chunk))
    prompt_blocks = engine.store_prompt(_request("first", hashes))
    held = prompt_blocks[: held_blocks * engine.groups]
    engine.layer[held] = SENTINEL
    second = _request("second", hashes + list(range(200, 200 + per_chunk)))
    blocks = held + engine.allocate(second.num_tokens // BLOCK_TOKENS + 1 - held_blocks)
    local = held_blocks * BLOCK_TOKENS
    external, is_async = engine.scheduler.get_num_new_matched_tokens(second, local)
    assert external is not None and is_async == (external > 0)
    engine.scheduler.update_state_after_alloc(second, blocks, external)
    return second, blocks, external, local


chunk_shapes = st.integers(2, 4).flatmap(
    lambda per_chunk: st.tuples(st.just(per_chunk), st.integers(1, 2), st.integers(1, 3)).flatmap(
        lambda shape: st.tuples(st.just(shape), st.integers(1, shape[0] * shape[2] - 1))
    )
)


def _check_partial_load(scheduler: type[OffloadingScheduler], shape: tuple[int, int, int], held_blocks: int) -> None:
    per_chunk, groups, stored_chunks = shape
    engine = NullBlockRig(per_chunk, groups, scheduler)
    stored = engine.layer.clone()
    second, blocks, external, local = _admit_behind_gpu_hit(engine, stored_chunks, held_blocks)
    chunk_tokens = per_chunk * BLOCK_TOKENS
    # The rest of the first chunk and the whole chunks after it, up to what the tier holds.
    assert external == stored_chunks * chunk_tokens - local, "the lookup counts tokens the engine holds"
    (load,) = engine.run({}).loads
    held, end = held_blocks * groups, stored_chunks * per_chunk * groups
    # Positions of the held blocks in the load's first chunk.
    held_positions = held - held_blocks // per_chunk * per_chunk * groups
    assert not set(load.gpu_block_ids) & set(blocks[:held]), "a block below the GPU hit is a load target"
    assert bool((engine.layer[blocks[:held]] == SENTINEL).all()), "a GPU-held block was written"
    assert load.gpu_block_ids[:held_positions] == (NULL,) * held_positions
    assert load.gpu_block_ids[held_positions:] == tuple(blocks[held:end])
    assert engine.scheduler.trackers["second"].state == "running"
    loaded = blocks[held:end]
    first_turn = list(range(1 + held, 1 + end))
    assert torch.equal(engine.layer[loaded], stored[first_turn]), "the load did not bring the stored KV"
    # The request runs on: its next chunk is stored, and nothing is left behind.
    engine.run({"second": second.num_tokens - stored_chunks * chunk_tokens})
    engine.scheduler.request_finished(second, blocks)
    engine.run({})
    assert check_invariants(engine.scheduler.snapshot()) == []
    assert engine.scheduler.leaks() == [] and engine.scheduler.manager.leaks() == []


@settings(max_examples=60, deadline=None)
@given(chunk_shapes)
def test_a_load_behind_a_gpu_hit_inside_a_chunk_writes_only_the_blocks_the_engine_lacks(
    case: tuple[tuple[int, int, int], int],
) -> None:
    shape, held_blocks = case
    _check_partial_load(OffloadingScheduler, shape, held_blocks)


@pytest.mark.parametrize("held_blocks", [1, 2, 3])
def test_every_offset_inside_a_chunk_of_four_blocks_with_two_groups(held_blocks: int) -> None:
    _check_partial_load(OffloadingScheduler, (4, 2, 2), held_blocks)


class WholeFirstChunkLoad(OffloadingScheduler):
    """Mutant: the load writes the whole first chunk, the blocks the engine's prefix cache holds too."""

    def _load_targets(self, block_ids: Sequence[int], start: int, end: int, local: int) -> tuple[int, ...]:
        return tuple(block_ids[start * self.config.gpu_blocks_per_chunk : end])


class GpuHeldPartCountedAsLoaded(OffloadingScheduler):
    """Mutant: the lookup reports the first chunk's GPU-held tokens as loaded too (whole chunks
    from the chunk's start), and the admission takes them back before loading."""

    def get_num_new_matched_tokens(self, request: EngineRequest, num_computed_tokens: int) -> tuple[int | None, bool]:
        tokens, is_async = super().get_num_new_matched_tokens(request, num_computed_tokens)
        return (tokens + num_computed_tokens % self.config.chunk_tokens if tokens else tokens), is_async

    def update_state_after_alloc(
        self, request: EngineRequest, block_ids: Sequence[int], num_external_tokens: int
    ) -> None:
        local = self.tracker(request.request_id).local_computed_tokens
        held = local % self.config.chunk_tokens if num_external_tokens else 0
        super().update_state_after_alloc(request, block_ids, num_external_tokens - held)


@pytest.mark.parametrize(
    ("mutant", "caught"),
    [
        (WholeFirstChunkLoad, "a block below the GPU hit is a load target"),
        (GpuHeldPartCountedAsLoaded, "the lookup counts tokens the engine holds"),
    ],
)
def test_the_mutants_are_caught(mutant: type[OffloadingScheduler], caught: str) -> None:
    with pytest.raises(AssertionError, match=caught):
        _check_partial_load(mutant, (2, 1, 2), 1)
    _check_partial_load(OffloadingScheduler, (2, 1, 2), 1)


class PromotingOnceManager(CPUOffloadingManager):
    """Answers the second request's first lookup None, as a tiering manager promoting its chunks."""

    promoting = True

    def lookup(self, request_id: str, keys: Sequence[OffloadKey]) -> int | None:
        if request_id == "second" and self.promoting:
            self.promoting = False
            return None
        return super().lookup(request_id, keys)


class PromotingOnceScheduler(OffloadingScheduler):
    def __init__(self, config: OffloadConfig) -> None:
        super().__init__(config, PromotingOnceManager(config.num_cpu_blocks, config.policy))


def test_a_lookup_inside_a_chunk_that_a_tier_defers_offers_the_load_when_asked_again() -> None:
    engine = NullBlockRig(2, 1, PromotingOnceScheduler)
    s = engine.scheduler
    hashes = [100, 101, 102, 103]
    engine.store_prompt(_request("first", hashes))
    second = _request("second", [*hashes, 200, 201])
    assert s.get_num_new_matched_tokens(second, BLOCK_TOKENS) == (None, False)
    assert s.trackers["second"].state == "waiting" and s.stats.deferred_lookups == 1
    # Asked again next step: the rest of the first chunk (one block) and the second chunk.
    assert s.get_num_new_matched_tokens(second, BLOCK_TOKENS) == (3 * BLOCK_TOKENS, True)


def test_an_offer_capped_by_the_engine_still_ends_on_a_chunk_boundary() -> None:
    engine = NullBlockRig(2, 1, OffloadingScheduler)
    s = engine.scheduler
    hashes = [100, 101, 102, 103, 104, 105]
    engine.store_prompt(_request("first", hashes))
    second = _request("second", [*hashes, 200, 201])
    assert s.get_num_new_matched_tokens(second, BLOCK_TOKENS) == (5 * BLOCK_TOKENS, True)
    # A cap of 4 blocks behind the 1-block hit: the rest of the first chunk and one whole chunk.
    capped = s.offer_within(BLOCK_TOKENS, 4 * BLOCK_TOKENS)
    assert capped == 3 * BLOCK_TOKENS
    assert s.offer_within(BLOCK_TOKENS, 0) == 0
    s.update_state_after_alloc(second, engine.allocate(len(hashes) + 3), capped)
    (load,) = engine.run({}).loads
    assert load.gpu_block_ids[0] == NULL and len(load.keys) == 2
