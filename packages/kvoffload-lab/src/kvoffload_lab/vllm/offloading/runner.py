"""Run the chosen checkers against vLLM's ``OffloadingConnector`` with the chosen managers."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from kvoffload_lab.vllm.common.findings import CheckerVerdict
from kvoffload_lab.vllm.common.runner import checker, run_cells
from kvoffload_lab.vllm.offloading.build import MANAGERS
from kvoffload_lab.vllm.offloading.compat import PrivateReads


def run_checks(managers: Sequence[str], checkers: Sequence[str], reads: PrivateReads) -> list[CheckerVerdict]:
    """Every manager ("lru", "arc", "tiering") x checker ("sim", "hypothesis", "explore"); kvoffload's
    harness failing ends the run with an ``unsupported`` verdict
    (:func:`~kvoffload_lab.vllm.common.runner.run_cells`)."""
    unknown = [m for m in managers if m not in MANAGERS]
    if unknown:
        raise ValueError(f"unknown manager {unknown[0]!r}; known: {', '.join(MANAGERS)}")
    return run_cells([(m, c) for m in managers for c in checkers], partial(checker, __package__), reads)
