"""Run the chosen checkers against vLLM's ``OffloadingConnector`` with the chosen managers."""

from __future__ import annotations

from collections.abc import Sequence

from kvoffload_lab.vllm.common.findings import CheckerVerdict
from kvoffload_lab.vllm.common.runner import run_rows
from kvoffload_lab.vllm.offloading.build import MANAGERS
from kvoffload_lab.vllm.offloading.compat import PrivateReads


def run_checks(managers: Sequence[str], checkers: Sequence[str], reads: PrivateReads) -> list[CheckerVerdict]:
    """Every manager ("lru", "arc", "tiering") x checker ("sim", "hypothesis", "explore"); kvoffload's
    harness failing ends the run with an ``unsupported`` verdict
    (:func:`~kvoffload_lab.vllm.common.runner.run_cells`)."""
    return run_rows(__package__, managers, MANAGERS, "manager", checkers, reads)
