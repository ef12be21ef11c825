"""What a checker reports: one verdict per manager x checker, with the violation and its step list."""

from __future__ import annotations

import re
import traceback
from dataclasses import dataclass, field
from typing import Any

CRASH = "Crash"
MAX_TRACE_LINES = 60


@dataclass
class CheckerVerdict:
    """One manager x checker verdict; ``trace`` is the step list that shows the violation."""

    manager: str
    checker: str
    result: str = "success"  # or "violation"
    invariant: str | None = None
    error: str | None = None
    trace: list[str] = field(default_factory=list)
    seconds: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "manager": self.manager,
            "checker": self.checker,
            "result": self.result,
            "invariant": self.invariant,
            "error": self.error,
            "trace": list(self.trace),
            "seconds": round(self.seconds, 2),
            **({"details": self.details} if self.details else {}),
        }


def crash_message(error: BaseException) -> str:
    """``Type: message`` and the innermost vLLM frame that raised (file:line in function)."""
    frames = traceback.extract_tb(error.__traceback__)
    inside = [f for f in frames if "/vllm/" in f.filename.replace("\\", "/")] or frames
    where = ""
    if inside:
        frame = inside[-1]
        path = frame.filename.replace("\\", "/")
        short = path[path.rfind("/vllm/") + 1:] if "/vllm/" in path else path
        where = f" at {short}:{frame.lineno} in {frame.name}"
    return f"{type(error).__name__}: {error}{where}"


QUOTED = re.compile(r"'([^']+)'")
KEY_NAME = re.compile(r"k\d+")


def requests_named(message: str) -> set[str]:
    """The request ids a violation message quotes (key names such as ``k3`` are not requests)."""
    return {name for name in QUOTED.findall(message) if not KEY_NAME.fullmatch(name)}


def relevant_events(events: list[tuple[int, str]], request_ids: set[str]) -> list[str]:
    """The events that mention one of ``request_ids`` (all events when none is named), as
    ``step N: text`` lines, the last ``MAX_TRACE_LINES`` of them."""
    if request_ids:
        pattern = re.compile(r"\b(" + "|".join(re.escape(r) for r in sorted(request_ids)) + r")\b")
        chosen = [(step, text) for step, text in events if pattern.search(text) or text == "reset_cache"]
    else:
        chosen = list(events)
    lines = [f"step {step}: {text}" for step, text in chosen]
    if len(lines) > MAX_TRACE_LINES:
        lines = [f"... {len(lines) - MAX_TRACE_LINES} earlier event(s) left out", *lines[-MAX_TRACE_LINES:]]
    return lines
