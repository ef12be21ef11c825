"""The live check's report beside the verdict table: the connector's own part, then the engine time
per run mode and where the runs are kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvoffload_lab.vllm.common.live.interface import LiveConnector
from kvoffload_lab.vllm.common.live.verdicts import LiveVerdict


def engine_report(connector: LiveConnector, verdicts: list[LiveVerdict], seconds: dict[str, float],
                  root: Path) -> dict[str, Any]:
    """The JSON-able report: the runs' folder, the seconds per driver, and ``connector.summary``."""
    return {"out": str(root), "seconds_per_mode": {mode: round(s, 1) for mode, s in seconds.items()},
            **connector.summary(verdicts)}


def format_report(report: dict[str, Any], connector: LiveConnector) -> str:
    """``report`` (:func:`engine_report` of ``connector``) as printed below the verdict table."""
    seconds = ", ".join(f"{mode} {s:.0f} s" for mode, s in report["seconds_per_mode"].items())
    return "\n".join(["", *connector.report_lines(report), f"  engine time: {seconds}; runs kept in {report['out']}"])
