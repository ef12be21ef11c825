"""The TLC-style human report of one :class:`~tlacheck.result.CheckResult`."""

from __future__ import annotations

from pathlib import Path

from tlacheck.result import CheckResult


def _changed(previous: dict[str, str] | None, state: dict[str, str]) -> dict[str, str]:
    if previous is None:
        return dict(state)
    return {name: value for name, value in state.items() if previous.get(name) != value}


def format_report(result: CheckResult) -> str:
    """A TLC-style human report: what was checked, the verdict, the counterexample as numbered
    actions with the variables each one changed, and the statistics."""
    lines = [
        f"Model checking {Path(result.spec).name or '?'} with {Path(result.config).name or '?'} "
        f"(engine: {result.engine})"
    ]
    if result.result == "success":
        lines += [line for line in result.message.splitlines() if line.startswith("Warning:")]
        lines.append("Model checking completed. No error has been found.")
    elif result.result == "error":
        # The engine's message may carry its own "Error: " and the counters printed below.
        summary = f"{result.states_generated} states generated, "
        text = [line for line in result.message.splitlines() if not line.startswith(summary)]
        lines += [f"Error: {line.removeprefix('Error: ')}" if k == 0 else line for k, line in enumerate(text)]
    else:
        headline = {
            "safety failure": f"Invariant {result.violated} is violated.",
            "liveness failure": f"Temporal property {result.violated} is violated.",
            "deadlock failure": "Deadlock reached.",
        }[result.result]
        lines.append(f"Error: {headline}")
        if result.trace:
            lines.append("Error: The behavior up to this point is:")
    previous: dict[str, str] | None = None
    for number, step in enumerate(result.trace, start=1):
        marker = ""
        if result.loop_back_to is not None and number - 1 == result.loop_back_to:
            marker = "   <- loop starts here"
        lines.append(f"{number}: {step.action}{marker}")
        changed = _changed(previous, step.state)
        if not changed and previous is not None:
            lines.append("     (no variable changed)")
        for name, value in changed.items():
            lines.append(f"     {name} = {value}")
        previous = step.state
    if result.loop_back_to is not None and result.trace:
        lines.append(f"Back to state {result.loop_back_to + 1}: the behavior repeats from there forever.")
    lines.append(
        f"{result.states_generated} states generated, {result.distinct_states} distinct states found, "
        f"{result.states_left_on_queue} states left on queue."
    )
    lines.append(f"The depth of the complete state graph search is {result.depth}.")
    lines.append(f"Finished in {result.seconds:.2f}s (exit status {result.exit_code}).")
    return "\n".join(lines)
