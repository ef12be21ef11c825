"""Trace recording: one ndjson line per accepted transition, and optionally per recorded call.

A transition line is ``{"seq", "step", "lifecycle", "id", "trigger", "from", "to", ...variables}``:
``seq`` counts lines from 1, ``step`` is what the ``step`` callable returned when the transition
fired, ``lifecycle`` the declaration's name, ``id`` the instance's id (the runtime's
``id_attribute``), and the variables are what the caller's ``variables(instance)`` returned: what
a trace checker needs to decide the declared guards (each :class:`GuardDecl` names the variable it
reads) and any ordering rule of its own.

A call line is ``{"seq", "step", "object", "call", ...arguments}``: :meth:`TraceWriter.record_calls`
wraps named methods of one object and writes a line *before* each call runs, so a call that raises
is recorded too (it is often the one a checker must see).

Observers run after the state changed and before the code that fired the trigger continues, so a
recorded variable is the value the guard saw: guards are evaluated just before the state changes
and nothing between the two touches the variables.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from kvoffload.statemachine.runtime import DeclaredMachine, TransitionEvent

Variables = Callable[[Any], dict[str, Any]]
# (method name, positional arguments) -> the fields a call line records.
CallFields = Callable[[str, tuple[Any, ...]], dict[str, Any]]


def no_variables(instance: Any) -> dict[str, Any]:
    """Record nothing beyond the transition itself."""
    return {}


class TraceWriter:
    """Writes the transitions (and calls) it is attached to, as ndjson, in the order they happen."""

    def __init__(self, stream: IO[str], path: str | None = None) -> None:
        self._stream = stream
        self.path = path
        self.seq = 0
        self._attached: list[tuple[DeclaredMachine, Callable[[TransitionEvent, Any], None]]] = []
        self._wrapped: list[tuple[object, str]] = []

    @classmethod
    def open(cls, path: str | Path) -> TraceWriter:
        """A writer on a new (truncated) file at ``path``."""
        return cls(open(path, "w", encoding="utf-8"), str(path))  # closed by close()

    def attach(self, machine: DeclaredMachine, step: Callable[[], int], variables: Variables = no_variables) -> None:
        """Record every transition ``machine`` accepts from now on, stamped with ``step()``."""

        def observer(event: TransitionEvent, instance: Any) -> None:
            self.write(event, step(), variables(instance))

        machine.add_observer(observer)
        self._attached.append((machine, observer))

    def record_calls(
        self, target: object, label: str, methods: Sequence[str], step: Callable[[], int], fields: CallFields
    ) -> None:
        """Write a line before every call of ``target.<method>`` for each of ``methods``.

        The wrapper is an attribute of ``target`` itself (removed by :meth:`close`); ``fields``
        turns the call's positional arguments into the line's fields (e.g. ``{"id": args[0]}``).
        """
        for name in methods:
            original = getattr(target, name)

            @functools.wraps(original)
            def wrapper(*args: Any, _name: str = name, _original: Any = original, **kwargs: Any) -> Any:
                self._line({"step": step(), "object": label, "call": _name, **fields(_name, args)})
                return _original(*args, **kwargs)

            setattr(target, name, wrapper)
            self._wrapped.append((target, name))

    def write(self, event: TransitionEvent, step: int, variables: dict[str, Any]) -> None:
        """Append one transition line (attach() calls this; tests may call it to build traces by hand)."""
        self._line({
            "step": step,
            "lifecycle": event.lifecycle,
            "id": event.instance_id,
            "trigger": event.trigger,
            "from": event.source,
            "to": event.dest,
            **variables,
        })

    def _line(self, fields: dict[str, Any]) -> None:
        self.seq += 1
        # default=str: an id or a variable that is not JSON (an enum, a tuple key) is still
        # recorded, as its text, rather than aborting the run that is being traced.
        self._stream.write(json.dumps({"seq": self.seq, **fields}, separators=(",", ":"), default=str) + "\n")

    def close(self) -> None:
        """Detach from every machine, unwrap every recorded method, close the file; safe to call twice."""
        for machine, observer in self._attached:
            machine.remove_observer(observer)
        self._attached.clear()
        for target, name in self._wrapped:
            delattr(target, name)
        self._wrapped.clear()
        if not self._stream.closed:
            self._stream.close()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
