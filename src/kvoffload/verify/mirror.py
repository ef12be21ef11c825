"""The Python mirror of the spec's next-state relation, run over recorded traces.

A trace (``kvoffload.statemachine.trace``) has one line per lifecycle transition. The mirror
replays it line by line and returns the first line that no spec action explains. Per request:

- the first line of a request starts from the declaration's initial state (else the request is
  unknown: its earlier history is missing), and every later line starts where the previous one
  ended (``from`` is the mirror's state);
- the trigger is declared (in :data:`REQUEST_LIFECYCLE`, the declaration, not the runtime table)
  from that state, and ``to`` is its destination;
- guards hold on the recorded variables: ``clean`` and ``resume`` need ``jobs_in_flight == 0``;
- what the table alone does not show: nothing follows ``cleaned``; ``signal`` happens exactly
  once; a request never has a load job and store jobs at once (JobsExclusive); ``load`` records
  its load job, ``load_done`` and ``schedule`` happen with no load in flight, a request enters
  ``waiting`` with nothing in flight; ``signal`` comes at the latest in the step after ``finish``
  (every ``build_connector_meta`` signals every finished request). A ``signal`` in the *same* step
  as the ``finish`` is legal: ``reset_cache`` between two steps signals finished requests.
- across lines: ``seq`` counts up by one and ``step`` never decreases.

Variables a line does not carry are not checked (a trace written without them still replays).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvoffload.spec.lifecycle import REQUEST_LIFECYCLE
from kvoffload.statemachine.declaration import LifecycleDeclaration

REQUIRED_FIELDS: tuple[tuple[str, type | tuple[type, ...]], ...] = (
    ("request", (str, int)),
    ("trigger", str),
    ("from", str),
    ("to", str),
)


class MalformedTrace(ValueError):
    """A line that is not a trace record at all (bad JSON, missing or ill-typed field)."""

    def __init__(self, line: int, reason: str) -> None:
        self.line = line
        self.reason = reason
        super().__init__(f"line {line}: {reason}")


@dataclass(frozen=True)
class Unexplained:
    """The first line no spec action explains."""

    line: int
    request: str | None
    trigger: str | None
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}"


@dataclass
class MirrorResult:
    """The replay's outcome and counts (of the lines replayed before any rejection)."""

    lines: int = 0
    requests: int = 0
    transitions: Counter[str] = field(default_factory=Counter)
    states: dict[str, str] = field(default_factory=dict)
    error: Unexplained | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def unfinished(self) -> list[str]:
        """Requests the trace leaves outside a terminal state (legal: a trace may stop anywhere)."""
        return sorted(rid for rid, state in self.states.items() if state not in REQUEST_LIFECYCLE.terminal)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "lines": self.lines,
            "requests": self.requests,
            "transitions": dict(sorted(self.transitions.items())),
            "unfinished": self.unfinished,
            "error": None
            if self.error is None
            else {"line": self.error.line, "request": self.error.request, "trigger": self.error.trigger,
                  "reason": self.error.reason},
        }


@dataclass
class _Request:
    state: str
    finish_step: int | None = None
    signals: int = 0
    cleaned_at: int | None = None


class TraceMirror:
    """Replays trace records one at a time; :meth:`feed` returns why a record is unexplained."""

    def __init__(self, declaration: LifecycleDeclaration = REQUEST_LIFECYCLE) -> None:
        self.declaration = declaration
        self.result = MirrorResult()
        self._requests: dict[str, _Request] = {}
        self._last_seq: int | None = None
        self._last_step: int | None = None
        self._triggers = frozenset(declaration.triggers)

    def feed(self, record: Mapping[str, Any], line: int) -> Unexplained | None:
        """Apply one record; None if a spec action explains it, else why not (state unchanged)."""
        _validate(record, line)
        request_id = str(record["request"])
        trigger = record["trigger"]

        def reject(reason: str) -> Unexplained:
            return Unexplained(line, request_id, trigger, f"request {request_id!r}: {reason}")

        problem = self._check_order(record)
        if problem:
            return reject(problem)
        lifecycle = record.get("lifecycle")
        if lifecycle is not None and lifecycle != self.declaration.name:
            return reject(f"lifecycle {lifecycle!r} is not {self.declaration.name!r}")
        if trigger not in self._triggers:
            return reject(f"unknown trigger {trigger!r} (declared: {', '.join(self.declaration.triggers)})")
        source, dest = record["from"], record["to"]
        tracked = self._requests.get(request_id)
        if tracked is None:
            if source != self.declaration.initial:
                return reject(
                    f"unknown request: its first transition starts in {source!r}, not in the initial "
                    f"state {self.declaration.initial!r} (the trace misses its beginning)"
                )
            tracked = _Request(self.declaration.initial)
        elif tracked.cleaned_at is not None:
            return reject(f"{trigger!r} after the request was cleaned (line {tracked.cleaned_at}); cleaned is terminal")
        if source != tracked.state:
            return reject(f"trigger {trigger!r} recorded from {source!r}, but the request is in {tracked.state!r}")
        transition = self.declaration.transition_for(source, trigger)
        if transition is None:
            allowed = [t for s, t, _ in self.declaration.edges() if s == source]
            return reject(
                f"trigger {trigger!r} is not allowed from state {source!r} (allowed: {', '.join(allowed) or 'none'})"
            )
        if dest != transition.dest:
            return reject(f"trigger {trigger!r} from {source!r} goes to {transition.dest!r}, not {dest!r}")
        problem = self._check_variables(record, tracked, transition.guard)
        if problem:
            return reject(problem)

        # Accepted: apply.
        if request_id not in self._requests:
            self._requests[request_id] = tracked
            self.result.requests += 1
        tracked.state = dest
        step = record.get("step")
        if trigger == "finish":
            tracked.finish_step = step
        elif trigger == "signal":
            tracked.signals += 1
        if dest in self.declaration.terminal:
            tracked.cleaned_at = line
        if "seq" in record:
            self._last_seq = record["seq"]
        if step is not None:
            self._last_step = step
        self.result.lines += 1
        self.result.transitions[trigger] += 1
        self.result.states[request_id] = dest
        return None

    def _check_order(self, record: Mapping[str, Any]) -> str | None:
        seq = record.get("seq")
        if seq is not None and self._last_seq is not None and seq != self._last_seq + 1:
            return f"seq {seq} does not follow seq {self._last_seq} (lines missing or reordered)"
        step = record.get("step")
        if step is not None and self._last_step is not None and step < self._last_step:
            return f"step {step} is before the previous line's step {self._last_step}"
        return None

    def _check_variables(self, record: Mapping[str, Any], tracked: _Request, guard: str | None) -> str | None:
        trigger = record["trigger"]
        load_job = record.get("load_job")
        store_jobs = record.get("store_jobs")
        jobs = record.get("jobs_in_flight")
        if jobs is None and "load_job" in record and store_jobs is not None:
            jobs = (load_job is not None) + len(store_jobs)
        if guard is not None and jobs is not None and jobs != 0:
            return f"{trigger!r} needs guard {guard!r} but {jobs} job(s) are in flight"
        if load_job is not None and store_jobs:
            return f"JobsExclusive: load job {load_job} and store jobs {list(store_jobs)} at once"
        if "load_job" in record:
            if trigger == "load" and load_job is None:
                return "'load' recorded without a load job"
            if trigger in ("load_done", "schedule") and load_job is not None:
                return f"{trigger!r} while load job {load_job} is still in flight"
        if record["to"] == self.declaration.initial and jobs is not None and jobs != 0:
            return f"entered {record['to']!r} with {jobs} job(s) in flight; a waiting request has none"
        if trigger == "signal":
            if tracked.signals:
                return "SignalExactlyOnce: signaled a second time"
            step = record.get("step")
            if step is not None and tracked.finish_step is not None and step > tracked.finish_step + 1:
                return (
                    f"signaled at step {step}, but it finished at step {tracked.finish_step}: the first "
                    f"build_connector_meta after a finish signals it"
                )
        if trigger == "clean":
            if tracked.signals != 1:
                return f"SignalExactlyOnce: cleaned after {tracked.signals} signal(s)"
            if record.get("signals") not in (None, 1):
                return f"cleaned with signals={record['signals']}, expected 1"
        return None


def _validate(record: Mapping[str, Any], line: int) -> None:
    if not isinstance(record, Mapping):
        raise MalformedTrace(line, f"expected a JSON object, got {type(record).__name__}")
    for name, kind in REQUIRED_FIELDS:
        if name not in record:
            raise MalformedTrace(line, f"missing field {name!r}")
        if not isinstance(record[name], kind) or isinstance(record[name], bool):
            raise MalformedTrace(line, f"field {name!r} has the wrong type ({type(record[name]).__name__})")
    for name in ("seq", "step", "jobs_in_flight"):
        value = record.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise MalformedTrace(line, f"field {name!r} must be an integer, got {value!r}")
    store_jobs = record.get("store_jobs")
    if store_jobs is not None and not isinstance(store_jobs, list):
        raise MalformedTrace(line, f"field 'store_jobs' must be a list, got {store_jobs!r}")


def parse_line(text: str, line: int) -> dict[str, Any]:
    """One ndjson line as a record; raises :class:`MalformedTrace`."""
    try:
        record = json.loads(text)
    except json.JSONDecodeError as error:
        raise MalformedTrace(line, f"malformed JSON: {error.msg} (column {error.colno})") from None
    _validate(record, line)
    return record


def read_trace(lines: Iterable[str]) -> list[tuple[int, dict[str, Any]]]:
    """(line number, record) for every non-blank line; raises :class:`MalformedTrace`."""
    return [(number, parse_line(text, number)) for number, text in enumerate(lines, 1) if text.strip()]


def check_trace_lines(lines: Iterable[str], declaration: LifecycleDeclaration = REQUEST_LIFECYCLE) -> MirrorResult:
    """Replay ndjson ``lines``; stops at the first unexplained line. Raises :class:`MalformedTrace`."""
    mirror = TraceMirror(declaration)
    for number, text in enumerate(lines, 1):
        if not text.strip():
            continue
        problem = mirror.feed(parse_line(text, number), number)
        if problem is not None:
            mirror.result.error = problem
            break
    return mirror.result


def check_trace_file(path: str | Path, declaration: LifecycleDeclaration = REQUEST_LIFECYCLE) -> MirrorResult:
    """Replay the trace file at ``path`` (see :func:`check_trace_lines`)."""
    with open(path, encoding="utf-8") as stream:
        return check_trace_lines(stream, declaration)
