"""What the live check needs of one vLLM connector: :class:`LiveConnector`, a row of
:mod:`kvoffload_lab.vllm.live.registry`.

The driver (:mod:`.driver`) starts each run's engine with the row's ``transfer_config`` and steps
an idle in-process engine at most ``drain_limit`` times at the end; the checks (:mod:`.checks`)
judge every run with ``judge`` and gather the verdicts with ``results``; the report
(:mod:`.report`) is ``summary`` and ``report_lines``. This module, the driver, the checks, the
report, the workloads and the logs import no connector's own module, so that a connector's module
may import any of them and no circle can close through the live check's common part.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvoffload_lab.vllm.common.findings import CheckerVerdict
from kvoffload_lab.vllm.common.live.verdicts import LiveVerdict
from kvoffload_lab.vllm.common.live.workloads import Workload


@dataclass(frozen=True)
class LiveConnector:
    """One vLLM connector as the live check runs and judges it (the verdicts being its judge's)."""

    name: str
    """``kvoffload vllm check --connector NAME``."""
    managers: tuple[str, ...]
    """The managers (or modes) a run may name besides the baseline, every one by default."""
    kinds: tuple[str, ...]
    """The workload kinds (:mod:`.workloads`) it runs, every one by default."""
    transfer_config: Callable[[str, Workload, Path, str], dict[str, Any]]
    """``(manager, workload, folder, engine_id)``: the engine's ``kv_transfer_config``."""
    drain_limit: int
    """At most this many steps of an idle in-process engine at the end of a run."""
    judge: Callable[[dict[str, Any], dict[str, Any], Workload, str | None], LiveVerdict]
    """``(outcome, baseline outcome, workload, tlc_jar)``: one run's verdict."""
    results: Callable[[list[LiveVerdict], Sequence[str], dict[str, tuple[str, ...]]], list[CheckerVerdict]]
    """``(verdicts, managers, kinds per run mode)``: the check's results."""
    summary: Callable[[list[LiveVerdict]], dict[str, Any]]
    """The report's own part (beside its folder and seconds)."""
    report_lines: Callable[[dict[str, Any]], list[str]]
    """The report's own part as printed: a title line, then indented lines."""
