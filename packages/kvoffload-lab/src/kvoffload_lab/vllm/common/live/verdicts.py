"""What every connector's judge makes and reads the same way: the verdict's common part, a run's
files, its first failure from inside the engine, its tokens against the run without offloading,
and how a trace line names its request."""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any

from kvoffload_lab.vllm.common.findings import CRASH
from kvoffload_lab.vllm.common.live.logs import DRAIN_FILE, FINDINGS_FILE, TRACE_FILE, read_json, read_ndjson


@dataclass
class LiveVerdict:
    """One run's verdict, the part every connector's has (a connector's judge adds its own fields)."""

    workload: str
    seed: int
    _: KW_ONLY
    invariant: str | None = None
    error: str | None = None
    trace: list[str] = field(default_factory=list)
    resets: list[str] = field(default_factory=list)
    seconds: float = 0.0
    folder: str = ""

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class RunFiles:
    """What a run wrote from inside the engine (:mod:`.logs`): its trace, findings and last drain report."""

    folder: Path
    trace_lines: list[dict[str, Any]]
    problems: list[dict[str, Any]]
    drain: dict[str, Any] | None

    @classmethod
    def of(cls, outcome: dict[str, Any]) -> RunFiles:
        """The files of the run the driver's ``outcome`` describes."""
        folder = Path(outcome["folder"])
        return cls(folder, read_ndjson(folder / TRACE_FILE), read_ndjson(folder / FINDINGS_FILE),
                   read_json(folder / DRAIN_FILE))

    @property
    def last_seq(self) -> int:
        """The number of the trace's last line (0 for an empty trace)."""
        return self.trace_lines[-1]["seq"] if self.trace_lines else 0

    def verdict_fields(self, outcome: dict[str, Any]) -> dict[str, Any]:
        """The keyword fields of the run's :class:`LiveVerdict` that the driver's ``outcome`` gives."""
        return {"resets": outcome["resets"], "seconds": outcome["seconds"], "folder": str(self.folder)}


def request_of(line: dict[str, Any]) -> str:
    """A trace line's request as a violation's trace shows it: ``(id)``, or ``()`` for none."""
    return f"({line['id']})" if "id" in line else "()"


def strip_suffix(request_id: str) -> str:
    """``request_id`` as the workload named it: vLLM appends "-<8 hex>" to every id it is given."""
    head, _, tail = request_id.rpartition("-")
    return head if head and len(tail) == 8 else request_id


def token_difference(outcome: dict[str, Any], baseline: dict[str, Any]) -> str | None:
    """The first token of a request that differs from the baseline's (an aborted request's up to the
    shorter of the two), said in a sentence; None when every token is the same."""
    aborted = set(outcome["aborted"])
    for request_id, expected in baseline["tokens"].items():
        got = outcome["tokens"].get(request_id, [])
        length = min(len(got), len(expected)) if request_id in aborted else max(len(got), len(expected))
        for position in range(length):
            mine = got[position] if position < len(got) else None
            theirs = expected[position] if position < len(expected) else None
            if mine != theirs:
                return (f"request '{request_id}' token {position}: {mine} with offloading, {theirs} without "
                        f"({len(got)} vs {len(expected)} tokens)")
    return None


def first_failure(problems: list[dict[str, Any]], outcome: dict[str, Any]) -> tuple[str, str] | None:
    """A run's first failure from inside the engine: a crash before any other finding, then the
    first finding, then the engine's death as the driver saw it (``(invariant, message)``)."""
    crash = next((f for f in problems if f["invariant"] == CRASH), None)
    first = crash or (problems[0] if problems else None)
    if first is not None:
        return first["invariant"], first["message"]
    if outcome["error"]:
        return CRASH, f"the engine died: {outcome['error']}"
    return None
