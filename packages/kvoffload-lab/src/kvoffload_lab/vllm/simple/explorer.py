"""The explorer's checker: every interleaving of engine events within bounds, through vLLM's
scheduler and ``SimpleCPUOffloadConnector``.

A model for the generic breadth-first explorer (:mod:`kvoffload_lab.statemachine.explore`): the state is
a whole :class:`~kvoffload_lab.vllm.simple.harness.SimpleHarness` (vLLM's scheduler and connector, the
digest model, vLLM's worker), cloned with ``copy.deepcopy`` for every successor. Actions: add one of
the requests (the second continues the first's prompt; each completes its last full block in its
final step), step the engine while it has work, abort a live request, and one
``reset_prefix_cache(reset_connector=True)``. Copies complete three polls after launch. Breadth-first
order makes the first violation a shortest action sequence. A first search looks for safety
violations; a second, for lost blocks alone.
"""

from __future__ import annotations

import copy
from collections.abc import Hashable
from typing import Any

from kvoffload_lab.vllm.common.action_explore import ActionExploreModel
from kvoffload_lab.vllm.common.action_explore import run_explorer as run_action_explorer
from kvoffload_lab.vllm.common.connector_actions import ABORT, STEP, Action
from kvoffload_lab.vllm.common.findings import CheckerVerdict
from kvoffload_lab.vllm.common.search import LOSS_PASS
from kvoffload_lab.vllm.simple.actions import ACTIONS
from kvoffload_lab.vllm.simple.build import SimpleShape
from kvoffload_lab.vllm.simple.compat import SimpleReads
from kvoffload_lab.vllm.simple.harness import LOSS, SimpleConfig, SimpleHarness

REQUESTS = 2
MAX_DEPTH = 14
MAX_STATES = 2_500
MAX_RESETS = 1
BLOCK = 4
# Request 0: one block and three tokens, two tokens out: its second block fills in its last step.
PROMPTS = ([1] * BLOCK + [2] * (BLOCK - 1), [1] * BLOCK + [2] * (BLOCK - 1) + [3] * BLOCK)
MAX_TOKENS = 2
# Polls a copy takes: three, so that a store launched in a request's last steps outlives it.
DELAY = 3

class SimpleExploreModel(ActionExploreModel):
    """The explorer's model (see :mod:`kvoffload_lab.vllm.common.action_explore`); with ``losses`` the
    drain reports lost blocks and nothing else."""

    action_list = ACTIONS
    prompts = PROMPTS
    max_tokens = MAX_TOKENS
    loss_invariant = LOSS

    def __init__(self, mode: str, reads: SimpleReads, losses: bool) -> None:
        super().__init__(losses)
        self.lazy = mode == "lazy"
        self.reads = reads

    def build(self) -> SimpleHarness:
        shape = SimpleShape(block_size=BLOCK, gpu_blocks=6, cpu_blocks=4 if self.lazy else 8, max_batched_tokens=8,
                            max_seqs=2, lazy=self.lazy)
        return SimpleHarness(SimpleConfig(shape=shape, delay=DELAY), self.reads)

    def clone(self, harness: SimpleHarness) -> SimpleHarness:
        return _clone(harness)

    def other_choices(self, harness: SimpleHarness, action: Action, used: int) -> list[dict[str, Any]]:
        if action == STEP:
            return ([{"after_finding": True}] if self.losses else [{}]) if harness.busy else []
        if action == ABORT:
            return [{"request_id": rid} for rid in harness.live_requests()]
        return [{}] if used < MAX_RESETS else []

    def harness_fingerprint(self, harness: SimpleHarness) -> Hashable:
        return self.reads.fingerprint(harness)


def _clone(harness: SimpleHarness) -> SimpleHarness:
    """A deep copy that shares the ``VllmConfig``, which nothing changes once the scheduler is built."""
    return copy.deepcopy(harness, {id(harness.vllm_config): harness.vllm_config})


def run_explorer(mode: str, reads: SimpleReads) -> CheckerVerdict:
    """Explore within the bounds for a safety violation, then for a loss; each found is a shortest one."""
    return run_action_explorer(mode, lambda losses: SimpleExploreModel(mode, reads, losses), MAX_DEPTH, MAX_STATES,
                               {"requests": REQUESTS}, passes=("safety", LOSS_PASS))
