"""Is each live trace one that kvoffload's engine model can produce?

The sim, hypothesis and explore checkers of ``kvoffload vllm check`` drive vLLM's connector from
kvoffload's engine model (:mod:`kvoffload_lab.vllm.offloading.adapter` around :class:`kvoffload_lab.sim.Engine`).
The model chooses freely which request arrives, is scheduled, preempted, aborted or finishes and
when a job completes; what it fixes are the orderings below, each a rule of the adapter. A live
trace the model cannot produce breaks one of them: that is a *model gap*, reported with the trace
line. What the model can do and no live run did is *coverage*, reported as such, not as an error.

Rules (``M1`` ... ``M8``), over the connector calls of one trace:

- ``M1`` a request is announced (``on_new_request``) before any other call names it;
- ``M2`` an admission is ``get_num_new_matched_tokens`` then ``update_state_after_alloc`` for the
  same request, with nothing but that request's manager calls between them; a request whose load
  completed is re-allocated with ``update_state_after_alloc`` alone (its tokens are computed, so
  vLLM skips the lookup);
- ``M3`` ``request_finished`` comes before the step that lists the request in ``finished_req_ids``,
  and that is the very next step (synchronous scheduling, which vLLM's CPU platform forces);
- ``M4`` a step that schedules tokens is followed by one ``update_connector_output`` before the
  next step; a step that schedules none has at most one (in process, vLLM's engine drops an empty
  step's empty worker output; its multiprocess executor passes it on: the model's
  ``empty_step_reports``);
- ``M5`` a scheduled request was admitted since it last arrived or was preempted;
- ``M6`` a preempted request was running (scheduled and not finished);
- ``M7`` ``reset_cache`` between steps, whatever runs (``reset_prefix_cache(reset_connector=True)``
  resets the connector even when the GPU prefix cache cannot be reset), but never inside a step;
- ``M8`` at most one ``reset_cache`` between two steps.

The first live traces broke M2, M4 and M7 as the model then stood (it had no re-allocation after a
load, reported every empty step, and reset only with no request holding blocks); the model learned
all three, and those traces are kept in ``tests/data/live`` as regression tests. The multiprocess
runs then showed M4's other half: there an empty step's empty output is passed on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

RULES: dict[str, str] = {
    "M1": "a request is announced before any other call names it",
    "M2": "an admission is get_num_new_matched_tokens then update_state_after_alloc (alone after a load)",
    "M3": "request_finished, then the next step lists the request in finished_req_ids",
    "M4": "one update_connector_output per step that schedules tokens, at most one otherwise",
    "M5": "a scheduled request was admitted since it arrived or was preempted",
    "M6": "a preempted request was running",
    "M7": "reset_cache between steps, not inside one",
    "M8": "at most one reset_cache between two steps",
}
# What the model does that a live run should reach too (coverage, not correctness).
BEHAVIOURS: dict[str, str] = {
    "preempt": "a running request is preempted",
    "abort_running": "a running request is aborted",
    "abort_waiting": "a request is aborted before it was admitted",
    "gpu_prefix_hit": "an admission finds a GPU prefix-cache hit",
    "load": "an admission loads offloaded chunks",
    "finish_store_in_flight": "a request finishes while one of its stores is in flight",
    "reset_store_in_flight": "reset_cache while a store is in flight",
    "reset_idle": "reset_cache with no job in flight",
    "reset_while_running": "reset_cache while a request holds GPU blocks",
    "realloc_after_load": "a request re-allocated after its load",
    "empty_step_unreported": "a step that schedules nothing and gets no worker output",
    "empty_step_reported": "a step that schedules nothing and gets an empty worker output",
}
# Gaps with a known cause: (rule, workload kind) -> why.
EXPLAINED: dict[tuple[str, str], str] = {
    ("M8", "double_reset"): (
        "vLLM's EngineCore runs every queued utility call between two steps, so two "
        "reset_prefix_cache(reset_connector=True) calls reach the connector back to back; the model "
        "resets at most once between steps so its checkers keep looking past the known assertion "
        "(docs/vllm-double-reset.md)"
    ),
}


@dataclass(frozen=True)
class Gap:
    """A trace line the engine model cannot produce."""

    rule: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.rule} ({RULES[self.rule]}) broken at line {self.line}: {self.what}"


@dataclass
class Conformance:
    """One trace's gaps and the model behaviours it reached."""

    gaps: list[Gap] = field(default_factory=list)
    reached: Counter[str] = field(default_factory=Counter)


@dataclass
class _State:
    announced: set[str] = field(default_factory=set)
    admitted: set[str] = field(default_factory=set)  # admitted since arrival or preemption
    running: set[str] = field(default_factory=set)  # scheduled, not finished nor preempted
    finished: set[str] = field(default_factory=set)
    finish_due: dict[str, int] = field(default_factory=dict)  # request -> line of request_finished
    pending_match: str | None = None
    outputs_due: int = 0
    step_scheduled: bool = False
    loaded: set[str] = field(default_factory=set)  # complete_load since the last admission
    inside_step: bool = False
    resets_since_step: int = 0
    stores_in_flight: Counter[str] = field(default_factory=Counter)


def check_conformance(lines: Sequence[dict[str, Any]]) -> Conformance:
    """The rules above over one trace (its lines as parsed JSON, in order)."""
    result = Conformance()
    state = _State()
    for number, line in enumerate(lines, 1):
        if line.get("object") == "manager":
            _manager_line(state, line, result)
            continue
        for rule, what in _scheduler_line(state, line, result):
            result.gaps.append(Gap(rule, number, what))
    return result


def _manager_line(state: _State, line: dict[str, Any], result: Conformance) -> None:
    call, request = line["call"], line.get("id")
    keys = len(line.get("keys", ()))
    if call == "prepare_store" and request is not None:
        state.stores_in_flight[request] += keys
    elif call == "complete_store" and request is not None:
        state.stores_in_flight[request] -= keys
    elif call == "prepare_load":
        result.reached["load"] += 1
    elif call == "complete_load" and request is not None:
        state.loaded.add(request)
    elif call == "reset_cache":
        state.stores_in_flight.clear()
    if state.pending_match is not None and request != state.pending_match:
        state.pending_match = None


def _scheduler_line(state: _State, line: dict[str, Any], result: Conformance) -> Iterable[tuple[str, str]]:
    call, request = line["call"], line.get("id")
    if request is not None and call != "on_new_request" and request not in state.announced:
        yield "M1", f"{call}({request}) before on_new_request"
    if call != "update_state_after_alloc":
        state.pending_match = None if call != "get_num_new_matched_tokens" else request
    if call == "on_new_request":
        state.announced.add(request)
    elif call == "get_num_new_matched_tokens":
        if line.get("local_tokens", 0) > 0:
            result.reached["gpu_prefix_hit"] += 1
    elif call == "update_state_after_alloc":
        if state.pending_match != request:
            if request in state.loaded:
                result.reached["realloc_after_load"] += 1
            else:
                yield "M2", f"update_state_after_alloc({request}) without its get_num_new_matched_tokens just before"
        state.loaded.discard(request)
        state.pending_match = None
        state.admitted.add(request)
    elif call == "request_finished":
        state.finish_due[request] = line["seq"]
        if line.get("status") == "FINISHED_ABORTED":
            result.reached["abort_running" if request in state.running else "abort_waiting"] += 1
        if state.stores_in_flight[request] > 0:
            result.reached["finish_store_in_flight"] += 1
        state.running.discard(request)
        state.finished.add(request)
    elif call == "build_connector_meta":
        yield from _step(state, line, result)
    elif call == "update_connector_output":
        if state.outputs_due != 1:
            yield "M4", "update_connector_output without a step before it"
        elif not state.step_scheduled and line.get("reported") == 0:
            result.reached["empty_step_reported"] += 1
        state.outputs_due = 0
        state.inside_step = False
    elif call == "reset_cache":
        state.resets_since_step += 1
        if state.resets_since_step > 1:
            yield "M8", f"reset_cache number {state.resets_since_step} since the last step"
        if state.inside_step and state.step_scheduled:
            yield "M7", "reset_cache between build_connector_meta and update_connector_output of a step"
        if state.running:
            result.reached["reset_while_running"] += 1
        in_flight = any(count > 0 for count in state.stores_in_flight.values())
        result.reached["reset_store_in_flight" if in_flight else "reset_idle"] += 1


def _step(state: _State, line: dict[str, Any], result: Conformance) -> Iterable[tuple[str, str]]:
    if state.outputs_due and state.step_scheduled:
        yield "M4", "a step that scheduled tokens without update_connector_output after it"
    elif state.outputs_due:
        result.reached["empty_step_unreported"] += 1
    state.outputs_due = 1
    state.step_scheduled = bool(line.get("scheduled"))
    state.inside_step = True
    state.resets_since_step = 0
    finished = set(line.get("finished", ()))
    for request in sorted(set(state.finish_due) - finished):
        yield "M3", f"{request} finished (request_finished) but this step's finished_req_ids leaves it out"
    for request in sorted(finished - set(state.finish_due)):
        yield "M3", f"finished_req_ids lists {request} before its request_finished"
    state.finish_due = {}
    for request in line.get("preempted", ()):
        if request not in state.running:
            yield "M6", f"{request} preempted while not running"
        result.reached["preempt"] += 1
        state.running.discard(request)
        state.admitted.discard(request)
    for request in line.get("scheduled", ()):
        if request not in state.admitted:
            yield "M5", f"{request} scheduled without an admission since it arrived or was preempted"
        if request not in state.finished:
            state.running.add(request)
