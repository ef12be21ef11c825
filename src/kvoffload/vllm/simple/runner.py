"""Run the chosen checkers against ``SimpleCPUOffloadConnector`` in the chosen offload modes."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from kvoffload.vllm.check.findings import CheckerVerdict
from kvoffload.vllm.simple.build import MODES
from kvoffload.vllm.simple.compat import SimpleReads


def _checker(name: str) -> Callable[[str, SimpleReads], CheckerVerdict]:
    if name == "sim":
        from kvoffload.vllm.simple.sim import run_sim

        return run_sim
    if name == "hypothesis":
        from kvoffload.vllm.simple.stateful import run_hypothesis

        return run_hypothesis
    from kvoffload.vllm.simple.explorer import run_explorer

    return run_explorer


def run_simple_checks(modes: Sequence[str], checkers: Sequence[str], reads: SimpleReads) -> list[CheckerVerdict]:
    """Every offload mode ("eager", "lazy") x checker ("sim", "hypothesis", "explore")."""
    results = []
    for mode in modes:
        if mode not in MODES:
            raise ValueError(f"unknown offload mode {mode!r}; known: {', '.join(MODES)}")
        for checker in checkers:
            started = time.perf_counter()
            results.append(_checker(checker)(mode, reads))
            results[-1].seconds = time.perf_counter() - started
    return results
