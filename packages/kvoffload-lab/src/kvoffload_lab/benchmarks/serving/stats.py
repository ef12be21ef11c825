"""Percentiles and the summary of one workload's timed requests."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Timing:
    """One streamed completion as the client saw it (seconds since the run's start)."""

    start: float
    ttft: float
    # Gaps between successive streamed tokens after the first: one engine step each when every
    # running request decodes.
    token_gaps: tuple[float, ...]
    end: float
    prompt_tokens: int
    output_tokens: int
    cached_tokens: int | None
    text: str = field(default="", compare=False)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values``, linear between the closest ranks (numpy's
    default); NaN for no values."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} outside 0-100")
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def ttft_summary(timings: Sequence[Timing]) -> dict[str, float]:
    """Median, p90 and p99 time to first token, in milliseconds."""
    ttfts = [t.ttft * 1000 for t in timings]
    return {"median_ms": percentile(ttfts, 50), "p90_ms": percentile(ttfts, 90), "p99_ms": percentile(ttfts, 99),
            "requests": len(ttfts)}


def throughput(timings: Sequence[Timing], seconds: float) -> dict[str, float]:
    """Requests, output tokens and all tokens (prompt and output) per second over ``seconds``."""
    if seconds <= 0:
        raise ValueError(f"throughput over {seconds} s")
    output = sum(t.output_tokens for t in timings)
    prompt = sum(t.prompt_tokens for t in timings)
    return {"requests_per_s": len(timings) / seconds, "output_tokens_per_s": output / seconds,
            "total_tokens_per_s": (prompt + output) / seconds, "seconds": seconds}


def step_time_ms(timings: Sequence[Timing]) -> float:
    """The steady-state step time: the median gap between streamed tokens after each request's
    first, in milliseconds (NaN when no request streamed two tokens)."""
    return percentile([gap * 1000 for t in timings for gap in t.token_gaps], 50)
