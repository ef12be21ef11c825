"""Run the chosen checkers against the chosen managers of one vLLM; print a table or JSON."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from kvoffload.vllm.check.build import MANAGERS
from kvoffload.vllm.check.compat import PrivateReads
from kvoffload.vllm.check.findings import CheckResult

CHECKERS: tuple[str, ...] = ("sim", "hypothesis", "explore")


def _checker(name: str) -> Callable[[str, PrivateReads], CheckResult]:
    if name == "sim":
        from kvoffload.vllm.check.sim import run_sim

        return run_sim
    if name == "hypothesis":
        from kvoffload.vllm.check.stateful import run_hypothesis

        return run_hypothesis
    from kvoffload.vllm.check.explorer import run_explorer

    return run_explorer


def run_checks(managers: Sequence[str], checkers: Sequence[str], reads: PrivateReads) -> list[CheckResult]:
    """Every manager x checker; an error of the harness itself is reported, not raised."""
    results = []
    for manager in managers:
        if manager not in MANAGERS:
            raise ValueError(f"unknown manager {manager!r}; known: {', '.join(MANAGERS)}")
        for checker in checkers:
            started = time.perf_counter()
            results.append(_checker(checker)(manager, reads))
            results[-1].seconds = time.perf_counter() - started
    return results


def to_json(version: str, results: Sequence[CheckResult], setup_seconds: float) -> dict[str, Any]:
    return {
        "vllm_version": version,
        "setup_seconds": round(setup_seconds, 2),
        "results": [r.to_json() for r in results],
    }


def format_table(version: str, results: Sequence[CheckResult]) -> str:
    """manager x checker -> verdict, then each violation with its invariant and step list."""
    checkers = list(dict.fromkeys(r.checker for r in results))
    managers = list(dict.fromkeys(r.manager for r in results))
    cell = {(r.manager, r.checker): r for r in results}
    width = max(len(c) for c in checkers) + 24
    lines = [f"kvoffload vllm check: vLLM {version}", ""]
    lines.append("manager   " + "".join(f"{c:<{width}}" for c in checkers))
    for manager in managers:
        row = f"{manager:<10}"
        for checker in checkers:
            r = cell.get((manager, checker))
            text = "-" if r is None else ("ok" if r.result == "success" else f"VIOLATION {r.invariant}")
            if r is not None:
                text += f" ({r.seconds:.1f} s)"
            row += f"{text:<{width}}"
        lines.append(row)
    for r in results:
        if r.result != "violation":
            continue
        lines += ["", f"{r.manager} x {r.checker}: {r.invariant} violated: {r.error}"]
        lines += [f"  {n}. {step}" for n, step in enumerate(r.trace, 1)]
    return "\n".join(lines)
