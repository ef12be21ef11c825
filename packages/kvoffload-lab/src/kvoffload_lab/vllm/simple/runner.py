"""Run the chosen checkers against ``SimpleCPUOffloadConnector`` in the chosen offload modes."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from kvoffload_lab.vllm.common.findings import CheckerVerdict
from kvoffload_lab.vllm.common.runner import checker, run_cells
from kvoffload_lab.vllm.simple.build import MODES
from kvoffload_lab.vllm.simple.compat import SimpleReads


def run_simple_checks(modes: Sequence[str], checkers: Sequence[str], reads: SimpleReads) -> list[CheckerVerdict]:
    """Every offload mode ("eager", "lazy") x checker ("sim", "hypothesis", "explore"); kvoffload's
    harness failing ends the run with an ``unsupported`` verdict
    (:func:`~kvoffload_lab.vllm.common.runner.run_cells`)."""
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise ValueError(f"unknown offload mode {unknown[0]!r}; known: {', '.join(MODES)}")
    return run_cells([(m, c) for m in modes for c in checkers], partial(checker, __package__), reads)
