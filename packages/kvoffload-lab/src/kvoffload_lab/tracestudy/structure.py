"""The conversation structure of a block trace: which requests continue an earlier one, and when.

A request *continues* an earlier one when it shares more than its first block with the prompts
before it: its parent is the first request that held the last shared block (for the Mooncake
conversation trace, the previous turn: a turn's prompt is the previous prompt, minus its partial
last block, plus the answer and the new message). A request's *turn* is 1 plus its parent's. The
figures say how well what a CPU tier could know at a block's first sighting (turn, prompt length,
time since the previous turn), or once the request finished (its output length), predicts whether
the conversation comes back, and whether it comes back soon (within ``SOON_REQUESTS`` requests).

``python -m kvoffload_lab.tracestudy.structure TRACE.jsonl`` prints them as JSON.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from typing import Any

from kvoffload_lab.tracestudy.mooncake import TraceRequest, read_trace

# Turns from this one on are counted together.
LAST_TURN_BUCKET = 6
# Lower edges of the buckets of prompt length (full blocks) and of seconds since the previous turn.
PROMPT_BLOCK_EDGES = (0, 8, 16, 32, 64)
SECONDS_SINCE_PREVIOUS_EDGES = (0.0, 60.0, 120.0, 240.0, 480.0)
# ... and of output tokens.
OUTPUT_TOKEN_EDGES = (0, 10, 50, 100, 200, 400, 800, 1600)
# "Soon": a next turn within this many requests (about the reach of a 4,000-block CPU tier on the
# Mooncake conversation trace, whose requests bring ~14 new blocks each).
SOON_REQUESTS = 300


def _quartiles(values: Sequence[float]) -> list[float] | None:
    if not values:
        return None
    ordered = sorted(values)
    return [ordered[len(ordered) * q // 4] for q in (1, 2, 3)]


def _share_by_bucket(
    values: dict[int, float], edges: Sequence[float], nexts: dict[int, int]
) -> list[dict[str, Any]]:
    """Per bucket of ``values`` (request index -> value; bucket = last edge <= value): how many
    requests, and the share of them with a next turn, and with one within ``SOON_REQUESTS``."""
    rows = []
    for at, low in enumerate(edges):
        high = edges[at + 1] if at + 1 < len(edges) else math.inf
        members = [i for i, value in values.items() if low <= value < high]
        soon = sum(i in nexts and nexts[i] - i <= SOON_REQUESTS for i in members)
        rows.append({
            "from": low,
            "requests": len(members),
            "with_next_turn": sum(i in nexts for i in members) / len(members) if members else None,
            "with_next_turn_soon": soon / len(members) if members else None,
        })
    return rows


def _log_correlation(pairs: Sequence[tuple[int, int]]) -> float | None:
    if len(pairs) < 2:
        return None
    xs = [math.log(a) for a, _ in pairs]
    ys = [math.log(b) for _, b in pairs]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    cov = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
    spread = math.sqrt(sum((x - mean_x) ** 2 for x in xs) * sum((y - mean_y) ** 2 for y in ys))
    return cov / spread if spread else None


def conversation_structure(requests: Sequence[TraceRequest]) -> dict[str, Any]:
    """Parents, turns and next turns of ``requests`` (in arrival order); see the module docstring."""
    owner: dict[int, int] = {}
    parent: list[int | None] = []
    turn: list[int] = []
    next_turn: list[int | None] = [None] * len(requests)
    for index, request in enumerate(requests):
        shared = 0
        for key in request.hash_ids:
            if key not in owner:
                break
            shared += 1
        earlier = owner[request.hash_ids[shared - 1]] if shared >= 2 else None
        parent.append(earlier)
        turn.append(1 if earlier is None else turn[earlier] + 1)
        if earlier is not None and next_turn[earlier] is None:
            next_turn[earlier] = index
        for key in request.hash_ids:
            owner.setdefault(key, index)
    # Request index -> the index of its next turn, for the requests that have one.
    nexts = {index: later for index, later in enumerate(next_turn) if later is not None}
    since_previous = {
        i: (request.timestamp - requests[earlier].timestamp) / 1000
        for i, (request, earlier) in enumerate(zip(requests, parent, strict=True))
        if earlier is not None
    }
    by_turn = []
    for bucket in range(1, LAST_TURN_BUCKET + 1):
        members = [i for i, t in enumerate(turn) if min(t, LAST_TURN_BUCKET) == bucket]
        gaps = [nexts[i] - i for i in members if i in nexts]
        by_turn.append({
            "turn": bucket if bucket < LAST_TURN_BUCKET else f"{bucket}+",
            "requests": len(members),
            "with_next_turn": len(gaps) / len(members) if members else None,
            "requests_to_next_turn_quartiles": _quartiles(gaps),
        })
    return {
        "requests": len(requests),
        "continuing_earlier": sum(p is not None for p in parent),
        "with_next_turn": len(nexts) / len(requests) if requests else None,
        "soon_requests": SOON_REQUESTS,
        "with_next_turn_soon": (
            sum(later - i <= SOON_REQUESTS for i, later in nexts.items()) / len(requests) if requests else None
        ),
        "requests_to_next_turn_quartiles": _quartiles([later - i for i, later in nexts.items()]),
        "seconds_to_next_turn_quartiles": _quartiles(
            [(requests[later].timestamp - requests[i].timestamp) / 1000 for i, later in nexts.items()]
        ),
        "by_turn": by_turn,
        "by_prompt_blocks": _share_by_bucket(
            {i: request.full_blocks() for i, request in enumerate(requests)}, PROMPT_BLOCK_EDGES, nexts
        ),
        "by_seconds_since_previous_turn": _share_by_bucket(
            since_previous, SECONDS_SINCE_PREVIOUS_EDGES, nexts
        ),
        "by_output_tokens": _share_by_bucket(
            {i: request.output_length for i, request in enumerate(requests)}, OUTPUT_TOKEN_EDGES, nexts
        ),
        # Log of the gap (in requests) from the previous turn against the log of the gap to the next.
        "gap_log_correlation": _log_correlation(
            [(i - p, nexts[i] - i) for i, p in enumerate(parent) if p is not None and i in nexts]
        ),
    }


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m kvoffload_lab.tracestudy.structure TRACE.jsonl")
    print(json.dumps(conversation_structure(read_trace(sys.argv[1]).requests), indent=2))
