"""`kvoffload bench scheduler`: its JSON reports the figures docs/benchmarks.md quotes (never timed)."""

from __future__ import annotations

import json

import pytest

from kvoffload_lab.cli import main


def test_bench_scheduler_json_reports_each_size(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "scheduler", "--json", "--live", "16", "32", "--steps", "32", "--lifetimes", "40",
                 "--clock", "cpu"]) == 0
    report = json.loads(capsys.readouterr().out)
    results = report["results"]
    assert [result["live_requests"] for result in results] == [16, 32]
    # Per request: one store of its prompt's chunks in the first step, then one per block filled
    # (two in 32 steps, each stored the step after; prompts are staggered over the 16 positions of
    # a block, so one request's last fill falls after the run).
    assert results[0]["stores"] == 3 * 16 - 1
    assert results[1]["stores"] == 2 * results[0]["stores"]
    for result in results:
        assert result["clock"] == "cpu"
        assert result["connector_us_per_request_step"] > 0
        assert result["full_gc_collections"] >= 0
        assert set(result["lifecycle_us"]) == {"shipped", "transitions_per_request", "dict_table"}
