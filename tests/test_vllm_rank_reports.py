"""Tensor-parallel ranks' reports combined: a job counts only once every rank reported it, and
succeeded only if it succeeded on every rank (no vLLM needed)."""

from __future__ import annotations

import pytest

from kvoffload.tiers.protocol import CORRUPT, FAULT, MISS, OK, TierOutcome
from kvoffload.vllm.rank_reports import RankReport, RankTally


def test_a_job_completes_only_when_every_rank_reported_it() -> None:
    tally = RankTally(2)
    assert tally.add([RankReport(0, {7: True})]) == ({}, ())
    assert tally.waiting() == ["job 7: ranks [0] of 2 reported"]
    assert tally.add([RankReport(1, {7: True, 8: True})]) == ({7: True}, ())
    assert tally.add([RankReport(0, {8: False})]) == ({8: False}, ())
    assert tally.waiting() == []


def test_tier_outcomes_combine_to_the_worst_per_key() -> None:
    tally = RankTally(2)
    tally.add([RankReport(0, {}, (TierOutcome(3, (OK, OK, OK, MISS), 2),))])
    _, outcomes = tally.add([RankReport(1, {}, (TierOutcome(3, (OK, CORRUPT, FAULT, OK), 1),))])
    assert outcomes == (TierOutcome(3, (OK, CORRUPT, FAULT, MISS), 1),)


def test_one_rank_is_the_identity() -> None:
    tally = RankTally(1)
    outcome = TierOutcome(4, (OK, MISS))
    assert tally.add([RankReport(0, {1: True}, (outcome,))]) == ({1: True}, (outcome,))


@pytest.mark.parametrize(
    ("reports", "message"),
    [
        ([RankReport(2, {1: True})], "a report from rank 2; this engine has 2 rank\\(s\\)"),
        ([RankReport(0, {1: True}), RankReport(0, {1: True})], "rank 0 reported job 1 twice"),
    ],
)
def test_impossible_reports_are_refused(reports: list[RankReport], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RankTally(2).add(reports)
