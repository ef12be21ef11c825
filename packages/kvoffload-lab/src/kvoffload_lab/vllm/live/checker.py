"""``kvoffload vllm check --checker engine``: the live runs, judged.

For each mode (``inproc``, ``mp``) one driver process (:mod:`.driver`) runs every workload
(:mod:`.workloads`) with each manager, and once without offloading (the baseline, in process).
Each run is then judged, in this order, and the first violation is the run's verdict:

1. ``Crash``: vLLM's connector raised (its file and line), or the engine died;
2. the findings the connector and the worker wrote (the manager contract of the recording proxy,
   ``DataIntegrity``, and at shutdown ``NoLeak`` and the drain-time contract checks);
3. ``SameTokens``: a request's greedy tokens differ from the baseline's (an aborted request's up
   to the shorter of the two);
4. ``TraceCheck``: the trace is rejected by the spec (the mirror, the embedded TLA+ checker, TLC);

Separately, each trace is held against kvoffload's engine model (:mod:`.conformance`): a trace the
model cannot produce is a gap of the model, not a violation of vLLM's, so it goes to the report
(``model_gaps``, or ``explained_gaps`` when its cause is known), never into the verdict.

Results are :class:`~kvoffload_lab.vllm.check.findings.CheckerVerdict` per manager x checker, the checker
being ``engine`` / ``engine-mp`` for the workloads of :data:`.workloads.KINDS` and
``double-reset`` / ``double-reset-mp`` for the known finding, reported on its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvoffload_lab.vllm.check.findings import CRASH, CheckerVerdict, relevant_events, requests_named
from kvoffload_lab.vllm.live.conformance import BEHAVIOURS, EXPLAINED, check_conformance
from kvoffload_lab.vllm.live.driver import BASELINE
from kvoffload_lab.vllm.live.logs import DRAIN_FILE, FINDINGS_FILE, TRACE_FILE, read_drain, read_ndjson
from kvoffload_lab.vllm.live.tracecheck import check_live_trace
from kvoffload_lab.vllm.live.workloads import DOUBLE_RESET, KINDS, Workload, build

MODES: tuple[str, ...] = ("inproc", "mp")
CHECKERS: tuple[str, ...] = ("engine", "engine-mp", "double-reset", "double-reset-mp")


def checker_name(workload: str, mode: str) -> str:
    base = "double-reset" if workload == DOUBLE_RESET else "engine"
    return base if mode == "inproc" else f"{base}-mp"


@dataclass
class RunVerdict:
    """One run's verdict and what went into it."""

    workload: str
    seed: int
    manager: str
    mode: str
    invariant: str | None = None
    error: str | None = None
    trace: list[str] = field(default_factory=list)
    traces: list[str] = field(default_factory=list)
    gaps: list[str] = field(default_factory=list)
    explained: list[str] = field(default_factory=list)
    resets: list[str] = field(default_factory=list)
    reached: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    folder: str = ""

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _plan(mode: str, model_dir: Path, out: Path, runs: list[tuple[Workload, str]]) -> dict[str, Any]:
    return {"mode": mode, "model_dir": str(model_dir), "out": str(out),
            "runs": [{"workload": w.to_json(), "manager": m} for w, m in runs]}


def _drive(python: str, plan: dict[str, Any], folder: Path, timeout: float) -> list[dict[str, Any]]:
    plan_path, out_path = folder / f"plan-{plan['mode']}.json", folder / f"outcomes-{plan['mode']}.json"
    plan_path.write_text(json.dumps(plan))
    log = folder / f"driver-{plan['mode']}.log"
    with log.open("w") as sink:
        done = subprocess.run([python, "-m", "kvoffload_lab.vllm.live.driver", str(plan_path), str(out_path)],
                              stdout=sink, stderr=subprocess.STDOUT, timeout=timeout)
    outcomes = json.loads(out_path.read_text()) if out_path.is_file() else []
    if done.returncode != 0 or len(outcomes) != len(plan["runs"]):
        tail = log.read_text(errors="replace").strip().splitlines()[-5:]
        raise RuntimeError(f"the {plan['mode']} driver exited {done.returncode} after {len(outcomes)} of "
                           f"{len(plan['runs'])} runs: {' | '.join(tail)}")
    return outcomes


def _events(trace_lines: list[dict[str, Any]]) -> list[tuple[int, str]]:
    events = []
    for line in trace_lines:
        who = f"({line['id']})" if "id" in line else "()"
        keys = f" [{', '.join(line['keys'])}]" if line.get("keys") else ""
        extra = ""
        if line["call"] == "build_connector_meta":
            extra = f" scheduled={line['scheduled']} finished={line['finished']}"
            if line.get("preempted"):
                extra += f" preempted={line['preempted']}"
        events.append((line["step"], f"{line['object']}.{line['call']}{who}{keys}{extra}"))
    return events


def _strip_suffix(request_id: str) -> str:
    # vLLM appends "-<8 hex>" to every request id it is given.
    head, _, tail = request_id.rpartition("-")
    return head if head and len(tail) == 8 else request_id


def _token_difference(outcome: dict[str, Any], baseline: dict[str, Any]) -> str | None:
    aborted = set(outcome["aborted"])
    for request_id, expected in baseline["tokens"].items():
        got = outcome["tokens"].get(request_id, [])
        length = min(len(got), len(expected)) if request_id in aborted else max(len(got), len(expected))
        for position in range(length):
            mine = got[position] if position < len(got) else None
            theirs = expected[position] if position < len(expected) else None
            if mine != theirs:
                return (f"request '{request_id}' token {position}: {mine} with offloading, {theirs} without "
                        f"({len(got)} vs {len(expected)} tokens)")
    return None


def first_failure(problems: list[dict[str, Any]], outcome: dict[str, Any]) -> tuple[str, str] | None:
    """A run's first failure from inside the engine: a crash before any other finding, then the
    first finding, then the engine's death as the driver saw it (``(invariant, message)``)."""
    crash = next((f for f in problems if f["invariant"] == CRASH), None)
    first = crash or (problems[0] if problems else None)
    if first is not None:
        return first["invariant"], first["message"]
    if outcome["error"]:
        return CRASH, f"the engine died: {outcome['error']}"
    return None


def judge(outcome: dict[str, Any], baseline: dict[str, Any], workload: Workload, tlc_jar: str | None) -> RunVerdict:
    """The verdict of one run (see the module docstring for the order)."""
    folder = Path(outcome["folder"])
    verdict = RunVerdict(workload.name, workload.seed, outcome["manager"], outcome["mode"],
                         resets=outcome["resets"], seconds=outcome["seconds"], folder=str(folder))
    trace_lines = read_ndjson(folder / TRACE_FILE)
    problems = read_ndjson(folder / FINDINGS_FILE)
    drain = read_drain(folder / DRAIN_FILE)
    last_seq = trace_lines[-1]["seq"] if trace_lines else 0
    if (failure := first_failure(problems, outcome)) is not None:
        verdict.invariant, verdict.error = failure
    elif drain is None or (drain["when"] == "idle" and drain["seq"] < last_seq):
        seen = "never" if drain is None else f"last at trace line {drain['seq']} of {last_seq}"
        verdict.invariant, verdict.error = "NoLeak", f"the connector was not idle at the end of the run ({seen})"
    elif drain["findings"]:
        verdict.invariant, verdict.error = drain["findings"][0]["invariant"], drain["findings"][0]["message"]
    else:
        difference = _token_difference(outcome, baseline)
        if difference is not None:
            verdict.invariant, verdict.error = "SameTokens", difference
    if trace_lines:
        verdicts = check_live_trace(folder / TRACE_FILE, tlc_jar)
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
        names = {_strip_suffix(r) for r in requests_named(verdict.error or "")}
        full = {line.get("id") for line in trace_lines if _strip_suffix(str(line.get("id", ""))) in names}
        verdict.trace = relevant_events(_events(trace_lines), {r for r in full if r})
    return verdict


def run_engine_checks(
    managers: Sequence[str],
    seeds: Sequence[int],
    modes: Sequence[str] = MODES,
    kinds: Sequence[str] = (*KINDS, DOUBLE_RESET),
    mp_kinds: Sequence[str] | None = None,
    tlc_jar: str | None = None,
    out: Path | None = None,
    python: str = sys.executable,
    timeout: float = 3000,
) -> tuple[list[CheckerVerdict], dict[str, Any]]:
    """Every manager x mode over the workloads of ``seeds`` (``kinds``; ``mp_kinds`` with
    multiprocessing, default the same); the results and a coverage report."""
    from kvoffload_lab.vllm.harness import build_tiny_model

    root = out or Path(tempfile.mkdtemp(prefix="kvoffload-live-"))
    root.mkdir(parents=True, exist_ok=True)
    model_dir = build_tiny_model(root / "model")
    chosen = {"inproc": tuple(kinds), "mp": tuple(kinds if mp_kinds is None else mp_kinds)}
    loads = {mode: [build(kind, seed) for seed in seeds for kind in chosen[mode]] for mode in modes}
    # The baseline (no offloading) runs in process, once per workload of either mode.
    baseline_loads = list({(w.name, w.seed): w for mode in modes for w in loads[mode]}.values())
    seconds: dict[str, float] = {}
    verdicts: list[RunVerdict] = []
    baseline_of: dict[tuple[str, int], dict[str, Any]] = {}
    for mode in ("inproc", "mp"):
        if mode not in modes:
            continue
        runs = [(w, m) for w in loads[mode] for m in managers]
        if mode == "inproc" or "inproc" not in modes:
            runs = [(w, BASELINE) for w in baseline_loads] + runs
        started = time.perf_counter()
        outcomes = _drive(python, _plan(mode, model_dir, root / "runs", runs), root, timeout)
        seconds[mode] = time.perf_counter() - started
        for (workload, manager), outcome in zip(runs, outcomes, strict=True):
            if manager == BASELINE:
                baseline_of[(workload.name, workload.seed)] = outcome
                continue
            verdicts.append(judge(outcome, baseline_of[(workload.name, workload.seed)], workload, tlc_jar))
    return _results(verdicts, managers, modes, chosen), _report(verdicts, seconds, root)


def _results(verdicts: list[RunVerdict], managers: Sequence[str], modes: Sequence[str],
             kinds: dict[str, tuple[str, ...]]) -> list[CheckerVerdict]:
    results = []
    for manager in managers:
        for mode in modes:
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
                results.append(result)
    return results


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


def _report(verdicts: list[RunVerdict], seconds: dict[str, float], root: Path) -> dict[str, Any]:
    reached: Counter[str] = Counter()
    for verdict in verdicts:
        reached.update(verdict.reached)
    return {
        "out": str(root),
        "seconds_per_mode": {mode: round(s, 1) for mode, s in seconds.items()},
        "model_gaps": _grouped_gaps(verdicts),
        "explained_gaps": _grouped_gaps(verdicts, explained=True),
        "coverage": {name: reached.get(name, 0) for name in BEHAVIOURS},
        "not_reached": [f"{name}: {BEHAVIOURS[name]}" for name in BEHAVIOURS if not reached.get(name)],
    }
