"""Replay of recorded transitions against their declarations (any lifecycle, any number of them).

A trace (:mod:`kvoffload.statemachine.trace`) holds transition lines and call lines. The replay
checks every transition line of a declared lifecycle, by the declaration alone:

- the first line of an instance starts in the declaration's initial state (else its beginning is
  missing), and every later line starts where the previous one ended;
- ``<<from, trigger, to>>`` is a declared edge, and nothing follows a terminal state;
- a guarded edge's guard holds on the variables the line recorded (each :class:`GuardDecl` is a
  predicate over one variable; a line that lacks the variable is rejected: the guard cannot be
  decided);
- across lines: ``seq`` counts up by one and ``step`` never decreases.

Lines of lifecycles it was not given, and call lines, pass through (a caller with rules of its own
sees every line). It stops at nothing: :meth:`LifecycleReplay.feed` returns why a line is
unexplained and leaves the replay as it was, so the caller decides.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kvoffload.statemachine.declaration import LifecycleDeclaration


class MalformedTrace(ValueError):
    """A line that is not a trace record at all (bad JSON, missing or ill-typed field)."""

    def __init__(self, line: int, reason: str) -> None:
        self.line = line
        self.reason = reason
        super().__init__(f"line {line}: {reason}")


TRANSITION_FIELDS: tuple[tuple[str, type | tuple[type, ...]], ...] = (
    ("lifecycle", str),
    ("id", (str, int)),
    ("trigger", str),
    ("from", str),
    ("to", str),
)
CALL_FIELDS: tuple[tuple[str, type | tuple[type, ...]], ...] = (("object", str), ("call", str))


def is_call(record: Mapping[str, Any]) -> bool:
    """A call line (``object``, ``call``) rather than a transition line."""
    return "call" in record and "trigger" not in record


def validate(record: object, line: int) -> None:
    """Raise :class:`MalformedTrace` unless ``record`` is a transition or call line."""
    if not isinstance(record, Mapping):
        raise MalformedTrace(line, f"expected a JSON object, got {type(record).__name__}")
    for name, kind in CALL_FIELDS if is_call(record) else TRANSITION_FIELDS:
        if name not in record:
            raise MalformedTrace(line, f"missing field {name!r}")
        if not isinstance(record[name], kind) or isinstance(record[name], bool):
            raise MalformedTrace(line, f"field {name!r} has the wrong type ({type(record[name]).__name__})")
    validate_counts(record, line, ("seq", "step"), ())


def is_count(value: object) -> bool:
    """A non-negative int (and not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def validate_counts(record: Mapping[str, Any], line: int, counts: Sequence[str], lists: Sequence[str]) -> None:
    """Raise :class:`MalformedTrace` unless each field of ``counts`` that ``record`` has is a
    non-negative int, and each of ``lists`` a list of them."""
    for name in counts:
        value = record.get(name)
        if value is not None and not is_count(value):
            raise MalformedTrace(line, f"field {name!r} must be a non-negative integer, got {value!r}")
    for name in lists:
        value = record.get(name)
        if value is not None and (not isinstance(value, list) or not all(map(is_count, value))):
            raise MalformedTrace(line, f"field {name!r} must be a list of non-negative integers, got {value!r}")


@dataclass
class Instance:
    """What the replay knows of one instance: its state and the line that put it there."""

    state: str
    line: int


@dataclass
class ReplayCounts:
    """Counts of the lines accepted so far."""

    lines: int = 0
    calls: int = 0
    transitions: dict[str, Counter[str]] = field(default_factory=dict)
    instances: Counter[str] = field(default_factory=Counter)


class LifecycleReplay:
    """Replays transition lines of ``declarations`` (see the module docstring)."""

    def __init__(self, declarations: Sequence[LifecycleDeclaration]) -> None:
        self.declarations = {declaration.name: declaration for declaration in declarations}
        self.instances: dict[tuple[str, str], Instance] = {}
        self.counts = ReplayCounts(transitions={name: Counter() for name in self.declarations})
        self._last_seq: int | None = None
        self._last_step: int | None = None

    def state(self, lifecycle: str, instance_id: object) -> str | None:
        """The instance's current state, or None if no line named it yet."""
        found = self.instances.get((lifecycle, str(instance_id)))
        return None if found is None else found.state

    def check(self, record: Mapping[str, Any]) -> str | None:
        """Why ``record`` is unexplained, or None; changes nothing."""
        return self.check_order(record) or self.check_transition(record)

    def check_transition(self, record: Mapping[str, Any]) -> str | None:
        """Why a transition line does not follow its declaration, or None (also for call lines)."""
        if is_call(record):
            return None
        declaration = self.declarations.get(record["lifecycle"])
        if declaration is None:
            return None
        trigger, source, dest = record["trigger"], record["from"], record["to"]
        if trigger not in declaration.triggers:
            return f"unknown trigger {trigger!r} (declared: {', '.join(declaration.triggers)})"
        tracked = self.instances.get((declaration.name, str(record["id"])))
        if tracked is None:
            if source != declaration.initial:
                return (
                    f"unknown {declaration.name}: its first transition starts in {source!r}, not in the initial "
                    f"state {declaration.initial!r} (the trace misses its beginning)"
                )
        elif tracked.state in declaration.terminal:
            return (
                f"{trigger!r} after the {declaration.name} reached {tracked.state!r} (line {tracked.line}), "
                f"a terminal state"
            )
        elif source != tracked.state:
            return f"trigger {trigger!r} recorded from {source!r}, but the {declaration.name} is in {tracked.state!r}"
        transition = declaration.transition_for(source, trigger)
        if transition is None:
            allowed = [t for s, t, _ in declaration.edges() if s == source]
            return f"trigger {trigger!r} is not allowed from state {source!r} (allowed: {', '.join(allowed) or 'none'})"
        if dest != transition.dest:
            return f"trigger {trigger!r} from {source!r} goes to {transition.dest!r}, not {dest!r}"
        if transition.guard is not None:
            guard = declaration.guard(transition.guard)
            holds = guard.holds(record)
            if holds is None:
                return (
                    f"{trigger!r} needs guard {transition.guard!r} ({guard.predicate or 'no predicate'}), which "
                    f"the line does not record"
                )
            if not holds:
                return (
                    f"{trigger!r} needs guard {transition.guard!r} ({guard.predicate}) but "
                    f"{guard.variable} = {record[guard.variable]!r}"
                )
        return None

    def apply(self, record: Mapping[str, Any], line: int) -> None:
        """Accept ``record`` (after :meth:`check` found nothing wrong)."""
        if "seq" in record:
            self._last_seq = record["seq"]
        if record.get("step") is not None:
            self._last_step = record["step"]
        self.counts.lines += 1
        if is_call(record):
            self.counts.calls += 1
            return
        name = record["lifecycle"]
        if name not in self.declarations:
            return
        key = (name, str(record["id"]))
        if key not in self.instances:
            self.counts.instances[name] += 1
        self.instances[key] = Instance(record["to"], line)
        self.counts.transitions[name][record["trigger"]] += 1

    def unfinished(self, lifecycle: str) -> list[str]:
        """Instances the trace leaves outside a terminal state (legal: a trace may stop anywhere)."""
        terminal = self.declarations[lifecycle].terminal
        return sorted(
            key for (name, key), found in self.instances.items() if name == lifecycle and found.state not in terminal
        )

    def check_order(self, record: Mapping[str, Any]) -> str | None:
        """Why ``record``'s ``seq`` or ``step`` is out of order, or None."""
        seq = record.get("seq")
        if seq is not None and self._last_seq is not None and seq != self._last_seq + 1:
            return f"seq {seq} does not follow seq {self._last_seq} (lines missing or reordered)"
        step = record.get("step")
        if step is not None and self._last_step is not None and step < self._last_step:
            return f"step {step} is before the previous line's step {self._last_step}"
        return None
