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
import time
from collections.abc import Hashable
from typing import Any

from kvoffload_lab.statemachine.explore import explore
from kvoffload_lab.vllm.check.findings import CheckerVerdict
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

# (harness, requests added, reset done, failure injected)
State = tuple[OwnHarness, int, bool, bool]
Action = tuple[str, str]


class OwnExploreModel:
    """The explorer's model (see :mod:`kvoffload_lab.statemachine.explore` for the protocol)."""

    def __init__(self, scheduling: str, mutant: str | None) -> None:
        self.config = OwnConfig(shape=OwnShape(block_size=BLOCK, gpu_blocks=5, cpu_chunks=3, max_batched_tokens=8,
                                               max_seqs=2),
                                delay=DELAY, async_scheduling=scheduling == "async", mutant=mutant)

    def initial(self) -> State:
        return OwnHarness(self.config), 0, False, False

    def actions(self, state: State) -> list[Action]:
        harness, added, reset, failed = state
        if harness.failed:
            return []
        found: list[Action] = []
        if added < REQUESTS:
            found.append(("add", f"r{added}"))
        if harness.busy:
            found.append(("step", ""))
        for rid in harness.live_requests():
            found += [("abort", rid), ("abort_mid_step", rid)]
        if not reset:
            found.append(("reset_prefix_cache", ""))
        if not failed:
            found.append(("fail_next_transfer", ""))
        return found

    def action_name(self, action: Action) -> str:
        kind, arg = action
        return f"{kind}({arg!r})" if arg else f"{kind}()"

    def step(self, state: State, action: Action) -> State:
        harness, added, reset, failed = state
        harness = _clone(harness)
        kind, arg = action
        if kind == "add":
            harness.add_request(arg, PROMPTS[added], MAX_TOKENS)
            added += 1
        elif kind == "step":
            harness.step()
        elif kind in ("abort", "abort_mid_step"):
            harness.abort(arg, mid_step=kind == "abort_mid_step")
        elif kind == "reset_prefix_cache":
            harness.reset_cache()
            reset = True
        else:
            harness.fail_next_transfer()
            failed = True
        return harness, added, reset, failed

    def invariants(self, state: State) -> list[tuple[str, str]]:
        return [(v.invariant, v.message) for v in state[0].findings[:1]]

    def is_final(self, state: State) -> bool:
        harness, added, _, _ = state
        return added == REQUESTS and not harness.live_requests()

    def drain(self, state: State) -> list[tuple[str, str]]:
        harness = _clone(state[0])
        harness.drain()
        return [(v.invariant, v.message) for v in harness.findings[:1]]

    def fingerprint(self, state: State) -> Hashable:
        harness, added, reset, failed = state
        return added, reset, failed, bool(harness.findings), fingerprint(harness)


def _clone(harness: OwnHarness) -> OwnHarness:
    """A deep copy that shares the ``VllmConfig``, which nothing changes once the scheduler is built."""
    return copy.deepcopy(harness, {id(harness.vllm_config): harness.vllm_config})


def run_explorer(scheduling: str, mutant: str | None = None, max_states: int = MAX_STATES) -> CheckerVerdict:
    """Explore within the bounds (at most ``max_states`` states); a violation found is a shortest one."""
    started = time.perf_counter()
    result = CheckerVerdict(scheduling, "explore")
    outcome: Any = explore(OwnExploreModel(scheduling, mutant), max_depth=MAX_DEPTH, max_states=max_states,
                           drain="final", reduce=False)
    result.details = {"requests": REQUESTS, "max_depth": MAX_DEPTH, "states": outcome.states,
                      "transitions": outcome.transitions, "depth": outcome.depth, "complete": outcome.complete}
    if outcome.violations:
        first = outcome.violations[0]
        result.result, result.invariant, result.error = "violation", first.invariant, first.message
        result.trace = [step.action + (f" -> raised {step.error}" if step.error else "") for step in first.trace]
    result.seconds = time.perf_counter() - started
    return result
