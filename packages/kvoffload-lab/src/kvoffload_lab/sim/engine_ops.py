"""vLLM's engine operations on one request and the GPU block pool, written once for both engine
models: the simulator's :class:`~kvoffload_lab.sim.engine.Engine`, which makes the engine's choices
at random, and the explorer's model (:mod:`kvoffload_lab.verify.explore_model`), which makes every
one. Each model keeps its own queues and calls the connector itself; what a request's blocks and
status become at a GPU hit, an admission, a preemption, a load, a finish and a release is decided
here, following :mod:`kvoffload_lab.sim.vllm_rules`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from kvoffload.offload.scheduler import OffloadingScheduler
from kvoffload_lab.sim import vllm_rules
from kvoffload_lab.sim.block_pool import BlockPool
from kvoffload_lab.sim.request import DONE, FINISHED, LOADING, RUNNING, WAITING, SimRequest


def gpu_hit(pool: BlockPool, request: SimRequest, scheduled: Callable[[int], int | None] | None = None) -> list[int]:
    """The GPU blocks of ``request``'s longest prefix the pool caches, leaving its last token to
    compute. ``scheduled(index)``: a block that holds the request's block ``index`` once this step's
    forward pass wrote it, for a model that caches a block only when it computes it (the explorer's)
    and must still let an admission hit it (cache at schedule)."""
    limit = vllm_rules.hit_limit_blocks(request.num_tokens, request.block_size)
    if scheduled is None:
        return pool.cached_prefix(request.block_hashes[:limit])
    hit: list[int] = []
    for index in range(limit):
        block = pool.cached.get(request.block_hashes[index])
        if block is None:
            block = scheduled(index)
        if block is None:
            break
        hit.append(block)
    return hit


def admit(
    pool: BlockPool, scheduler: OffloadingScheduler, request: SimRequest, hit: list[int], num_blocks: int,
    external_tokens: int,
) -> bool:
    """Admit ``request`` with its GPU hit ``hit`` (now shared) and fresh blocks up to ``num_blocks``,
    tell the connector (``update_state_after_alloc``) and start it: it waits for a load of
    ``external_tokens`` (delay_cache_blocks; 0: no load) or runs. False, holding nothing, when the
    pool has too few free blocks."""
    pool.touch(hit)
    fresh = pool.allocate(num_blocks - len(hit))
    if fresh is None:
        pool.free(hit)
        return False
    request.block_ids = hit + fresh
    scheduler.update_state_after_alloc(request, request.block_ids, external_tokens)
    hit_tokens = len(hit) * request.block_size
    request.local_hit_tokens = hit_tokens
    request.num_computed_tokens = hit_tokens
    if external_tokens:
        # Read only while the request loads, so the last load's count stays until the next load.
        request.external_tokens = external_tokens
        request.status = LOADING
    else:
        request.status = RUNNING
    return True


def cache_scheduled(pool: BlockPool, request: SimRequest, num_scheduled_tokens: int) -> list[int]:
    """Cache the blocks that ``num_scheduled_tokens`` scheduled after ``request``'s computed tokens
    fill (cache at schedule); returns them (the forward pass has not written them yet)."""
    blocks = []
    for index in vllm_rules.blocks_cached_when_scheduled(request, num_scheduled_tokens):
        block = request.block_ids[index]
        pool.register(block, request.block_hashes[index])
        blocks.append(block)
    return blocks


def complete_load(
    pool: BlockPool, request: SimRequest, holds: Callable[[int, int], bool] | None = None, *, cache: bool = True
) -> list[int]:
    """``request``'s load completed: it runs, and the blocks the load filled enter the prefix cache
    now (delay_cache_blocks; ``cache=False``: an engine without prefix caching). ``holds(block,
    block_hash)``: whether the block holds the bytes its hash names; one that does not is left
    uncached and returned."""
    wrong = []
    first = request.local_hit_tokens // request.block_size
    for index in range(first, first + request.external_tokens // request.block_size) if cache else ():
        block, block_hash = request.block_ids[index], request.block_hashes[index]
        if holds is None or holds(block, block_hash):
            pool.register(block, block_hash)
        else:
            wrong.append(block)
    vllm_rules.load_completed(request)
    return wrong


def reset_cache(
    pool: BlockPool, scheduler: OffloadingScheduler, requests: Mapping[str, SimRequest], *, prefix_cache: bool = True
) -> list[SimRequest]:
    """Between two steps: ``reset_prefix_cache`` (the pool forgets its free blocks' hashes;
    ``prefix_cache=False``: skipped) and the connector's ``reset_cache``, whose cancelled loads
    recompute from their GPU hit. Returns the requests of ``requests`` that now run again."""
    if prefix_cache:
        pool.reset()
    resumed = []
    for request_id in scheduler.reset_cache():
        request = requests.get(request_id)
        if request is not None and request.status == LOADING:
            vllm_rules.recompute_after_failed_load(request)
            resumed.append(request)
    return resumed


def free_blocks(pool: BlockPool, request: SimRequest) -> None:
    """Drop ``request``'s hold on its blocks (a block another request shares stays held; a freed one
    stays cached until the pool hands it out again); its GPU hit goes with them."""
    pool.free(request.block_ids)
    request.block_ids = []
    request.local_hit_tokens = 0


def preempt(pool: BlockPool, request: SimRequest) -> None:
    """``request`` is preempted: its blocks are freed and it waits to be admitted again from scratch."""
    free_blocks(pool, request)
    request.num_computed_tokens = 0
    request.status = WAITING


def finish(pool: BlockPool, request: SimRequest, hold: bool) -> None:
    """``request`` finished or was aborted; ``hold`` (``request_finished`` returned True): its blocks
    are held until the connector releases them (:func:`release`), else they are freed now."""
    if hold:
        request.status = FINISHED
    else:
        release(pool, request)


def release(pool: BlockPool, request: SimRequest) -> None:
    """The finished ``request``'s blocks are freed: it is done."""
    free_blocks(pool, request)
    request.status = DONE
