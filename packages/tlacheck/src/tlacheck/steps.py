"""Predicates of a step, the state and its successor, evaluated once per distinct step.

The action properties of a model (``[][A]_v`` in a PROPERTY) and the ``<>[][A]_v`` conjuncts of
its SPECIFICATION (which steps a liveness counterexample's cycle may take) are functions of the
step alone, so a successor that the next-state relation generates again from the same state is
not evaluated again. TLC evaluates them on every generated successor: BufferedRandomAccessFile's
``\\A data \\in Array(...) : WriteAtMost(data) => ...`` generates most successors many times over
(writes past the buffer's end differ only in bytes that are not written), and MCCRDT's
``<>[][\\E n, o \\in Node : Gossip(n, o)]_vars`` is tried on each of some 30 successors a state.
Predicates with side effects (``Print``) are evaluated on every generated successor, as TLC does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from .syntax import Ctx, Fun
from .values import Value

State = tuple[Value, ...]
Outcome = TypeVar("Outcome")


class StepOutcomes(Generic[Outcome]):
    """``evaluate`` of each step from the state being expanded, remembered per successor."""

    __slots__ = ("again", "evaluate", "outcomes", "state")

    def __init__(self, evaluate: Callable[[Ctx], Outcome], side_effects: bool) -> None:
        self.evaluate = evaluate
        self.again = side_effects
        self.state: Any = None
        self.outcomes: dict[State, Outcome] = {}

    def of(self, s: State, c: Ctx, t: State) -> Outcome:
        """``evaluate(c)`` for the step from ``s`` to ``t`` (``c.s`` and ``c.n``)."""
        if self.again:
            return self.evaluate(c)
        if self.state is not s:
            self.state, self.outcomes = s, {}
        outcomes = self.outcomes
        if t in outcomes:
            return outcomes[t]
        outcome = outcomes[t] = self.evaluate(c)
        return outcome


def first_violated(actions: list[tuple[str, Fun, dict[str, Value]]]) -> Callable[[Ctx], str | None]:
    """The name of the first of the action properties ``actions`` that a step violates, or None."""
    def evaluate(c: Ctx) -> str | None:
        for name, fn, env in actions:
            if fn(c, env) is not True:
                return name
        return None

    return evaluate


def all_hold(actions: list[tuple[Fun, dict[str, Value]]]) -> Callable[[Ctx], bool]:
    """Whether a step satisfies every one of ``actions``."""
    def evaluate(c: Ctx) -> bool:
        return all(fn(c, env) is True for fn, env in actions)

    return evaluate
