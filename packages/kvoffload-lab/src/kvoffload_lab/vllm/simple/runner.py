"""Run the chosen checkers against ``SimpleCPUOffloadConnector`` in the chosen offload modes."""

from __future__ import annotations

from collections.abc import Sequence

from kvoffload_lab.vllm.common.findings import CheckerVerdict
from kvoffload_lab.vllm.common.runner import run_rows
from kvoffload_lab.vllm.simple.build import MODES
from kvoffload_lab.vllm.simple.compat import SimpleReads


def run_simple_checks(modes: Sequence[str], checkers: Sequence[str], reads: SimpleReads) -> list[CheckerVerdict]:
    """Every offload mode ("eager", "lazy") x checker ("sim", "hypothesis", "explore"); kvoffload's
    harness failing ends the run with an ``unsupported`` verdict
    (:func:`~kvoffload_lab.vllm.common.runner.run_cells`)."""
    return run_rows(__package__, modes, MODES, "offload mode", checkers, reads)
