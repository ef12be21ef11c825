"""The action properties of a model (``[][A]_v`` in a PROPERTY), checked on each step.

Their value is a function of the step alone, the state and its successor, so a successor that
the next-state relation generates again from the same state is not evaluated again: TLC
evaluates them on every generated successor, and BufferedRandomAccessFile's
``\\A data \\in Array(...) : WriteAtMost(data) => ...`` generates most of its successors many
times over (writes past the buffer's end differ only in bytes that are not written). Properties
with side effects (``Print``) are evaluated on every generated successor, as TLC does.
"""

from __future__ import annotations

from typing import Any

from .syntax import Ctx, Fun
from .values import Value

State = tuple[Value, ...]


class ImpliedActions:
    """The action properties, with the outcome of each step of the state being expanded."""

    __slots__ = ("actions", "again", "outcomes", "state")

    def __init__(self, actions: list[tuple[str, Fun, dict[str, Value]]], side_effects: bool) -> None:
        self.actions = actions
        self.again = side_effects
        self.state: Any = None
        # Per successor of ``state`` checked so far: the property it violates (None: none).
        self.outcomes: dict[State, str | None] = {}

    def __bool__(self) -> bool:
        return bool(self.actions)

    def violated(self, s: State, c: Ctx, t: State) -> str | None:
        """The first action property that the step from ``s`` to ``t`` (``c.s`` and ``c.n``)
        violates, or None."""
        if self.again:
            return self.first_violated(c)
        if self.state is not s:
            self.state, self.outcomes = s, {}
        outcomes = self.outcomes
        if t in outcomes:
            return outcomes[t]
        name = outcomes[t] = self.first_violated(c)
        return name

    def first_violated(self, c: Ctx) -> str | None:
        for name, fn, env in self.actions:
            if fn(c, env) is not True:
                return name
        return None
