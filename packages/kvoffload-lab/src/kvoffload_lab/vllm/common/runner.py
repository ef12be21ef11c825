"""Run a connector folder's checkers cell by cell (manager or mode x checker); print a table or JSON."""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from kvoffload_lab.vllm.common.findings import MAX_TRACE_LINES, CheckerVerdict, unsupported_verdict

# Each checker's module and function in a connector's folder.
_CHECKERS = {"sim": ("sim", "run_sim"), "hypothesis": ("stateful", "run_hypothesis"),
             "explore": ("explorer", "run_explorer")}


def checker(package: str, name: str) -> Callable[..., CheckerVerdict]:
    """The checker ``name`` of the connector folder ``package`` (``offloading``, ``simple``, ``own``),
    imported only when asked for: a run of the simulator alone does not load hypothesis."""
    module, function = _CHECKERS[name]
    return getattr(importlib.import_module(f"{package}.{module}"), function)  # type: ignore[no-any-return]


def run_cells(cells: Sequence[tuple[str, str]],
              checker_of: Callable[[str], Callable[[str, Any], CheckerVerdict]], reads: Any) -> list[CheckerVerdict]:
    """Each (manager or mode, checker) cell's verdict. An exception that leaves a checker is
    kvoffload's harness failing to drive this vLLM, never a finding: that cell's verdict is
    ``unsupported``, and it is the last (the other cells go through the same harness)."""
    results = []
    for manager, checker in cells:
        started = time.perf_counter()
        try:
            results.append(checker_of(checker)(manager, reads))
        except Exception as error:
            results.append(unsupported_verdict(manager, checker, error))
        results[-1].seconds = time.perf_counter() - started
        if results[-1].result == "unsupported":
            break
    return results


def run_rows(package: str, rows: Sequence[str], known: Sequence[str], kind: str, checkers: Sequence[str],
             reads: Any) -> list[CheckerVerdict]:
    """Every row (``kind``: a manager, an offload mode, a scheduling of the connector folder
    ``package``; each one of ``known``) x checker, through :func:`run_cells`."""
    unknown = [row for row in rows if row not in known]
    if unknown:
        raise ValueError(f"unknown {kind} {unknown[0]!r}; known: {', '.join(known)}")
    return run_cells([(row, name) for row in rows for name in checkers], partial(checker, package), reads)


def to_json(version: str, results: Sequence[CheckerVerdict], setup_seconds: float,
            connector: str = "offloading") -> dict[str, Any]:
    return {
        "vllm_version": version,
        "connector": connector,
        "setup_seconds": round(setup_seconds, 2),
        "results": [r.to_json() for r in results],
    }


def _verdict(result: CheckerVerdict) -> str:
    if result.result == "success":
        return "ok"
    if result.result == "unsupported":
        return "UNSUPPORTED vLLM API"
    text = f"{'LOSS' if result.result == 'loss' else 'VIOLATION'} {result.invariant}"
    return text + (" + LOSS" if "loss" in result.details else "")


def _steps(trace: Sequence[str]) -> list[str]:
    """The step list, numbered; a long one keeps its first line (the setting) and its last steps."""
    numbered = [f"  {n}. {step}" for n, step in enumerate(trace, 1)]
    if len(numbered) <= MAX_TRACE_LINES:
        return numbered
    left_out = f"  ... {len(numbered) - MAX_TRACE_LINES} line(s) left out ..."
    return [numbered[0], left_out, *numbered[-(MAX_TRACE_LINES - 1):]]


def format_table(version: str, results: Sequence[CheckerVerdict], connector: str = "offloading") -> str:
    """manager (or offload mode, or scheduling) x checker -> verdict, then each finding with its invariant and step
    list: safety violations, and losses (blocks a connector dropped, safe but missed later)."""
    checkers = list(dict.fromkeys(r.checker for r in results))
    managers = list(dict.fromkeys(r.manager for r in results))
    cell = {(r.manager, r.checker): r for r in results}
    width = max(len(c) for c in checkers) + 32
    title, label = {"simple": ("SimpleCPUOffloadConnector", "offload"),
                    "kvoffload": ("KVOffloadConnector", "scheduling")}.get(connector,
                                                                           ("OffloadingConnector", "manager"))
    lines = [f"kvoffload vllm check: vLLM {version}, {title}", ""]
    first = max(10, len(label) + 1)
    lines.append(f"{label:<{first}}" + "".join(f"{c:<{width}}" for c in checkers))
    for manager in managers:
        row = f"{manager:<{first}}"
        for checker in checkers:
            r = cell.get((manager, checker))
            text = "-" if r is None else f"{_verdict(r)} ({r.seconds:.1f} s)"
            row += f"{text:<{width}}"
        lines.append(row)
    for r in results:
        if r.result == "violation":
            lines += ["", f"{r.manager} x {r.checker}: {r.invariant} violated: {r.error}", *_steps(r.trace)]
        loss = r.details.get("loss") if r.result == "violation" else (
            {"invariant": r.invariant, "error": r.error, "trace": r.trace} if r.result == "loss" else None)
        if loss:
            lines += ["", f"{r.manager} x {r.checker}: loss ({loss['invariant']}): {loss['error']}",
                      *_steps(loss["trace"])]
    return "\n".join(lines)
