"""Declarations: a lifecycle as immutable data (states, triggers, sources, destinations, guards).

Rules a declaration must satisfy, checked when it is built so that a mistake is reported where it
was written, with what to write instead:

- every state named by a transition is declared, and the initial state is declared;
- a (source state, trigger) pair has at most one transition: the lifecycle is deterministic, so
  the runtime, the explorer and the TLA+ mirror agree on what a trigger does;
- terminal states have no outgoing transition;
- guards are names; each is declared once as a :class:`GuardDecl`: what it means, and the same
  condition as a predicate over one recorded variable (``jobs_in_flight == 0``). The code that
  fires triggers implements the guard (the runtime calls its callable); trace checkers evaluate
  the predicate on the variables a trace line recorded, so a guard is checked the same way in the
  Python replay and in the generated TLA+ module.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast


class DeclarationError(ValueError):
    """A declaration that cannot describe a deterministic lifecycle."""


GuardOp = Literal["==", "!=", "<", "<=", ">", ">="]

_OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}


@dataclass(frozen=True)
class GuardDecl:
    """A guard: what it means, and the same condition as ``variable op value`` over the variables a
    trace line records (``variable=None``: a guard no trace can check)."""

    meaning: str
    variable: str | None = None
    op: GuardOp = "=="
    value: int | str | bool | None = 0

    def __post_init__(self) -> None:
        if self.op not in _OPERATORS:
            raise DeclarationError(f"guard {self.meaning!r}: operator {self.op!r} is not one of {sorted(_OPERATORS)}")

    def holds(self, variables: Mapping[str, Any]) -> bool | None:
        """The predicate on ``variables``; None when it has no predicate or the variable is missing."""
        if self.variable is None or self.variable not in variables:
            return None
        return bool(_OPERATORS[self.op](variables[self.variable], self.value))

    @property
    def predicate(self) -> str:
        """``variable op value`` as text (empty without a predicate)."""
        return f"{self.variable} {self.op} {self.value!r}" if self.variable is not None else ""


@dataclass(frozen=True)
class TransitionDecl:
    """``trigger`` moves an instance from any of ``sources`` to ``dest`` if ``guard`` holds."""

    trigger: str
    sources: tuple[str, ...]
    dest: str
    guard: str | None = None
    doc: str = ""


@dataclass(frozen=True)
class StateDecl:
    """A state and what it means, in one sentence."""

    name: str
    doc: str = ""


@dataclass(frozen=True)
class LifecycleDeclaration:
    """An immutable lifecycle: shared by every instance, never holds an instance's state."""

    name: str
    states: tuple[StateDecl, ...]
    initial: str
    terminal: frozenset[str]
    transitions: tuple[TransitionDecl, ...]
    # name -> GuardDecl; a plain string is the meaning of a guard without a predicate.
    guards: Mapping[str, GuardDecl | str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "guards",
            {name: g if isinstance(g, GuardDecl) else GuardDecl(g) for name, g in self.guards.items()},
        )
        names = [state.name for state in self.states]
        if len(set(names)) != len(names):
            duplicates = sorted({n for n in names if names.count(n) > 1})
            raise DeclarationError(f"{self.name}: state(s) declared twice: {duplicates}")
        declared = set(names)
        if self.initial not in declared:
            raise DeclarationError(
                f"{self.name}: initial state {self.initial!r} is not declared; add "
                f"StateDecl({self.initial!r}) to states"
            )
        for terminal in self.terminal:
            if terminal not in declared:
                raise DeclarationError(f"{self.name}: terminal state {terminal!r} is not declared")
        seen: dict[tuple[str, str], TransitionDecl] = {}
        for transition in self.transitions:
            for state in (*transition.sources, transition.dest):
                if state not in declared:
                    raise DeclarationError(
                        f"{self.name}: trigger {transition.trigger!r} names undeclared state "
                        f"{state!r}; declare it or fix the name (declared: {sorted(declared)})"
                    )
            if transition.guard is not None and transition.guard not in self.guards:
                raise DeclarationError(
                    f"{self.name}: trigger {transition.trigger!r} uses guard {transition.guard!r}, "
                    f"which is not listed in guards={{name: GuardDecl(meaning, variable, op, value)}}"
                )
            for source in transition.sources:
                if source in self.terminal:
                    raise DeclarationError(
                        f"{self.name}: trigger {transition.trigger!r} leaves terminal state {source!r}"
                    )
                key = (source, transition.trigger)
                if key in seen:
                    raise DeclarationError(
                        f"{self.name}: trigger {transition.trigger!r} has two transitions from "
                        f"{source!r} (to {seen[key].dest!r} and {transition.dest!r}); a trigger must "
                        f"be deterministic: use two trigger names or a guard on one trigger"
                    )
                seen[key] = transition

    def guard(self, name: str) -> GuardDecl:
        """The declared guard called ``name``."""
        return cast(GuardDecl, self.guards[name])  # __post_init__ made every guard a GuardDecl

    @property
    def state_names(self) -> tuple[str, ...]:
        return tuple(state.name for state in self.states)

    @property
    def triggers(self) -> tuple[str, ...]:
        """Trigger names in declaration order, each once."""
        return tuple(dict.fromkeys(t.trigger for t in self.transitions))

    def edges(self) -> Iterator[tuple[str, str, TransitionDecl]]:
        """Every (source, trigger, transition) triple."""
        for transition in self.transitions:
            for source in transition.sources:
                yield source, transition.trigger, transition

    def transition_for(self, source: str, trigger: str) -> TransitionDecl | None:
        for edge_source, edge_trigger, transition in self.edges():
            if edge_source == source and edge_trigger == trigger:
                return transition
        return None

