"""vLLM's engine rules are written once (kvoffload_lab.sim.vllm_rules) and both engine models follow them.

The proof is a mutant of the one rule: caching a block only once computed, instead of when its
tokens are scheduled, takes the same-step GPU hit away from the simulator and the explorer alike.
"""

from __future__ import annotations

import pytest

from kvoffload_lab.sim import vllm_rules
from kvoffload_lab.sim.engine import Engine, EngineConfig
from kvoffload_lab.sim.request import FINISHED, LOADING, RUNNING, SimRequest
from kvoffload_lab.statemachine.explore import explore
from kvoffload_lab.verify.bugzoo import MUTANTS, explore_model_for


def _cache_when_computed(request: SimRequest, num_scheduled_tokens: int) -> range:
    """The mutant: scheduling caches nothing; only the blocks already computed are cached."""
    computed = request.num_computed_tokens // request.block_size
    return range(computed, computed)


def _simulator_same_step_hits() -> int:
    """Two equal prompts admitted in one step: the second can only hit blocks the first is scheduled
    to compute in that step."""
    engine = Engine(EngineConfig(num_gpu_blocks=16, gpu_block_size=4, max_num_batched_tokens=64))
    prompt = list(range(1, 13))
    engine.add_request(prompt, max_tokens=2)
    engine.add_request(prompt, max_tokens=2)
    engine.step()
    return engine.stats.same_step_gpu_hits


def _explorer_sees_the_early_store() -> bool:
    """admit(r1), admit(r2) hitting the chunk r1 is scheduled to compute, step: the bug-zoo mutant
    that stores a GPU hit in its admission step reads a block nobody wrote yet."""
    # Breadth first, so the 3-step trace comes within the first 2,000 states.
    result = explore(explore_model_for(MUTANTS["store_gpu_hit_early"], 2, 2), max_states=2_000)
    return ("DataIntegrity", 3) in [(v.invariant, len(v.trace)) for v in result.violations]


def test_both_engines_hit_blocks_scheduled_in_the_same_step() -> None:
    assert _simulator_same_step_hits() == 1
    assert _explorer_sees_the_early_store()


def test_caching_when_computed_hides_the_same_step_hit_from_both_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm_rules, "blocks_cached_when_scheduled", _cache_when_computed)
    assert _simulator_same_step_hits() == 0
    assert not _explorer_sees_the_early_store()


@pytest.mark.parametrize(
    ("status", "computed", "cached"),
    [(RUNNING, 4, 2), (RUNNING, 10, 3), (FINISHED, 5, 1), (LOADING, 4, 0)],
)
def test_cached_blocks_follow_the_status(status: str, computed: int, cached: int) -> None:
    # Block size 4, 12 tokens: a running request scheduling 4 more tokens has the blocks they fill
    # cached too (up to its last full block); a loading request's blocks wait for the load.
    request = SimRequest("r", list(range(12)), 1, 4, num_computed_tokens=computed, status=status)
    assert vllm_rules.cached_blocks(request, 4) == cached
