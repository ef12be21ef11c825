"""Speculative decoding: draft tokens are never stored until verified, rejected drafts lower the
computed count (as vLLM does), and a connector deaf to drafts is caught by the integrity check."""

from __future__ import annotations

import json

import pytest

from kvoffload.offload import OffloadingScheduler, SchedulerOutput
from kvoffload.offload.manager import CPUOffloadingManager
from kvoffload_lab.sim.engine import Engine
from kvoffload_lab.sim.runner import SimulationOptions, simulate
from kvoffload_lab.sim.workload import MultiTurnWorkload, WorkloadConfig
from kvoffload_lab.statemachine.explore import explore, format_counterexample
from kvoffload_lab.verify.bugzoo import MUTANTS, explore_model_for
from support import FakeRequest, full_state, scheduler


def _decoding(s: OffloadingScheduler, tokens: int = 7) -> FakeRequest:
    """Request "a" with ``tokens`` tokens, all but the last computed (block size 4, chunk = 1 block)."""
    req = FakeRequest("a", [1], tokens)
    s.get_num_new_matched_tokens(req, 0)
    s.update_state_after_alloc(req, [0, 1, 2], 0)
    s.build_connector_meta(SchedulerOutput({"a": tokens - 1}))
    return req


def test_a_chunk_filled_by_drafts_is_not_stored_until_they_are_verified() -> None:
    s = scheduler()
    req = _decoding(s)  # 6 of 7 tokens computed; chunk 0 (tokens 0-3) already stored
    # Token 6 plus drafts at 7 and 8: chunk 1 (tokens 4-7) now holds draft 7's KV.
    s.build_connector_meta(SchedulerOutput({"a": 3}, num_draft_tokens={"a": 2}))
    assert s.tracker("a").draft_tokens == 2
    # Draft 7 accepted, draft 8 rejected, token 8 sampled: chunk 1 is real and verified now.
    req.block_hashes.append(2)
    req.num_tokens = 9
    meta = s.build_connector_meta(SchedulerOutput({"a": 1}, num_rejected_tokens={"a": 1}))
    assert [job.keys for job in meta.stores] == [(2,)]
    assert s.tracker("a").num_computed_tokens == 9


def test_a_rejected_draft_is_never_stored() -> None:
    s = scheduler()
    req = _decoding(s)
    s.build_connector_meta(SchedulerOutput({"a": 3}, num_draft_tokens={"a": 2}))
    # Both drafts rejected; the sampled token 7 ends chunk 1, whose slot 7 holds draft 7's KV.
    req.block_hashes.append(2)
    req.num_tokens = 8
    meta = s.build_connector_meta(SchedulerOutput({}, num_rejected_tokens={"a": 2}))
    assert all(2 not in job.keys for job in meta.stores), "the chunk with a rejected draft's slot was stored"
    assert s.tracker("a").num_computed_tokens == 7, "the final sampled token is not computed"
    s.request_finished(req, [0, 1, 2])
    final = s.build_connector_meta(SchedulerOutput())
    assert all(2 not in job.keys for job in final.stores), "the final sampled token's slot was stored"


def test_a_finished_request_never_stores_its_unverified_drafts() -> None:
    s = scheduler()
    req = _decoding(s)
    s.build_connector_meta(SchedulerOutput({"a": 3}, num_draft_tokens={"a": 2}))
    req.block_hashes.append(2)
    req.num_tokens = 9
    s.request_finished(req, [0, 1, 2])
    assert s.tracker("a").draft_tokens == 0
    meta = s.build_connector_meta(SchedulerOutput(num_rejected_tokens={"a": 0}))
    assert all(2 not in job.keys for job in meta.stores)


@pytest.mark.parametrize(
    ("output", "message"),
    [
        (SchedulerOutput({"a": 1}), "'a' is scheduled with 2 unverified draft token\\(s\\) of its last step"),
        (SchedulerOutput({"a": 1}, num_rejected_tokens={"a": 3}), "num_rejected_tokens=3 exceeds its 2 unverified"),
        (SchedulerOutput({"a": 1}, num_rejected_tokens={"a": -1}), "num_rejected_tokens must be >= 0, got -1"),
        (SchedulerOutput({"a": 3}, num_draft_tokens={"a": 4}, num_rejected_tokens={"a": 0}),
         "num_draft_tokens=4 exceeds its 3 scheduled token"),
        (SchedulerOutput({}, num_draft_tokens={"a": 1}), "num_draft_tokens for a request not scheduled"),
        (SchedulerOutput({}, num_rejected_tokens={"zz": 1}), "KnownRequest"),
    ],
)
def test_malformed_draft_reports_are_rejected_and_change_nothing(output: SchedulerOutput, message: str) -> None:
    s = scheduler()
    _decoding(s)
    s.build_connector_meta(SchedulerOutput({"a": 3}, num_draft_tokens={"a": 2}))
    before = full_state(s)
    with pytest.raises((ValueError, RuntimeError), match=message):
        s.build_connector_meta(output)
    assert full_state(s) == before


def test_simulation_with_drafts_and_faults_is_clean() -> None:
    result = simulate(SimulationOptions(backend="model", speculative_tokens=3, faults=0.05))
    assert result["draft_tokens"] > 0 and 0 < result["accepted_draft_tokens"] < result["draft_tokens"]
    assert (result["violations"], result["leaks"], result["integrity_failures"]) == (0, 0, 0)
    assert result["integrity_checked_blocks"] > 0


@pytest.mark.parametrize("delay", [0, 1])
def test_the_integrity_check_catches_a_connector_that_stores_drafts(delay: int) -> None:
    options = SimulationOptions(backend="model", speculative_tokens=3, delay=delay)
    config = options.engine_config()
    mutant = MUTANTS["store_rejected_drafts"]
    engine = Engine(config, mutant.make_scheduler(config.offload_config(), CPUOffloadingManager(512, config.policy)))
    workload = MultiTurnWorkload(WorkloadConfig(users=options.users, turns=options.turns, seed=options.seed))
    workload.attach(engine)
    while not (workload.done and engine.idle) and engine.stats.steps < 5_000:
        workload.tick(engine)
        engine.step()
    assert engine.stats.integrity_failures > 0


def test_explorer_with_drafts_finds_no_violation_in_our_code() -> None:
    from kvoffload_lab.verify.explore_model import OffloadExploreModel

    result = explore(OffloadExploreModel(1, 3, speculative_decoding=True))
    assert result.ok, [format_counterexample(v) for v in result.violations]
    assert result.complete and result.states > 976  # more than the same model without drafts


def test_explorer_catches_the_draft_storing_mutant_in_three_actions() -> None:
    result = explore(explore_model_for(MUTANTS["store_rejected_drafts"], 1, 2))
    assert result.violations
    names = [step.action for step in result.violations[0].trace]
    assert len(names) == 3 and "drafts" in names[1], names



def test_explore_command_adds_draft_steps_on_request(capsys: pytest.CaptureFixture[str]) -> None:
    from kvoffload_lab.cli import main

    figures = []
    for flags in ([], ["--speculative-decoding"]):
        assert main(["explore", "--requests", "1", "--chunks", "2", "--json", *flags]) == 0
        figures.append(json.loads(capsys.readouterr().out))
    assert figures[1]["model"]["speculative_decoding"] is True
    assert figures[1]["states"] > figures[0]["states"]
