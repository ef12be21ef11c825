"""One server's figures on every workload, and each server's ratios to the server without offloading."""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from kvoffload_lab.benchmarks.serving.prom import hit_tokens_by_source
from kvoffload_lab.benchmarks.serving.stats import Timing, step_time_ms, throughput, ttft_summary
from kvoffload_lab.benchmarks.serving.workloads import ChatShape, NoReuseShape, Send, TurnResult, run_chat, run_no_reuse

BASELINE = "baseline"
# The goals, as ratios to the server without offloading in the same run.
CHAT_TTFT_GOAL = {"small": 0.5, "prefill": 0.3}
PREFIX_THROUGHPUT_GOAL = 2.0


class Endpoint(Protocol):
    """What the measurement needs of a server."""

    url: str

    def metrics(self) -> str: ...


class Client(Protocol):
    complete: Send

    def close(self) -> None: ...


@dataclass(frozen=True)
class Workloads:
    """What every server runs, in this order; None skips a workload."""

    chat: ChatShape | None
    prefix_repetition: Callable[[str], dict[str, float]] | None  # the server's url -> its figures
    no_reuse: NoReuseShape | None
    chunk_tokens: int


def _timed(timings: list[Timing], seconds: float) -> dict[str, Any]:
    return {"ttft": ttft_summary(timings), "throughput": throughput(timings, seconds),
            "step_time_ms": step_time_ms(timings)}


def chat_report(turns: list[TurnResult]) -> dict[str, Any]:
    """Per turn, and over the reused turns (every turn after the first) together."""
    later = [timing for turn in turns[1:] for timing in turn.timings]
    return {
        "turns": [_timed(turn.timings, turn.seconds) for turn in turns],
        "reused_turns": _timed(later, sum(turn.seconds for turn in turns[1:])) if later else None,
        "cached_tokens_per_turn": [sum(t.cached_tokens or 0 for t in turn.timings) for turn in turns],
    }


def measure_server(endpoint: Endpoint, client: Client, workloads: Workloads) -> dict[str, Any]:
    """Run the workloads on one ready server; each with the prompt tokens by source it served."""
    figures: dict[str, Any] = {}
    before = endpoint.metrics()

    def record(name: str, result: dict[str, Any]) -> None:
        nonlocal before
        after = endpoint.metrics()
        sources = hit_tokens_by_source(before, after, workloads.chunk_tokens)
        figures[name] = {**result, "prompt_tokens_by_source": sources}
        before = after

    if workloads.chat is not None:
        record("chat", chat_report(run_chat(client.complete, workloads.chat)))
    if workloads.prefix_repetition is not None:
        record("prefix_repetition", workloads.prefix_repetition(endpoint.url))
    if workloads.no_reuse is not None:
        no_reuse = run_no_reuse(client.complete, workloads.no_reuse)
        record("no_reuse", _timed(no_reuse.timings, no_reuse.seconds))
    return figures


def _ratio(value: float | None, base: float | None) -> float | None:
    if value is None or base is None or base == 0 or math.isnan(value) or math.isnan(base):
        return None
    return value / base


def _figures(server: dict[str, Any]) -> dict[str, float | None]:
    """The compared figures of one server (None where it did not run the workload)."""
    reused = (server.get("chat") or {}).get("reused_turns") or {}
    prefix = server.get("prefix_repetition") or {}
    no_reuse = server.get("no_reuse") or {}
    return {
        "chat_reused_ttft_median": reused.get("ttft", {}).get("median_ms"),
        "chat_reused_ttft_p90": reused.get("ttft", {}).get("p90_ms"),
        "prefix_repetition_requests_per_s": prefix.get("requests_per_s"),
        "prefix_repetition_ttft_median": prefix.get("ttft_median_ms"),
        "no_reuse_ttft_median": no_reuse.get("ttft", {}).get("median_ms"),
        "no_reuse_requests_per_s": no_reuse.get("throughput", {}).get("requests_per_s"),
        "no_reuse_step_time": no_reuse.get("step_time_ms"),
    }


def ratios(servers: dict[str, dict[str, Any]], model_size: str) -> dict[str, dict[str, Any]]:
    """Each offloading server's figures over the baseline's, and whether the issue's goals hold."""
    if BASELINE not in servers:
        return {}
    base = _figures(servers[BASELINE])
    ttft_goal = CHAT_TTFT_GOAL.get(model_size, CHAT_TTFT_GOAL["small"])
    result = {}
    for name, server in servers.items():
        if name == BASELINE:
            continue
        figures = _figures(server)
        ratio = {key: _ratio(value, base[key]) for key, value in figures.items()}
        goals = {
            f"chat_reused_ttft_median_and_p90_at_most_{ttft_goal}x": _holds(
                [ratio["chat_reused_ttft_median"], ratio["chat_reused_ttft_p90"]], lambda r: r <= ttft_goal),
            f"prefix_repetition_requests_per_s_at_least_{PREFIX_THROUGHPUT_GOAL}x": _holds(
                [ratio["prefix_repetition_requests_per_s"]], lambda r: r >= PREFIX_THROUGHPUT_GOAL),
        }
        result[name] = {**ratio, "goals": goals}
    return result


def _holds(values: list[float | None], test: Callable[[float], bool]) -> bool | None:
    if any(value is None for value in values):
        return None
    return all(test(value) for value in values if value is not None)


# Options that only say where this machine kept its files: they change no figure, and a recorded
# command keeps none of them, so that it replays in any checkout.
LOCAL_OPTIONS = frozenset(("--work-dir", "--out", "--plot"))


def replay_command(script: str, options: list[str]) -> str:
    """The command a report records: ``python`` and ``script`` as a path inside the repository,
    then ``options`` without :data:`LOCAL_OPTIONS` (``--name value`` or ``--name=value``)."""
    kept: list[str] = []
    skip_value = False
    for option in options:
        if skip_value:
            skip_value = False
            continue
        name = option.split("=", 1)[0]
        if name in LOCAL_OPTIONS:
            skip_value = "=" not in option
            continue
        kept.append(option)
    return shlex.join(["python", script, *kept])
