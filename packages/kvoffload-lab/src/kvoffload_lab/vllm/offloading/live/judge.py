"""vLLM's ``OffloadingConnector`` in live engines: its row of the registry (:data:`OFFLOADING`) and
its judge.

The runs are :mod:`kvoffload_lab.vllm.common.live.checks`'
(``kvoffload vllm check --checker engine``): every workload of
:data:`kvoffload_lab.vllm.common.live.workloads.KINDS` and ``double_reset`` with each manager (:data:`MANAGERS`: vLLM's
``CPUOffloadingManager`` with LRU or ARC, or its ``TieringOffloadingManager``), in process and with
multiprocessing, the engine's connector being :mod:`.connector`'s. Each run is judged, in this
order, and the first violation is the run's verdict:

1. ``Crash``: vLLM's connector raised (its file and line), or the engine died;
2. the findings the connector and the worker wrote (the manager contract of the recording proxy,
   ``DataIntegrity``, and at shutdown ``NoLeak`` and the drain-time contract checks);
3. ``SameTokens``: a request's greedy tokens differ from the baseline's (an aborted request's up
   to the shorter of the two);
4. ``TraceCheck``: the trace is rejected by the spec (the mirror, the embedded TLA+ checker, TLC);

Separately, each trace is held against kvoffload's engine model (:mod:`.conformance`): a trace the
model cannot produce is a gap of the model, not a violation of vLLM's, so it goes to the report
(``model_gaps``, or ``explained_gaps`` when its cause is known), never into the verdict.

Results are :class:`~kvoffload_lab.vllm.common.findings.CheckerVerdict` per manager x checker, the checker
being ``engine`` / ``engine-mp`` for the workloads of
:data:`kvoffload_lab.vllm.common.live.workloads.KINDS` and
``double-reset`` / ``double-reset-mp`` for the known finding, reported on its own.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvoffload_lab.vllm.common.findings import CheckerVerdict, relevant_events, requests_named
from kvoffload_lab.vllm.common.live.driver import MAX_STEPS
from kvoffload_lab.vllm.common.live.interface import LiveConnector
from kvoffload_lab.vllm.common.live.logs import TRACE_FILE
from kvoffload_lab.vllm.common.live.tracecheck import check_live_trace
from kvoffload_lab.vllm.common.live.verdicts import (
    LiveVerdict,
    RunFiles,
    first_failure,
    request_of,
    strip_suffix,
    token_difference,
)
from kvoffload_lab.vllm.common.live.workloads import BLOCK_BYTES, DOUBLE_RESET, KINDS, Workload
from kvoffload_lab.vllm.offloading.live.conformance import BEHAVIOURS, EXPLAINED, check_conformance

MANAGERS: tuple[str, ...] = ("lru", "arc", "tiering")


def checker_name(workload: str, mode: str) -> str:
    base = "double-reset" if workload == DOUBLE_RESET else "engine"
    return base if mode == "inproc" else f"{base}-mp"


def transfer_config(manager: str, workload: Workload, folder: Path, engine_id: str) -> dict[str, Any]:
    """``kv_transfer_config`` for vLLM's connector, observed (:mod:`.connector`), with ``manager``."""
    if manager not in MANAGERS:
        raise ValueError(f"unknown manager {manager!r}; known: {', '.join(MANAGERS)}")
    extra: dict[str, Any] = {
        "live_check_dir": str(folder),
        "spec_module_path": "kvoffload_lab.vllm.offloading.live.offloading_spec",
        "spec_name": "LiveTieringSpec" if manager == "tiering" else "LiveCPUSpec",
        "cpu_bytes_to_use": workload.cpu_chunks * BLOCK_BYTES,
        "eviction_policy": "arc" if manager == "arc" else "lru",
        "offload_prompt_only": workload.prompt_only,
    }
    if manager == "tiering":
        extra["secondary_tiers"] = [{"type": "ByteKeepingTier"}]
        extra["tier_poll_interval_s"] = 0
    return {
        "kv_connector": "LiveCheckConnector",
        "kv_connector_module_path": "kvoffload_lab.vllm.offloading.live.connector",
        "kv_role": "kv_both",
        "engine_id": engine_id,
        "kv_connector_extra_config": extra,
    }


@dataclass
class RunVerdict(LiveVerdict):
    """One run's verdict and what went into it: its manager and run mode, the trace checkers' answers,
    the engine model's gaps and what the run reached of the model."""

    manager: str
    mode: str
    traces: list[str] = field(default_factory=list)
    gaps: list[str] = field(default_factory=list)
    explained: list[str] = field(default_factory=list)
    reached: dict[str, int] = field(default_factory=dict)


def _event(line: dict[str, Any]) -> tuple[int, str]:
    """A trace line as a violation's trace shows it: the object's call, its request, keys and step."""
    keys = f" [{', '.join(line['keys'])}]" if line.get("keys") else ""
    extra = ""
    if line["call"] == "build_connector_meta":
        extra = f" scheduled={line['scheduled']} finished={line['finished']}"
        if line.get("preempted"):
            extra += f" preempted={line['preempted']}"
    return line["step"], f"{line['object']}.{line['call']}{request_of(line)}{keys}{extra}"


def judge(outcome: dict[str, Any], baseline: dict[str, Any], workload: Workload, tlc_jar: str | None) -> RunVerdict:
    """The verdict of one run (see the module docstring for the order)."""
    run = RunFiles.of(outcome)
    verdict = RunVerdict(workload.name, workload.seed, outcome["manager"], outcome["mode"],
                         **run.verdict_fields(outcome))
    trace_lines, drain, last_seq = run.trace_lines, run.drain, run.last_seq
    if (failure := first_failure(run.problems, outcome)) is not None:
        verdict.invariant, verdict.error = failure
    elif drain is None or (drain["when"] == "idle" and drain["seq"] < last_seq):
        seen = "never" if drain is None else f"last at trace line {drain['seq']} of {last_seq}"
        verdict.invariant, verdict.error = "NoLeak", f"the connector was not idle at the end of the run ({seen})"
    elif drain["findings"]:
        verdict.invariant, verdict.error = drain["findings"][0]["invariant"], drain["findings"][0]["message"]
    else:
        difference = token_difference(outcome, baseline)
        if difference is not None:
            verdict.invariant, verdict.error = "SameTokens", difference
    if trace_lines:
        verdicts = check_live_trace(run.folder / TRACE_FILE, tlc_jar)
        verdict.traces = [str(v) for v in verdicts]
        rejected = next((v for v in verdicts if not v.ok), None)
        if verdict.invariant is None and rejected is not None:
            verdict.invariant, verdict.error = "TraceCheck", str(rejected)
        conformance = check_conformance(trace_lines)
        for gap in conformance.gaps:
            why = EXPLAINED.get((gap.rule, workload.name))
            (verdict.explained if why else verdict.gaps).append(str(gap) + (f" (explained: {why})" if why else ""))
        verdict.reached = dict(conformance.reached)
    if verdict.invariant is not None:
        names = {strip_suffix(r) for r in requests_named(verdict.error or "")}
        full = {line.get("id") for line in trace_lines if strip_suffix(str(line.get("id", ""))) in names}
        verdict.trace = relevant_events([_event(line) for line in trace_lines], {r for r in full if r})
    return verdict


def results(verdicts: list[RunVerdict], managers: Sequence[str],
            kinds: dict[str, tuple[str, ...]]) -> list[CheckerVerdict]:
    """Per manager x run mode (the keys of ``kinds``, each run mode's workload kinds): ``engine`` over
    the workloads but ``double_reset``, and ``double-reset`` over that one (``-mp`` with
    multiprocessing), each the first violation of its runs or a success."""
    gathered = []
    for manager in managers:
        for mode in kinds:
            for double in (False, True):
                wanted = DOUBLE_RESET in kinds[mode] if double else bool(set(kinds[mode]) - {DOUBLE_RESET})
                if not wanted:
                    continue
                name = checker_name(DOUBLE_RESET if double else "", mode)
                mine = [v for v in verdicts if v.manager == manager and v.mode == mode
                        and (v.workload == DOUBLE_RESET) == double]
                result = CheckerVerdict(manager, name, seconds=sum(v.seconds for v in mine))
                failed = next((v for v in mine if v.invariant is not None), None)
                if failed is not None:
                    result.result, result.invariant = "violation", failed.invariant
                    result.error = f"{failed.workload} (seed {failed.seed}): {failed.error}"
                    result.trace = failed.trace
                result.details = {"runs": [v.to_json() for v in mine]}
                gathered.append(result)
    return gathered


def _grouped_gaps(verdicts: list[RunVerdict], explained: bool = False) -> list[str]:
    """One line per broken rule: how often, in how many runs, and the first occurrence."""
    by_rule: dict[str, list[tuple[RunVerdict, str]]] = {}
    for verdict in verdicts:
        for gap in verdict.explained if explained else verdict.gaps:
            by_rule.setdefault(gap.split(" ", 1)[0], []).append((verdict, gap))
    lines = []
    for _rule, found in sorted(by_rule.items()):
        first, gap = found[0]
        runs = len({id(v) for v, _ in found})
        lines.append(f"{len(found)} x in {runs} run(s), first in {first.workload}-{first.seed} {first.manager} "
                     f"{first.mode} ({first.folder}): {gap}")
    return lines


def summary(verdicts: list[RunVerdict]) -> dict[str, Any]:
    """The report's part of the engine model: its gaps, grouped by rule, and what the runs reached."""
    reached: Counter[str] = Counter()
    for verdict in verdicts:
        reached.update(verdict.reached)
    return {
        "model_gaps": _grouped_gaps(verdicts),
        "explained_gaps": _grouped_gaps(verdicts, explained=True),
        "coverage": {name: reached.get(name, 0) for name in BEHAVIOURS},
        "not_reached": [f"{name}: {BEHAVIOURS[name]}" for name in BEHAVIOURS if not reached.get(name)],
    }


def report_lines(report: dict[str, Any]) -> list[str]:
    """Model gaps (unexplained, then explained) and the model behaviours the runs reached."""
    lines = ["engine model vs the live traces (kvoffload_lab.vllm.offloading.live.conformance):"]
    gaps = report["model_gaps"]
    lines.append(f"  {len(gaps)} unexplained model gap(s)" + (":" if gaps else ""))
    lines += [f"    {gap}" for gap in gaps]
    explained = report["explained_gaps"]
    if explained:
        lines.append(f"  {len(explained)} explained gap(s):")
        lines += [f"    {gap}" for gap in explained]
    covered = ", ".join(f"{name} {count}" for name, count in report["coverage"].items())
    lines.append(f"  reached: {covered}")
    if report["not_reached"]:
        lines.append("  never reached: " + "; ".join(report["not_reached"]))
    return lines


OFFLOADING = LiveConnector(
    name="offloading", managers=MANAGERS, kinds=(*KINDS, DOUBLE_RESET), transfer_config=transfer_config,
    drain_limit=MAX_STEPS, judge=judge, results=results, summary=summary, report_lines=report_lines,
)
