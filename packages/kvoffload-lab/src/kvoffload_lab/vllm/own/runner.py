"""Run the chosen checkers against ``KVOffloadConnector`` under the chosen schedulings."""

from __future__ import annotations

from collections.abc import Sequence

from kvoffload_lab.vllm.common.findings import CheckerVerdict
from kvoffload_lab.vllm.common.runner import run_rows
from kvoffload_lab.vllm.own.build import CONNECTORS, SCHEDULINGS


def run_own_checks(schedulings: Sequence[str], checkers: Sequence[str],
                   mutant: str | None = None) -> list[CheckerVerdict]:
    """Every scheduling ("sync", "async") x checker ("sim", "hypothesis", "explore"), on
    ``KVOffloadConnector`` or the named mutant of it; the harness failing ends the run with an
    ``unsupported`` verdict (:func:`~kvoffload_lab.vllm.common.runner.run_cells`)."""
    if mutant not in CONNECTORS:
        raise ValueError(f"unknown mutant {mutant!r}; known: {', '.join(m for m in CONNECTORS if m)}")
    return run_rows(__package__, schedulings, SCHEDULINGS, "scheduling", checkers, mutant)
