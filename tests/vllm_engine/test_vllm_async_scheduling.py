"""KVOffloadConnector under vLLM's real AsyncScheduler (and Scheduler, the synchronous control),
with the model-runner stand-in of :mod:`kvoffload_lab.vllm.own.harness` reporting each step's output
one step late: the three checkers pass the connector under both, and catch the mutant that ignores
the one-step delay (:mod:`kvoffload_lab.vllm.own.mutant`) under async scheduling."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: `make check-vllm-engine` installs it in .venv-vllm")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

from kvoffload_lab.vllm.own.build import OwnShape
from kvoffload_lab.vllm.own.explorer import run_explorer
from kvoffload_lab.vllm.own.harness import OwnConfig, OwnHarness
from kvoffload_lab.vllm.own.sim import run_sim
from kvoffload_lab.vllm.own.stateful import run_hypothesis

MUTANT = "scheduled_tokens_as_known"
# Enough of the explorer's search to reach the mutant (5 actions) and the connector's steady cases.
EXPLORE_STATES = 400


def _harness(async_scheduling: bool, mutant: str | None = None) -> OwnHarness:
    return OwnHarness(OwnConfig(shape=OwnShape(), delay=1, async_scheduling=async_scheduling, mutant=mutant))


def test_async_engine_processes_each_output_one_step_late() -> None:
    """Step 2 is scheduled before step 1's sampled token reaches the request; under the
    synchronous control it is there before step 2."""
    for async_scheduling, tokens_after in ((False, [1, 2]), (True, [0, 1])):
        harness = _harness(async_scheduling)
        harness.add_request("a", [1] * 7, 3)
        request = harness.requests["a"].request
        seen = []
        for _ in range(2):
            harness.step()
            seen.append(request.num_output_tokens)
        assert seen == tokens_after and not harness.findings, (async_scheduling, seen, harness.findings)
        harness.drain()
        assert not harness.findings, harness.findings


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_abort_inside_the_next_step_leaves_nothing_held(async_scheduling: bool) -> None:
    """The mutant's interleaving on the unmutated connector: clean under both schedulings."""
    harness = _harness(async_scheduling)
    harness.add_request("a", [1] * 4 + [2] * 3, 3)
    harness.step()
    harness.abort("a", mid_step=True)
    harness.step()
    harness.drain()
    assert not harness.findings and not harness.held(), (harness.findings, harness.trace())


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_mutant_crashes_only_under_async_scheduling(async_scheduling: bool) -> None:
    harness = _harness(async_scheduling, MUTANT)
    harness.add_request("a", [1] * 4 + [2] * 3, 3)
    harness.step()
    harness.abort("a", mid_step=True)
    harness.step()
    harness.drain()
    if async_scheduling:
        assert [f.invariant for f in harness.findings] == ["Crash"] and "IndexError" in harness.findings[0].message
    else:
        assert not harness.findings, harness.findings


@pytest.mark.parametrize("scheduling", ["sync", "async"])
def test_connector_passes_the_simulator(scheduling: str) -> None:
    result = run_sim(scheduling)
    assert result.result == "success", (result.invariant, result.error, result.trace[-20:])
    reached = result.details["reached"]
    # The workload reached what the one-step delay changes: loads, preemptions, aborts in a step,
    # resets and failed transfers.
    for kind in ("load_jobs", "store_jobs", "preemptions", "aborts_mid_step", "aborts", "resets", "failed_transfers"):
        assert reached.get(kind, 0) > 0, (kind, reached)


@pytest.mark.parametrize("scheduling", ["sync", "async"])
def test_connector_passes_hypothesis(scheduling: str) -> None:
    result = run_hypothesis(scheduling)
    assert result.result == "success", (result.invariant, result.error, result.trace)


@pytest.mark.parametrize("scheduling", ["sync", "async"])
def test_connector_passes_the_explorer(scheduling: str) -> None:
    result = run_explorer(scheduling, max_states=EXPLORE_STATES)
    assert result.result == "success", (result.invariant, result.error, result.trace)
    assert result.details["states"] >= EXPLORE_STATES


@pytest.mark.parametrize("checker", ["sim", "hypothesis", "explore"])
def test_every_checker_catches_the_mutant_under_async_scheduling(checker: str) -> None:
    if checker == "sim":
        result = run_sim("async", MUTANT)
    elif checker == "hypothesis":
        result = run_hypothesis("async", MUTANT)
    else:
        result = run_explorer("async", MUTANT, max_states=EXPLORE_STATES)
    assert result.result == "violation" and result.invariant == "Crash", (result.result, result.invariant)
    assert "IndexError" in (result.error or "") and result.trace


def test_the_mutant_passes_the_simulator_and_the_explorer_under_sync_scheduling() -> None:
    """The delay is what the mutant ignores: without it the same searches find nothing."""
    assert run_sim("sync", MUTANT).result == "success"
    assert run_explorer("sync", MUTANT, max_states=EXPLORE_STATES).result == "success"


def test_cli_async_scheduling_exits_0() -> None:
    run = subprocess.run([sys.executable, "-m", "kvoffload_lab.cli", "vllm", "check", "--connector", "kvoffload",
                          "--async-scheduling", "--checker", "sim", "--json"],
                         capture_output=True, text=True, check=False, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert '"connector": "kvoffload"' in run.stdout and '"manager": "async"' in run.stdout
