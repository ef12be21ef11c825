"""The Python mirror of the spec, run over recorded traces (``kvoffload trace check``).

A trace (``OffloadingScheduler.attach_trace``) has one line per request or job transition and one
per call of the scheduler's API and of the manager. The mirror replays it line by line and
returns the first line nothing explains:

- every transition line by its declaration (:class:`kvoffload_lab.statemachine.replay.LifecycleReplay`:
  declared edges, initial and terminal states, guards evaluated on the recorded variables, ``seq``
  and ``step`` order), for each lifecycle it is given;
- with both lifecycles, the protocol's ordering rules (:class:`ProtocolRules`), which span
  requests, jobs and calls and carry the invariant names of ``kvoffload.lifecycles``:
  ``SignalAfterFinalStore`` (the signal comes only from ``build_connector_meta``, after the step's
  stores, or ``reset_cache``, and only once every computed chunk was offered to ``prepare_store``,
  except while a ``reset_cache`` drops the cache: from its call until the manager's own),
  ``NoManagerCallAfterSignal`` (no lookup, touch or prepare after ``on_request_finished``, which
  itself comes only after the signal, as in ``kvoffload.lifecycles.invariants``), ``SignalExactlyOnce``,
  ``JobsExclusive``, ``CleanOnlyWhenDrained``;
  the signal comes at the latest in the step after the finish, from ``build_connector_meta`` or
  ``reset_cache``; a waiting request has nothing in flight and lists exactly its jobs in flight.

Rules read only what a line records: a hand-written trace without call or job lines still replays,
and the rules about what it lacks are not checked.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvoffload.lifecycles.job import JOB_LIFECYCLE, STALE
from kvoffload.lifecycles.request import FINISHED_PENDING_STORE, LOADING, REQUEST_LIFECYCLE, RUNNING, SIGNALED, WAITING
from kvoffload.statemachine.declaration import LifecycleDeclaration
from kvoffload_lab.statemachine.replay import LifecycleReplay, MalformedTrace, is_call, validate, validate_counts

__all__ = [
    "MalformedTrace",
    "MirrorResult",
    "ProtocolRules",
    "TraceMirror",
    "Unexplained",
    "check_trace_file",
    "check_trace_lines",
    "parse_line",
    "read_lifecycle_trace",
]

PRODUCT_LIFECYCLES: tuple[LifecycleDeclaration, ...] = (REQUEST_LIFECYCLE, JOB_LIFECYCLE)

# Manager calls that need a request the manager still knows.
CALLS_BEFORE_SIGNAL: frozenset[str] = frozenset({"lookup", "touch", "prepare_load", "prepare_store"})
# The scheduler calls in which a request may be signaled.
SIGNALING_CALLS: frozenset[str] = frozenset({"build_connector_meta", "reset_cache"})
SIGNAL_CALL = "on_request_finished"
# What a move the declaration does not allow is reported as (the bug zoo's name for it too).
DECLARED_LIFECYCLE = "DeclaredLifecycle"
RESET_CALL = "reset_cache"
# The variables a request or job line records (OffloadingScheduler.attach_trace) that are counts,
# and those that are lists of counts: a guard or a rule compares them, so a line with another
# type is malformed input, not a protocol violation.
COUNT_FIELDS: tuple[str, ...] = ("jobs_in_flight", "signals", "load_job", "pending_store_chunks", "request_signals")
COUNT_LIST_FIELDS: tuple[str, ...] = ("store_jobs", "chunks")


@dataclass(frozen=True)
class Unexplained:
    """The first line nothing explains."""

    line: int
    subject: str | None
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}"


@dataclass
class MirrorResult:
    """The replay's outcome and counts (of the lines replayed before any rejection)."""

    replay: LifecycleReplay
    error: Unexplained | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def lines(self) -> int:
        return self.replay.counts.lines

    def to_json(self) -> dict[str, Any]:
        counts = self.replay.counts
        return {
            "ok": self.ok,
            "lines": counts.lines,
            "calls": counts.calls,
            "instances": {name: counts.instances[name] for name in self.replay.declarations},
            "transitions": {name: dict(sorted(c.items())) for name, c in counts.transitions.items()},
            "unfinished": {name: self.replay.unfinished(name) for name in self.replay.declarations},
            "error": None
            if self.error is None
            else {"line": self.error.line, "subject": self.error.subject, "reason": self.error.reason},
        }


@dataclass
class ProtocolRules:
    """The ordering rules across requests, jobs and calls (see the module docstring)."""

    # request id -> line of its on_request_finished call
    told: dict[str, int] = field(default_factory=dict)
    # job id -> (request id, kind) of every job of a request: not ended, not stale
    live_jobs: dict[str, tuple[str, str]] = field(default_factory=dict)
    finish_step: dict[str, int] = field(default_factory=dict)
    # True once a job line was seen: a request's recorded jobs can then be cross-checked.
    jobs_traced: bool = False
    # the scheduler call in progress (None: unknown, the trace records no calls)
    context: str | None = None
    # From the scheduler's reset_cache call to the manager's: the cache is being dropped, so a
    # finished request is signaled without its last chunks being stored.
    resetting: bool = False

    def check(self, record: Mapping[str, Any], replay: LifecycleReplay) -> str | None:
        if is_call(record):
            return self._check_call(record, replay) if record["object"] == "manager" else None
        if record["lifecycle"] == JOB_LIFECYCLE.name:
            return self._check_job(record)
        if record["lifecycle"] == REQUEST_LIFECYCLE.name:
            return self._check_request(record)
        return None

    def apply(self, record: Mapping[str, Any], line: int) -> None:
        if is_call(record):
            if record["object"] == "scheduler":
                self.context = record["call"]
                self.resetting = self.resetting or record["call"] == RESET_CALL
            elif record["call"] == SIGNAL_CALL:
                self.told[str(record.get("id"))] = line
            elif record["call"] == RESET_CALL:
                self.resetting = False
            return
        key = str(record["id"])
        if record["lifecycle"] == JOB_LIFECYCLE.name:
            self.jobs_traced = True
            if record["from"] == JOB_LIFECYCLE.initial:
                self.live_jobs[key] = (str(record.get("request")), str(record.get("kind")))
            elif record["to"] in JOB_LIFECYCLE.terminal or record["to"] == STALE:
                # A stale job belongs to no request any more (reset_cache detached it).
                self.live_jobs.pop(key, None)
        elif record["to"] == FINISHED_PENDING_STORE and record.get("step") is not None:
            self.finish_step[key] = record["step"]

    def _jobs_of(self, request: str, kind: str | None = None) -> list[str]:
        return sorted(j for j, (r, k) in self.live_jobs.items() if r == request and (kind is None or k == kind))

    def _check_call(self, record: Mapping[str, Any], replay: LifecycleReplay) -> str | None:
        call, request = record["call"], str(record.get("id"))
        if call in CALLS_BEFORE_SIGNAL and request in self.told:
            return (
                f"NoManagerCallAfterSignal: {call}() for request {request!r} after on_request_finished "
                f"(line {self.told[request]})"
            )
        if call != SIGNAL_CALL:
            return None
        if request in self.told:
            first = self.told[request]
            return f"SignalExactlyOnce: on_request_finished for request {request!r} again (first: line {first})"
        state = replay.state(REQUEST_LIFECYCLE.name, request)
        if state is not None and state != SIGNALED:
            return (
                f"NoManagerCallAfterSignal: on_request_finished for request {request!r} in state {state!r}: the "
                f"manager forgets it while the scheduler still owes it calls (the final stores come first)"
            )
        return None

    def _check_job(self, record: Mapping[str, Any]) -> str | None:
        if record["from"] != JOB_LIFECYCLE.initial:
            return None
        request, kind = str(record.get("request")), record.get("kind")
        other = "store" if kind == "load" else "load"
        clash = self._jobs_of(request, other)
        if clash:
            return (
                f"JobsExclusive: {kind} job {record['id']} of request {request!r} while its {other} job(s) "
                f"{clash} are in flight"
            )
        return None

    def _check_request(self, record: Mapping[str, Any]) -> str | None:
        trigger, request = record["trigger"], str(record["id"])
        load_job, store_jobs, jobs = record.get("load_job"), record.get("store_jobs"), record.get("jobs_in_flight")
        if load_job is not None and store_jobs:
            return f"JobsExclusive: load job {load_job} and store jobs {list(store_jobs)} at once"
        if "load_job" in record:
            if record["to"] == LOADING and load_job is None:
                return f"{trigger!r} into {LOADING!r} without a load job"
            if record["to"] == RUNNING and load_job is not None:
                return f"{trigger!r} into {RUNNING!r} while load job {load_job} is still in flight"
        if record["to"] == WAITING and jobs:
            # The declared meaning of the state (docs/design.md: waiting, nothing in flight).
            return f"{DECLARED_LIFECYCLE}: entered {WAITING!r} with {jobs} job(s) in flight; a waiting request has none"
        if record["to"] in REQUEST_LIFECYCLE.terminal and self._jobs_of(request):
            return f"CleanOnlyWhenDrained: {trigger!r} while job(s) {self._jobs_of(request)} are in flight"
        if self.jobs_traced and "store_jobs" in record:
            listed = sorted({str(j) for j in store_jobs or ()} | ({str(load_job)} if load_job is not None else set()))
            if listed != self._jobs_of(request):
                return f"lists job(s) {listed}, but its jobs in flight are {self._jobs_of(request)}"
        if record["to"] == SIGNALED:
            return self._check_signal(record, request)
        return None

    def _check_signal(self, record: Mapping[str, Any], request: str) -> str | None:
        if self.context is not None and self.context not in SIGNALING_CALLS:
            return (
                f"SignalAfterFinalStore: signaled inside {self.context}(); only build_connector_meta (after the "
                f"step's stores) or reset_cache signals"
            )
        pending = record.get("pending_store_chunks")
        if pending and not self.resetting:
            return f"SignalAfterFinalStore: signaled with {pending} chunk(s) never offered to prepare_store"
        step, finished = record.get("step"), self.finish_step.get(request)
        if step is not None and finished is not None and step > finished + 1:
            return (
                f"signaled at step {step}, but it finished at step {finished}: the first "
                f"build_connector_meta after a finish signals it"
            )
        return None


class TraceMirror:
    """Replays trace records one at a time; :meth:`feed` returns why a record is unexplained."""

    def __init__(self, declarations: Sequence[LifecycleDeclaration] = PRODUCT_LIFECYCLES) -> None:
        self.replay = LifecycleReplay(declarations)
        names = {declaration.name for declaration in declarations}
        # The protocol's rules relate requests and jobs: only with both lifecycles.
        self.rules = ProtocolRules() if {d.name for d in PRODUCT_LIFECYCLES} <= names else None
        self.result = MirrorResult(self.replay)

    def feed(self, record: Mapping[str, Any], line: int) -> Unexplained | None:
        """Apply one record; None if the spec explains it, else why not (nothing changed)."""
        _validate(record, line)
        problem = self.replay.check_order(record)
        if problem is None:
            moved = self.replay.check_transition(record)
            problem = None if moved is None else f"{DECLARED_LIFECYCLE}: {moved}"
        if problem is None and self.rules is not None:
            problem = self.rules.check(record, self.replay)
        if problem is not None:
            return Unexplained(line, _subject(record), f"{_subject(record)}: {problem}")
        self.replay.apply(record, line)
        if self.rules is not None:
            self.rules.apply(record, line)
        return None


def _subject(record: Mapping[str, Any]) -> str:
    if is_call(record):
        return f"{record['object']}.{record['call']}({record.get('id', '')!r})"
    return f"{record['lifecycle']} {record['id']!r}"


def parse_line(text: str, line: int) -> dict[str, Any]:
    """One ndjson line as a record; raises :class:`MalformedTrace`."""
    try:
        record = json.loads(text)
    except json.JSONDecodeError as error:
        raise MalformedTrace(line, f"malformed JSON: {error.msg} (column {error.colno})") from None
    _validate(record, line)
    return record


def _validate(record: Mapping[str, Any], line: int) -> None:
    validate(record, line)
    validate_counts(record, line, COUNT_FIELDS, COUNT_LIST_FIELDS)


def read_lifecycle_trace(lines: Iterable[str]) -> list[tuple[int, dict[str, Any]]]:
    """(line number, record) for every non-blank line; raises :class:`MalformedTrace`."""
    return [(number, parse_line(text, number)) for number, text in enumerate(lines, 1) if text.strip()]


def check_trace_lines(
    lines: Iterable[str], declarations: Sequence[LifecycleDeclaration] = PRODUCT_LIFECYCLES
) -> MirrorResult:
    """Replay ndjson ``lines``; stops at the first unexplained line. Raises :class:`MalformedTrace`."""
    mirror = TraceMirror(declarations)
    for number, text in enumerate(lines, 1):
        if not text.strip():
            continue
        problem = mirror.feed(parse_line(text, number), number)
        if problem is not None:
            mirror.result.error = problem
            break
    return mirror.result


def check_trace_file(
    path: str | Path, declarations: Sequence[LifecycleDeclaration] = PRODUCT_LIFECYCLES
) -> MirrorResult:
    """Replay the trace file at ``path`` (see :func:`check_trace_lines`)."""
    with open(path, encoding="utf-8") as stream:
        return check_trace_lines(stream, declarations)
