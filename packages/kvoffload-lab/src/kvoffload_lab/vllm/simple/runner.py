"""Run the chosen checkers against ``SimpleCPUOffloadConnector`` in the chosen offload modes."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kvoffload_lab.vllm.check.findings import CheckerVerdict
from kvoffload_lab.vllm.check.runner import run_cells
from kvoffload_lab.vllm.simple.build import MODES
from kvoffload_lab.vllm.simple.compat import SimpleReads


def _checker(name: str) -> Callable[[str, SimpleReads], CheckerVerdict]:
    if name == "sim":
        from kvoffload_lab.vllm.simple.sim import run_sim

        return run_sim
    if name == "hypothesis":
        from kvoffload_lab.vllm.simple.stateful import run_hypothesis

        return run_hypothesis
    from kvoffload_lab.vllm.simple.explorer import run_explorer

    return run_explorer


def run_simple_checks(modes: Sequence[str], checkers: Sequence[str], reads: SimpleReads) -> list[CheckerVerdict]:
    """Every offload mode ("eager", "lazy") x checker ("sim", "hypothesis", "explore"); kvoffload's
    harness failing ends the run with an ``unsupported`` verdict
    (:func:`~kvoffload_lab.vllm.check.runner.run_cells`)."""
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise ValueError(f"unknown offload mode {unknown[0]!r}; known: {', '.join(MODES)}")
    return run_cells([(m, c) for m in modes for c in checkers], _checker, reads)
