"""Trace recording: one ndjson line per accepted lifecycle transition.

A line is ``{"seq", "step", "lifecycle", "request", "trigger", "from", "to", ...variables}``:
``seq`` counts lines from 1, ``step`` is what the ``step`` callable returned when the transition
fired (the scheduler's step counter), and the variables are what a trace checker needs to decide
the guards (``jobs_in_flight`` for ``no_jobs_in_flight``) and the ordering rules.

The framework knows nothing about KV caches, so the default variables are read by duck typing:
any of :data:`DEFAULT_ATTRIBUTES` the instance has is recorded (sets as sorted lists), and
``jobs_in_flight`` is derived from ``load_job`` / ``store_jobs`` when both exist. A caller that
knows more (the scheduler's ``pending_store_chunks``) passes its own ``variables`` callable.

Observers run after the state changed and before the code that fired the trigger continues, so a
recorded variable is the value the guard saw: guards are evaluated just before the state changes
and nothing between the two touches the variables.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from kvoffload.statemachine.runtime import DeclaredMachine, TransitionEvent

# Attributes recorded when the instance has them; what the mirror (kvoffload.verify.mirror) reads.
DEFAULT_ATTRIBUTES: tuple[str, ...] = ("load_job", "store_jobs", "signals")

Variables = Callable[[Any], dict[str, Any]]


def default_variables(instance: Any) -> dict[str, Any]:
    """The duck-typed variables of ``instance``: see the module docstring."""
    found: dict[str, Any] = {}
    for name in DEFAULT_ATTRIBUTES:
        if hasattr(instance, name):
            found[name] = _jsonable(getattr(instance, name))
    if "load_job" in found and "store_jobs" in found:
        found["jobs_in_flight"] = (found["load_job"] is not None) + len(found["store_jobs"])
    return found


def _jsonable(value: Any) -> Any:
    if isinstance(value, set | frozenset):
        return sorted(value)
    if isinstance(value, tuple):
        return list(value)
    return value


class TraceWriter:
    """Writes every transition of the machines it is attached to, as ndjson, in firing order."""

    def __init__(self, stream: IO[str], path: str | None = None) -> None:
        self._stream = stream
        self.path = path
        self.seq = 0
        self._attached: list[tuple[DeclaredMachine, Callable[[TransitionEvent, Any], None]]] = []

    @classmethod
    def open(cls, path: str | Path) -> TraceWriter:
        """A writer on a new (truncated) file at ``path``."""
        return cls(open(path, "w", encoding="utf-8"), str(path))  # closed by close()

    def attach(
        self,
        machine: DeclaredMachine,
        step: Callable[[], int],
        variables: Variables | None = None,
    ) -> None:
        """Record every transition ``machine`` accepts from now on, stamped with ``step()``."""
        read = variables if variables is not None else default_variables

        def observer(event: TransitionEvent, instance: Any) -> None:
            self.write(event, step(), read(instance))

        machine.add_observer(observer)
        self._attached.append((machine, observer))

    def write(self, event: TransitionEvent, step: int, variables: dict[str, Any]) -> None:
        """Append one line (attach() calls this; tests may call it to build traces by hand)."""
        self.seq += 1
        line = {
            "seq": self.seq,
            "step": step,
            "lifecycle": event.lifecycle,
            "request": event.instance_id,
            "trigger": event.trigger,
            "from": event.source,
            "to": event.dest,
            **variables,
        }
        # default=str: an instance id or a variable that is not JSON (an enum, a tuple key) is
        # still recorded, as its text, rather than aborting the run that is being traced.
        self._stream.write(json.dumps(line, separators=(",", ":"), default=str) + "\n")

    def close(self) -> None:
        """Detach from every machine and close the file; safe to call twice."""
        for machine, observer in self._attached:
            machine.remove_observer(observer)
        self._attached.clear()
        if not self._stream.closed:
            self._stream.close()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
