"""The protocol's ordering rules for the generated TLA+ trace module (``kvoffload trace tla``).

The same rules as :class:`kvoffload_lab.verify.mirror.ProtocolRules`, as TLA+ over the current line
``e``, so the TLA+ route rejects what the Python mirror rejects, at the same line: each rule is an
invariant named after what it checks (``SignalAfterFinalStore``, ``NoManagerCallAfterSignal``,
``SignalExactlyOnce``, ``JobsExclusive``, ``CleanOnlyWhenDrained``, ``SignalDeadline``,
``WaitingHasNoJobs``, ``LoadRecorded``). They apply only when both lifecycles are checked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvoffload.lifecycles.job import JOB_LIFECYCLE, STALE
from kvoffload.lifecycles.request import (
    CLEANED,
    FINISHED_PENDING_STORE,
    LOADING,
    REQUEST_LIFECYCLE,
    RUNNING,
    SIGNALED,
    WAITING,
)
from kvoffload.statemachine.declaration import LifecycleDeclaration
from kvoffload_lab.statemachine.trace_tla import TraceRules, write_trace_module
from kvoffload_lab.verify.mirror import (
    CALLS_BEFORE_SIGNAL,
    PRODUCT_LIFECYCLES,
    RESET_CALL,
    SIGNAL_CALL,
    SIGNALING_CALLS,
)


def _s(text: str) -> str:
    return f'"{text}"'


def _set(items: Sequence[str] | frozenset[str]) -> str:
    return "{" + ", ".join(_s(item) for item in sorted(items)) + "}"


REQ, JOB = _s(REQUEST_LIFECYCLE.name), _s(JOB_LIFECYCLE.name)

PROTOCOL_RULES = TraceRules(
    fields={
        "request": "", "kind": "", "pending_store_chunks": 0, "jobs_in_flight": 0, "load_job": -1, "store_jobs": [],
    },
    variables=(
        ("told", "{}"), ("live", "{}"), ("ctx", '""'), ("finished", "{}"), ("jobsTraced", "FALSE"),
        ("resetting", "FALSE"),
    ),
    updates=(
        ("told", f"IF e.object = \"manager\" /\\ e.call = {_s(SIGNAL_CALL)} THEN told \\cup {{e.id}} ELSE told"),
        ("ctx", 'IF e.object = "scheduler" THEN e.call ELSE ctx'),
        ("jobsTraced", "jobsTraced \\/ IsJob(e)"),
        (
            "resetting",
            f'IF e.call = {_s(RESET_CALL)} THEN e.object = "scheduler" ELSE resetting',
        ),
        (
            "live",
            f"IF IsJob(e) /\\ e.from = {_s(JOB_LIFECYCLE.initial)} "
            "THEN live \\cup {[job |-> e.id, req |-> e.request, kind |-> e.kind]} "
            f"ELSE IF IsJob(e) /\\ e.to \\in Terminal[{JOB}] \\cup {{{_s(STALE)}}} "
            "THEN {j \\in live : j.job # e.id} ELSE live",
        ),
        (
            "finished",
            f"IF IsReq(e) /\\ e.to = {_s(FINISHED_PENDING_STORE)} /\\ e.step >= 0 "
            "THEN finished \\cup {<<e.id, e.step>>} ELSE finished",
        ),
    ),
    invariants=(
        ("NoManagerCallAfterSignal", "NoCallAfterSignal(e)"),
        ("SignalExactlyOnce", "ToldOnce(e)"),
        ("SignalAfterFinalStore", "SignalAfterStores(e)"),
        ("SignalDeadline", "SignalInTime(e)"),
        ("JobsExclusive", "Exclusive(e)"),
        ("CleanOnlyWhenDrained", "Drained(e)"),
        ("WaitingHasNoJobs", "WaitingIdle(e)"),
        ("LoadRecorded", "LoadConsistent(e)"),
        ("JobsListed", "ListsItsJobs(e)"),
    ),
    definitions=f"""
IsReq(e) == IsTransition(e) /\\ e.lifecycle = {REQ}
IsJob(e) == IsTransition(e) /\\ e.lifecycle = {JOB}
ReqState(r) == IF <<{REQ}, r>> \\in Keys THEN st[<<{REQ}, r>>] ELSE Unseen
Recorded(e, v) == v \\in e.recorded

NoCallAfterSignal(e) ==
    /\\ (e.object = "manager" /\\ e.call \\in {_set(CALLS_BEFORE_SIGNAL)}) => e.id \\notin told
    /\\ (e.object = "manager" /\\ e.call = {_s(SIGNAL_CALL)} /\\ ReqState(e.id) # Unseen)
           => ReqState(e.id) = {_s(SIGNALED)}

ToldOnce(e) == (e.object = "manager" /\\ e.call = {_s(SIGNAL_CALL)}) => e.id \\notin told

SignalAfterStores(e) ==
    (IsReq(e) /\\ e.to = {_s(SIGNALED)}) =>
        /\\ (ctx # "" => ctx \\in {_set(SIGNALING_CALLS)})
        /\\ (Recorded(e, "pending_store_chunks") /\\ e.pending_store_chunks > 0) => resetting

SignalInTime(e) ==
    (IsReq(e) /\\ e.to = {_s(SIGNALED)} /\\ e.step >= 0) => \\A f \\in finished : f[1] = e.id => e.step <= f[2] + 1

Exclusive(e) ==
    /\\ (IsJob(e) /\\ e.from = {_s(JOB_LIFECYCLE.initial)}) => ~\\E j \\in live : j.req = e.request /\\ j.kind # e.kind
    /\\ (IsReq(e) /\\ Recorded(e, "load_job") /\\ Recorded(e, "store_jobs"))
           => ~(e.load_job >= 0 /\\ Len(e.store_jobs) > 0)

Drained(e) == (IsReq(e) /\\ e.to = {_s(CLEANED)}) => ~\\E j \\in live : j.req = e.id

WaitingIdle(e) == (IsReq(e) /\\ e.to = {_s(WAITING)} /\\ Recorded(e, "jobs_in_flight")) => e.jobs_in_flight = 0

ListsItsJobs(e) ==
    (IsReq(e) /\\ jobsTraced /\\ Recorded(e, "store_jobs") /\\ Recorded(e, "load_job")) =>
        Len(e.store_jobs) + (IF e.load_job >= 0 THEN 1 ELSE 0) = Cardinality({{j \\in live : j.req = e.id}})

LoadConsistent(e) ==
    (IsReq(e) /\\ Recorded(e, "load_job")) =>
        /\\ e.to = {_s(LOADING)} => e.load_job >= 0
        /\\ e.to = {_s(RUNNING)} => e.load_job < 0
""",
)


def write_product_trace_module(
    numbered: Sequence[tuple[int, Mapping[str, Any]]],
    declarations: Sequence[LifecycleDeclaration],
    out_dir: str | Path,
) -> tuple[Path, Path]:
    """The trace module for ``numbered`` ((line, record) pairs): the declarations' checks, plus the
    protocol rules when both of the product's lifecycles are checked."""
    both = {d.name for d in PRODUCT_LIFECYCLES} <= {d.name for d in declarations}
    return write_trace_module(
        [record for _, record in numbered], declarations, out_dir,
        line_numbers=[number for number, _ in numbered],
        rules=PROTOCOL_RULES if both else None,
    )


@dataclass(frozen=True)
class TraceVerdict:
    """What the embedded checker said of a trace module: ``line`` is the trace file's line."""

    ok: bool
    line: int | None = None
    reason: str = ""


def check_trace_module(tla_path: Path) -> TraceVerdict:
    """Check a generated trace module with the embedded TLA+ checker."""
    from tlacheck import check_model

    result = check_model(tla_path)
    if result.result == "success":
        return TraceVerdict(True)
    line = int(result.trace[-1].state["line"]) if result.trace and "line" in result.trace[-1].state else None
    what = f"TLA+ invariant {result.violated} is violated" if result.violated else result.message
    return TraceVerdict(False, line, what)
