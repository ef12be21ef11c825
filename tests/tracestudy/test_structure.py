"""Conversation structure of a block trace: parents, turns, next turns, on a hand-built trace."""

from __future__ import annotations

import pytest

from kvoffload_lab.tracestudy.mooncake import TraceRequest
from kvoffload_lab.tracestudy.structure import conversation_structure


def _request(at: int, ids: list[int]) -> TraceRequest:
    return TraceRequest(at + 1, at * 1000.0, len(ids) * 512, 10, tuple(ids))


def test_turns_and_next_turns() -> None:
    trace = [
        _request(0, [1, 2, 3]),  # conversation A, turn 1
        _request(1, [1, 7, 8]),  # shares only the first block: a new conversation, turn 1
        _request(2, [1, 2, 3, 4]),  # A, turn 2 (extends request 0)
        _request(3, [1, 5]),  # new, turn 1
        _request(4, [1, 2, 3, 4, 6]),  # A, turn 3 (extends request 2)
        _request(5, [1, 2, 9]),  # shares two blocks with request 0: continues it (a branch)
    ]
    data = conversation_structure(trace)
    assert data["requests"] == 6
    assert data["continuing_earlier"] == 3
    # Requests 0 and 2 have a next turn (0's first one is request 2, two requests later; 2's is 4).
    assert data["with_next_turn"] == 2 / 6
    assert data["requests_to_next_turn_quartiles"] == [2, 2, 2]
    assert data["seconds_to_next_turn_quartiles"] == [2.0, 2.0, 2.0]
    first, second, third = data["by_turn"][:3]
    assert (first["requests"], first["with_next_turn"]) == (3, 1 / 3)
    assert (second["requests"], second["with_next_turn"]) == (2, 1 / 2)  # requests 2 and 5
    assert (third["requests"], third["with_next_turn"]) == (1, 0)
    assert third["requests_to_next_turn_quartiles"] is None
    assert all(row["requests"] == 0 and row["with_next_turn"] is None for row in data["by_turn"][3:])
    # Every prompt is under 8 blocks; every continuation came within a minute of its parent.
    row = {"from": 0, "requests": 6, "with_next_turn": 2 / 6, "with_next_turn_soon": 2 / 6}
    assert data["by_prompt_blocks"][0] == row
    assert all(row["requests"] == 0 for row in data["by_prompt_blocks"][1:])
    assert data["by_seconds_since_previous_turn"][0] == {
        "from": 0.0, "requests": 3, "with_next_turn": 1 / 3, "with_next_turn_soon": 1 / 3,
    }
    # Every request asked for 10 output tokens: all in the 10-49 bucket.
    assert [row["requests"] for row in data["by_output_tokens"]] == [0, 6, 0, 0, 0, 0, 0, 0]
    assert data["with_next_turn_soon"] == 2 / 6 and data["soon_requests"] == 300
    assert data["gap_log_correlation"] is None  # one request has both a previous and a next turn


def test_gap_correlation_follows_the_gaps() -> None:
    # Two conversations whose turns come 1 then 1 request apart, and 3 then 3 apart (interleaved
    # with one-off requests): the gaps before and after agree, so the correlation is 1.
    ids = {0: [1, 2], 1: [1, 2, 3], 2: [1, 2, 3, 4], 3: [1, 50], 4: [1, 60], 5: [1, 5, 6], 6: [1, 70],
           7: [1, 80], 8: [1, 5, 6, 7], 9: [1, 90], 10: [1, 91], 11: [1, 5, 6, 7, 8]}
    data = conversation_structure([_request(at, ids[at]) for at in range(12)])
    assert data["gap_log_correlation"] == 1.0


def test_soon_counts_only_next_turns_within_the_horizon(monkeypatch: pytest.MonkeyPatch) -> None:
    import kvoffload_lab.tracestudy.structure as structure

    # Conversation A comes back 1 request later, B 3 requests later; "soon" is 2 requests.
    ids = {0: [1, 2], 1: [1, 2, 3], 2: [1, 5, 6], 3: [1, 70], 4: [1, 80], 5: [1, 5, 6, 7]}
    trace = [_request(at, ids[at]) for at in range(6)]
    monkeypatch.setattr(structure, "SOON_REQUESTS", 2)
    data = conversation_structure(trace)
    assert data["with_next_turn"] == 2 / 6 and data["with_next_turn_soon"] == 1 / 6
