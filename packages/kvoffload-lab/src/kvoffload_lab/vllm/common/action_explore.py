"""The explorer's model every connector folder subclasses, and the run that reports its verdict.

A model for the generic breadth-first explorer (:mod:`kvoffload_lab.statemachine.explore`): the state is
a whole harness, cloned for every successor, and how often each bounded action ran. The actions are
the folder's list (:mod:`.connector_actions`); a subclass says which arguments each may take in a
state (:meth:`ActionExploreModel.choices`: its requests and its bounds), builds the first harness,
clones one and fingerprints one. Each action reads in a counterexample as
:meth:`~.connector_actions.Action.describe` writes it. Breadth-first order makes the first violation
a shortest action sequence. With ``losses`` the search looks for lost blocks alone: the drain
reports them and nothing else.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Mapping
from typing import Any, ClassVar

from kvoffload.lifecycles.invariants import Violation
from kvoffload_lab.statemachine.explore import explore
from kvoffload_lab.vllm.common.connector_actions import ADD, FAIL_TRANSFER, RESET, Action
from kvoffload_lab.vllm.common.findings import CheckerVerdict, UnsupportedVllmApi
from kvoffload_lab.vllm.common.search import LOSS_PASS

# (the harness, how often each of the folder's actions ran: counted for the bounded ones only)
State = tuple[Any, tuple[int, ...]]
Move = tuple[Action, Mapping[str, Any]]
BOUNDED = (ADD, RESET, FAIL_TRANSFER)


class ActionExploreModel:
    """The explorer's model (see :mod:`kvoffload_lab.statemachine.explore` for the protocol)."""

    action_list: ClassVar[tuple[Action, ...]] = ()
    # The requests the search adds, in order, each with ``max_tokens`` tokens out.
    prompts: ClassVar[tuple[list[int], ...]] = ()
    max_tokens: ClassVar[int] = 1
    request_prefix: ClassVar[str] = "r"
    loss_invariant: ClassVar[str] = ""

    def __init__(self, losses: bool = False) -> None:
        self.losses = losses
        # kvoffload's harness failing in a step: the explorer reports what a step raises as a
        # violation, so it is kept here and raised once the search is over.
        self.unsupported: UnsupportedVllmApi | None = None

    def build(self) -> Any:
        raise NotImplementedError

    def clone(self, harness: Any) -> Any:
        raise NotImplementedError

    def choices(self, harness: Any, action: Action, used: int) -> list[dict[str, Any]]:
        """The arguments ``action`` may take in this state, having run ``used`` times: the next of
        ``prompts`` for an add, :meth:`other_choices` for the rest."""
        if action != ADD:
            return self.other_choices(harness, action, used)
        if used == len(self.prompts):
            return []
        return [{"request_id": f"{self.request_prefix}{used}", "prompt": self.prompts[used],
                 "max_tokens": self.max_tokens}]

    def other_choices(self, harness: Any, action: Action, used: int) -> list[dict[str, Any]]:
        raise NotImplementedError

    def harness_fingerprint(self, harness: Any) -> Hashable:
        raise NotImplementedError

    def close(self) -> list[Violation]:
        """Release what the harnesses hold once the search is over; what that found."""
        return []

    def initial(self) -> State:
        return self.build(), (0,) * len(self.action_list)

    def actions(self, state: State) -> list[Move]:
        harness, used = state
        if harness.failed and not self.losses:
            return []
        return [(action, args) for action, count in zip(self.action_list, used, strict=True)
                for args in self.choices(harness, action, count)]

    def action_name(self, move: Move) -> str:
        action, args = move
        return action.describe(args)

    def step(self, state: State, move: Move) -> State:
        harness, used = state
        harness = self.clone(harness)
        action, args = move
        try:
            action.apply(harness, args)
        except UnsupportedVllmApi as error:
            self.unsupported = self.unsupported or error
            raise
        if action in BOUNDED:
            index = self.action_list.index(action)
            used = (*used[:index], used[index] + 1, *used[index + 1:])
        return harness, used

    def invariants(self, state: State) -> list[tuple[str, str]]:
        return [] if self.losses else [(v.invariant, v.message) for v in state[0].findings[:1]]

    def is_final(self, state: State) -> bool:
        harness, used = state
        return used[self.action_list.index(ADD)] == len(self.prompts) and not harness.live_requests()

    def drain(self, state: State) -> list[tuple[str, str]]:
        harness = self.clone(state[0])
        harness.drain()
        if self.losses:
            return [(self.loss_invariant, loss) for loss in harness.losses[:1]]
        return [(v.invariant, v.message) for v in harness.findings[:1]]

    def fingerprint(self, state: State) -> Hashable:
        harness, used = state
        return used, bool(harness.findings), self.harness_fingerprint(harness)


def run_explorer(name: str, make_model: Callable[[bool], ActionExploreModel], max_depth: int, max_states: int,
                 details: dict[str, Any], passes: tuple[str, ...] = ("safety",)) -> CheckerVerdict:
    """Explore within the bounds; with the :data:`~.search.LOSS_PASS` in ``passes``, a second search
    for lost blocks alone. Each finding is a shortest one (a loss beside a violation in
    ``details["loss"]``); what closing the models found, after a clean search, is a violation too."""
    started = time.perf_counter()
    result = CheckerVerdict(name, "explore")
    for kind in passes:
        losses = kind == LOSS_PASS
        model = make_model(losses)
        try:
            outcome: Any = explore(model, max_depth=max_depth, max_states=max_states, drain="final", reduce=False)
        finally:
            shutdown = model.close()
        if model.unsupported is not None:
            raise model.unsupported
        if not result.details:
            result.details = {**details, "max_depth": max_depth, "states": outcome.states,
                              "transitions": outcome.transitions, "depth": outcome.depth,
                              "complete": outcome.complete}
        found = [(first.invariant, first.message,
                  [step.action + (f" -> raised {step.error}" if step.error else "") for step in first.trace])
                 for first in outcome.violations[:1]]
        found += [(v.invariant, v.message, ["harness.close()"]) for v in shutdown[:1] if not found]
        for invariant_name, message, trace in found:
            if result.result == "success":
                result.result = "loss" if losses else "violation"
                result.invariant, result.error, result.trace = invariant_name, message, trace
            else:
                result.details["loss"] = {"invariant": invariant_name, "error": message, "trace": trace}
    result.seconds = time.perf_counter() - started
    return result
