"""What every connector's judge reads of a run the same way: its first failure from inside the
engine, and its tokens against the run without offloading."""

from __future__ import annotations

from typing import Any

from kvoffload.vllm.check.findings import CRASH


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
