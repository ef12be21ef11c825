"""``kvoffload explore`` and ``kvoffload mutants``: exit statuses, JSON keys, human output."""

from __future__ import annotations

import json

import pytest

from kvoffload_lab.cli import main
from kvoffload_lab.verify.bugzoo import MUTANTS

RESULT_KEYS = {"states", "transitions", "complete", "depth", "seconds", "cpu_seconds", "states_per_s", "violations"}


def test_explore_clean_run_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explore", "--requests", "1", "--chunks", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) >= RESULT_KEYS
    assert data["violations"] == [] and data["complete"] is True and data["states"] > 0


def test_explore_mutant_exits_one_with_trace(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["explore", "--requests", "2", "--chunks", "2", "--mutant", "preempt_without_flush", "--json"]
    assert main(args) == 1
    data = json.loads(capsys.readouterr().out)
    (violation,) = data["violations"]
    assert violation["invariant"] == "GpuBlockFence"
    assert violation["trace"] and {"action", "changed"} <= set(violation["trace"][0])


def test_explore_human_output_is_a_numbered_counterexample(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explore", "--requests", "1", "--chunks", "2", "--mutant", "eager_finish_signal"]) == 1
    out = capsys.readouterr().out
    assert "mutant eager_finish_signal (vLLM #49635)" in out
    assert "Invariant NoManagerCallAfterSignal violated" in out
    assert "  1. finish(r1)" in out


def test_explore_bounds_are_reported(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explore", "--requests", "2", "--chunks", "2", "--max-states", "50", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["complete"] is False and data["states"] == 50


@pytest.mark.parametrize(
    "args",
    [
        ["--mutant", "no_such_bug"], ["--requests", "0"], ["--chunks", "1"], ["--max-states", "0"],
        ["--requests", "1000000"], ["--chunks", "64"],
    ],
)
def test_explore_usage_errors_exit_two(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explore", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kvoffload explore: error:") and err.count("\n") == 1


def test_explore_set_up_does_not_grow_factorially(capsys: pytest.CaptureFixture[str]) -> None:
    """Request-order renamings are made when a fingerprint needs them, not all n! up front."""
    from kvoffload_lab.verify.explore_model import OffloadExploreModel

    model = OffloadExploreModel(12, 3)
    assert len(model._namings) == 1 + 12  # the identity and one relative renaming per request
    assert main(["explore", "--requests", "12", "--max-states", "30", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["states"] == 30 and data["complete"] is False


def test_mutants_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mutants", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [m["name"] for m in data["mutants"]] == list(MUTANTS)
    for entry in data["mutants"]:
        assert set(entry) == {"name", "source", "invariant", "summary"}


def test_mutants_human(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mutants"]) == 0
    out = capsys.readouterr().out
    for name in MUTANTS:
        assert name in out
