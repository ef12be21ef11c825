"""The serving benchmark's figure, drawn from its JSON (matplotlib, the ``plot`` extra)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

# (panel title, workload, path into the workload's figures)
PANELS = (
    ("chat, reused turns: TTFT median (ms)", "chat", ("reused_turns", "ttft", "median_ms")),
    ("chat, reused turns: TTFT p90 (ms)", "chat", ("reused_turns", "ttft", "p90_ms")),
    ("prefix_repetition: requests/s", "prefix_repetition", ("requests_per_s",)),
    ("no reuse: TTFT median (ms)", "no_reuse", ("ttft", "median_ms")),
)


def _value(figures: dict[str, Any] | None, path: tuple[str, ...]) -> float:
    for key in path:
        if not isinstance(figures, dict) or figures.get(key) is None:
            return float("nan")
        figures = figures[key]
    return float(figures)  # type: ignore[arg-type]


def plot(report: dict[str, Any], path: Path) -> None:
    """One bar panel per headline figure, a bar per server."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(report["servers"])
    figure, axes = plt.subplots(1, len(PANELS), figsize=(4 * len(PANELS), 4), constrained_layout=True)
    for axis, (title, workload, keys) in zip(axes, PANELS, strict=True):
        axis.bar(names, [_value(report["servers"][name].get(workload), keys) for name in names])
        axis.set_title(title, fontsize=9)
        axis.tick_params(axis="x", labelrotation=60, labelsize=8)
    load = report.get("load_average") or {"start": [math.nan], "end": [math.nan]}
    figure.suptitle(f"vllm serve, {report['model']['size']} preset; 1-minute load average {load['start'][0]:.1f} "
                    f"at start, {load['end'][0]:.1f} at end", fontsize=9)
    figure.savefig(path)
    plt.close(figure)


def main() -> None:
    """``python -m kvoffload_lab.benchmarks.serving.plot REPORT.json FIGURE.png``: the figure of a saved
    report (from any environment with matplotlib, vLLM not needed)."""
    import json
    import sys

    report_path, figure_path = sys.argv[1:3]
    plot(json.loads(Path(report_path).read_text()), Path(figure_path))


if __name__ == "__main__":
    main()
