"""Run the chosen checkers against ``KVOffloadConnector`` under the chosen schedulings."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from kvoffload_lab.vllm.common.findings import CheckerVerdict
from kvoffload_lab.vllm.common.runner import checker, run_cells
from kvoffload_lab.vllm.own.build import CONNECTORS, SCHEDULINGS


def run_own_checks(schedulings: Sequence[str], checkers: Sequence[str],
                   mutant: str | None = None) -> list[CheckerVerdict]:
    """Every scheduling ("sync", "async") x checker ("sim", "hypothesis", "explore"), on
    ``KVOffloadConnector`` or the named mutant of it; the harness failing ends the run with an
    ``unsupported`` verdict (:func:`~kvoffload_lab.vllm.common.runner.run_cells`)."""
    unknown = [s for s in schedulings if s not in SCHEDULINGS]
    if unknown:
        raise ValueError(f"unknown scheduling {unknown[0]!r}; known: {', '.join(SCHEDULINGS)}")
    if mutant not in CONNECTORS:
        raise ValueError(f"unknown mutant {mutant!r}; known: {', '.join(m for m in CONNECTORS if m)}")
    return run_cells([(s, c) for s in schedulings for c in checkers], partial(checker, __package__), mutant)
