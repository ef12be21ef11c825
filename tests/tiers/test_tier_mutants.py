"""The explorer over the real scheduler + tiering manager: our code passes a small model with one
file tier completely; every tiering mutant is caught with a short counterexample."""

from __future__ import annotations

import json

import pytest

from kvoffload_lab.cli import main
from kvoffload_lab.statemachine.explore import explore, format_counterexample
from kvoffload_lab.verify.tiering.explore_model import TierExploreModel
from kvoffload_lab.verify.tiering.mutants import TIER_MUTANTS, TierMutant

MAX_TRACE = 15


def test_our_tiering_manager_passes_two_requests_completely() -> None:
    result = explore(TierExploreModel(2, 2))
    assert result.ok, [format_counterexample(v) for v in result.violations]
    assert result.complete and result.states > 5000  # promotions, corrupt chunks and faults in play


def test_our_tiering_manager_passes_a_shared_tier_with_probes_and_server_evictions() -> None:
    result = explore(TierExploreModel(2, 1, shared=True))
    assert result.ok, [format_counterexample(v) for v in result.violations]
    assert result.complete and result.states > 1000


@pytest.mark.parametrize("mutant", list(TIER_MUTANTS.values()), ids=list(TIER_MUTANTS))
def test_tier_mutant_is_caught_with_a_short_trace(mutant: TierMutant) -> None:
    model = TierExploreModel(2, 2, make_manager=mutant.make_manager)
    result = explore(model, max_states=20_000, drain=mutant.drain)  # type: ignore[arg-type]
    assert result.violations, f"{mutant.name} was not caught ({result.states} states)"
    violation = result.violations[0]
    assert violation.invariant in mutant.caught_by, format_counterexample(violation)
    assert 1 <= len(violation.trace) <= MAX_TRACE, format_counterexample(violation)


def test_the_command_explores_a_tier_mutant(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["explore", "--tiers", "--chunks", "2", "--mutant", "tier_eager_finalise", "--json"])
    result = json.loads(capsys.readouterr().out)
    assert status == 1
    assert result["violations"][0]["invariant"] in TIER_MUTANTS["tier_eager_finalise"].caught_by
    assert result["model"]["tiers"] == ["cpu", "file"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--mutant", "nope"], "unknown tier mutant 'nope'"), (["--max-states", "0"], "--max-states must be positive")],
)
def test_bad_tier_explore_options_are_one_line_and_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["explore", "--tiers", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_the_zoo_lists_the_tier_mutants(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mutants", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["tier_mutants"]
    assert [entry["name"] for entry in listed] == list(TIER_MUTANTS)
    assert all(entry["source"] and entry["invariant"] for entry in listed)
