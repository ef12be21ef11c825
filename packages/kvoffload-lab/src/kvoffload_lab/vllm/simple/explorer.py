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
import time
from collections.abc import Hashable
from typing import Any

from kvoffload_lab.statemachine.explore import explore
from kvoffload_lab.vllm.check.findings import CheckerVerdict, UnsupportedVllmApi
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

State = tuple[SimpleHarness, int, int]


class SimpleExploreModel:
    """The explorer's model (see :mod:`kvoffload_lab.statemachine.explore` for the protocol); with
    ``losses`` the drain reports lost blocks and nothing else."""

    def __init__(self, mode: str, reads: SimpleReads, losses: bool) -> None:
        self.lazy = mode == "lazy"
        self.reads = reads
        self.losses = losses
        # kvoffload's harness failing in a step: the explorer reports what a step raises as a
        # violation, so it is kept here and raised once the search is over.
        self.unsupported: UnsupportedVllmApi | None = None

    def initial(self) -> State:
        shape = SimpleShape(block_size=BLOCK, gpu_blocks=6, cpu_blocks=4 if self.lazy else 8, max_batched_tokens=8,
                            max_seqs=2, lazy=self.lazy)
        return SimpleHarness(SimpleConfig(shape=shape, delay=DELAY), self.reads), 0, 0

    def actions(self, state: State) -> list[tuple[str, str]]:
        harness, added, resets = state
        if harness.failed and not self.losses:
            return []
        found: list[tuple[str, str]] = []
        if added < REQUESTS:
            found.append(("add", f"r{added}"))
        if harness.busy:
            found.append(("step", ""))
        found += [("abort", rid) for rid in harness.live_requests()]
        if resets < MAX_RESETS:
            found.append(("reset_prefix_cache", ""))
        return found

    def action_name(self, action: tuple[str, str]) -> str:
        kind, arg = action
        return f"{kind}({arg!r})" if arg else f"{kind}()"

    def step(self, state: State, action: tuple[str, str]) -> State:
        harness, added, resets = state
        harness = _clone(harness)
        kind, arg = action
        try:
            if kind == "add":
                harness.add_request(arg, PROMPTS[added], MAX_TOKENS)
                added += 1
            elif kind == "step":
                harness.step(after_finding=self.losses)
            elif kind == "abort":
                harness.abort(arg)
            else:
                harness.reset_cache()
                resets += 1
        except UnsupportedVllmApi as error:
            self.unsupported = self.unsupported or error
            raise
        return harness, added, resets

    def invariants(self, state: State) -> list[tuple[str, str]]:
        return [] if self.losses else [(v.invariant, v.message) for v in state[0].findings[:1]]

    def is_final(self, state: State) -> bool:
        harness, added, _ = state
        return added == REQUESTS and not harness.live_requests()

    def drain(self, state: State) -> list[tuple[str, str]]:
        harness = _clone(state[0])
        harness.drain()
        if self.losses:
            return [(LOSS, loss) for loss in harness.losses[:1]]
        return [(v.invariant, v.message) for v in harness.findings[:1]]

    def fingerprint(self, state: State) -> Hashable:
        harness, added, resets = state
        return added, resets, bool(harness.findings), self.reads.fingerprint(harness)


def _clone(harness: SimpleHarness) -> SimpleHarness:
    """A deep copy that shares the ``VllmConfig``, which nothing changes once the scheduler is built."""
    return copy.deepcopy(harness, {id(harness.vllm_config): harness.vllm_config})


def _search(mode: str, reads: SimpleReads, losses: bool) -> Any:
    model = SimpleExploreModel(mode, reads, losses)
    outcome = explore(model, max_depth=MAX_DEPTH, max_states=MAX_STATES, drain="final", reduce=False)
    if model.unsupported is not None:
        raise model.unsupported
    return outcome


def run_explorer(mode: str, reads: SimpleReads) -> CheckerVerdict:
    """Explore within the bounds for a safety violation, then for a loss; each found is a shortest one."""
    started = time.perf_counter()
    result = CheckerVerdict(mode, "explore")
    for losses in (False, True):
        outcome = _search(mode, reads, losses)
        if not losses:
            result.details = {"requests": REQUESTS, "max_depth": MAX_DEPTH, "states": outcome.states,
                              "transitions": outcome.transitions, "depth": outcome.depth,
                              "complete": outcome.complete}
        if not outcome.violations:
            continue
        first = outcome.violations[0]
        trace = [step.action + (f" -> raised {step.error}" if step.error else "") for step in first.trace]
        if result.result == "success":
            result.result = "loss" if losses else "violation"
            result.invariant, result.error, result.trace = first.invariant, first.message, trace
        else:
            result.details["loss"] = {"invariant": first.invariant, "error": first.message, "trace": trace}
    result.seconds = time.perf_counter() - started
    return result
