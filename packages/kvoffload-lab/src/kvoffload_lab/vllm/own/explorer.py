"""The explorer's checker: every interleaving of engine events within bounds, through vLLM's
scheduler and ``KVOffloadConnector``.

A model for the generic breadth-first explorer (:mod:`kvoffload_lab.statemachine.explore`): the state is
a whole :class:`~kvoffload_lab.vllm.own.harness.OwnHarness`, cloned with ``copy.deepcopy`` for every
successor. Actions: add one of two requests (the second continues the first's prompt), step the
engine while it has work, abort a live request between steps or inside the next step (just before
its output is processed), one ``reset_prefix_cache(reset_connector=True)`` and one failed transfer.
Copies complete two polls after submission. Breadth-first order makes the first violation a
shortest action sequence.
"""

from __future__ import annotations

import copy
from collections.abc import Hashable
from typing import Any

from kvoffload_lab.vllm.common.action_explore import ActionExploreModel
from kvoffload_lab.vllm.common.action_explore import run_explorer as run_action_explorer
from kvoffload_lab.vllm.common.connector_actions import ABORT, STEP, Action
from kvoffload_lab.vllm.common.findings import CheckerVerdict
from kvoffload_lab.vllm.own.actions import ACTIONS
from kvoffload_lab.vllm.own.build import OwnShape
from kvoffload_lab.vllm.own.harness import OwnConfig, OwnHarness, fingerprint

REQUESTS = 2
MAX_DEPTH = 10
MAX_STATES = 1_500
BLOCK = 4
# Request 0: one block and three tokens, two tokens out; request 1 shares its first block.
PROMPTS = ([1] * BLOCK + [2] * (BLOCK - 1), [1] * BLOCK + [3] * BLOCK)
MAX_TOKENS = 2
DELAY = 2

class OwnExploreModel(ActionExploreModel):
    """The explorer's model (see :mod:`kvoffload_lab.vllm.common.action_explore`)."""

    action_list = ACTIONS
    prompts = PROMPTS
    max_tokens = MAX_TOKENS

    def __init__(self, scheduling: str, mutant: str | None) -> None:
        super().__init__()
        self.config = OwnConfig(shape=OwnShape(block_size=BLOCK, gpu_blocks=5, cpu_chunks=3, max_batched_tokens=8,
                                               max_seqs=2),
                                delay=DELAY, async_scheduling=scheduling == "async", mutant=mutant)

    def build(self) -> OwnHarness:
        return OwnHarness(self.config)

    def clone(self, harness: OwnHarness) -> OwnHarness:
        """A deep copy that shares the ``VllmConfig``, which nothing changes once the scheduler is built."""
        return copy.deepcopy(harness, {id(harness.vllm_config): harness.vllm_config})

    def other_choices(self, harness: OwnHarness, action: Action, used: int) -> list[dict[str, Any]]:
        if action == STEP:
            return [{}] if harness.busy else []
        if action == ABORT:
            return [args for rid in harness.live_requests() for args in ({"request_id": rid},
                                                                         {"request_id": rid, "mid_step": True})]
        # One reset and one failed transfer.
        return [{}] if not used else []

    def harness_fingerprint(self, harness: OwnHarness) -> Hashable:
        return fingerprint(harness)


def run_explorer(scheduling: str, mutant: str | None = None, max_states: int = MAX_STATES) -> CheckerVerdict:
    """Explore within the bounds (at most ``max_states`` states); a violation found is a shortest one."""
    return run_action_explorer(scheduling, lambda losses: OwnExploreModel(scheduling, mutant), MAX_DEPTH, max_states,
                               {"requests": REQUESTS})
