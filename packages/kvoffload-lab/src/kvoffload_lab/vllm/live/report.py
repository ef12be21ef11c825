"""The live check's report beside the verdict table: model gaps, coverage, time per mode."""

from __future__ import annotations

from typing import Any


def format_report(report: dict[str, Any]) -> str:
    """Model gaps (unexplained, then explained), the model behaviours the runs reached, seconds."""
    lines = ["", "engine model vs the live traces (kvoffload_lab.vllm.live.conformance):"]
    gaps = report["model_gaps"]
    lines.append(f"  {len(gaps)} unexplained model gap(s)" + (":" if gaps else ""))
    lines += [f"    {gap}" for gap in gaps]
    explained = report["explained_gaps"]
    if explained:
        lines.append(f"  {len(explained)} explained gap(s):")
        lines += [f"    {gap}" for gap in explained]
    covered = ", ".join(f"{name} {count}" for name, count in report["coverage"].items())
    lines.append(f"  reached: {covered}")
    if report["not_reached"]:
        lines.append("  never reached: " + "; ".join(report["not_reached"]))
    seconds = ", ".join(f"{mode} {s:.0f} s" for mode, s in report["seconds_per_mode"].items())
    lines.append(f"  engine time: {seconds}; runs kept in {report['out']}")
    return "\n".join(lines)
