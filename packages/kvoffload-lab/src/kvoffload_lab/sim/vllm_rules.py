"""vLLM's scheduling and caching rules, written once for both engine models: the simulator's
:class:`~kvoffload_lab.sim.engine.Engine` (driven at random) and the explorer's model
(:mod:`kvoffload_lab.verify.explore_model`, driven through every choice). Both keep a request's engine
state in one :class:`~kvoffload_lab.sim.request.SimRequest`.

- **Cache at schedule.** A full block enters the GPU prefix cache when its tokens are scheduled,
  not when the forward pass has written it. A request admitted behind another in the same
  ``schedule()`` call can therefore hit blocks that only this step's forward pass writes, after the
  worker ran the step's stores (the same-step hit). Draft tokens are never cached.
- **delay_cache_blocks.** Blocks an async load fills enter the cache only once the load completed.
- **The last token is computed.** A prefix hit leaves at least one token of the request to compute.
- **No admission in a step that preempted**, so a preempted request is never admitted again before
  the connector heard about its preemption (the next ``SchedulerOutput`` reports it). Both engine
  models keep it: the explorer offers ``step(preempt r)`` only when nothing was admitted since the
  last step.
- **A finished request's blocks are held** until the connector releases them, when
  ``request_finished`` returned True.
- **Freed blocks stay cached** until allocated again (oldest freed first) or forgotten by
  ``reset_prefix_cache``: both engine models keep their GPU blocks in one
  :class:`~kvoffload_lab.sim.block_pool.BlockPool`.
- **A failed or cancelled load recomputes** from the GPU hit, keeping its blocks.
- **Resets come between steps**: the engine core handles ``reset_prefix_cache`` as a client
  request between two ``schedule()`` calls.
"""

from __future__ import annotations

from kvoffload_lab.sim.request import FINISHED, RUNNING, SimRequest


def hit_limit_blocks(num_tokens: int, block_size: int) -> int:
    """The most blocks a prefix-cache hit may cover: the request's last token is always computed."""
    return (num_tokens - 1) // block_size


def blocks_cached_when_scheduled(request: SimRequest, num_scheduled_tokens: int) -> range:
    """The indices of ``request``'s blocks that ``num_scheduled_tokens`` scheduled after its computed
    tokens fill, which the prefix cache holds from now on (cache at schedule); drafts past the
    request's tokens are not cached."""
    size = request.block_size
    end = min(request.num_computed_tokens + num_scheduled_tokens, request.num_tokens)
    return range(request.num_computed_tokens // size, end // size)


def cached_blocks(request: SimRequest, num_scheduled_tokens: int) -> int:
    """How many of ``request``'s leading blocks the GPU prefix cache holds through the request
    itself: a running request's computed blocks and those its scheduled tokens fill (cache at
    schedule), a finished one's computed blocks while it holds them; none of a loading request's
    (delay_cache_blocks) and none of a waiting one's (it holds no blocks)."""
    if request.status == RUNNING:
        return blocks_cached_when_scheduled(request, num_scheduled_tokens).stop
    if request.status == FINISHED:
        return request.num_computed_tokens // request.block_size
    return 0


def load_completed(request: SimRequest) -> None:
    """``request``'s load completed: its GPU hit and the loaded tokens are computed; it runs."""
    request.num_computed_tokens = request.local_hit_tokens + request.external_tokens
    request.status = RUNNING


def recompute_after_failed_load(request: SimRequest) -> None:
    """``request``'s load failed or was cancelled: the loaded blocks hold garbage, so it runs again
    from its GPU hit, keeping its blocks, and recomputes the rest."""
    request.num_computed_tokens = request.local_hit_tokens
    request.status = RUNNING
