"""The parallel explorer visits exactly the sequential full search's states and transitions, and
finds the same first violation (invariant and length) on every bug-zoo mutant."""

from __future__ import annotations

import json
import multiprocessing
import os
import threading

import pytest

from kvoffload_lab.cli import main
from kvoffload_lab.statemachine.explore import explore
from kvoffload_lab.statemachine.explore_parallel import _work, explore_parallel
from kvoffload_lab.verify.bugzoo import MUTANTS, Mutant, explore_model_for
from kvoffload_lab.verify.explore_model import OffloadExploreModel


@pytest.mark.parametrize(
    ("args", "options"),
    [
        ((1, 3), {}),
        ((2, 2), {"allow_failures": False, "max_resets": 0}),
    ],
)
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_parallel_search_has_the_full_search_counts(
    args: tuple[int, int], options: dict[str, object], workers: int
) -> None:
    full = explore(OffloadExploreModel(*args, **options), reduce=False)  # type: ignore[arg-type]
    parallel = explore_parallel(OffloadExploreModel(*args, **options), workers)  # type: ignore[arg-type]
    assert parallel.ok and parallel.complete
    assert (parallel.states, parallel.transitions, parallel.depth) == (full.states, full.transitions, full.depth)


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("HYPOTHESIS_PROFILE") != "thorough",
    reason="the default 2 x 3 full search takes about a minute on two quiet cores; make test-thorough runs it",
)
def test_default_two_by_three_full_search_counts_are_pinned() -> None:
    # What `kvoffload explore` searches by default (two workers, the full search): its exact counts.
    # 54,205 states, 174,120 transitions, depth 20 while a step that preempts could follow an
    # admission in its schedule() call; 129,118 states, 490,974 transitions, depth 25 before the
    # explorer's engine used the
    # simulator's BlockPool (freed blocks stay cached, so a preempted request hits its own);
    # 421,816 states, 1,778,346 transitions, depth 24 (and a false alarm) while reset_cache could
    # fall between an admission and its step's build, where vLLM never calls it.
    result = explore_parallel(OffloadExploreModel(2, 3), 2)
    assert result.ok and result.complete
    assert (result.states, result.transitions, result.depth) == (40_673, 126_837, 20)


@pytest.mark.parametrize("mutant", list(MUTANTS.values()), ids=list(MUTANTS))
def test_parallel_search_finds_the_same_violation(mutant: Mutant) -> None:
    sequential = explore(explore_model_for(mutant, 2, 2), max_states=50_000, reduce=False)
    parallel = explore_parallel(explore_model_for(mutant, 2, 2), 2, max_states=50_000)
    expected = [(v.invariant, len(v.trace)) for v in sequential.violations]
    assert [(v.invariant, len(v.trace)) for v in parallel.violations] == expected != []
    # The trace is a real path: replaying it from the initial state reproduces the violation.
    assert parallel.violations[0].trace


def test_command_modes_agree(capsys: pytest.CaptureFixture[str]) -> None:
    runs = {}
    for extra in (["--workers", "2"], ["--workers", "1"], ["--no-reduction"]):
        assert main(["explore", "--requests", "1", "--chunks", "3", "--json", *extra]) == 0
        runs[tuple(extra)] = json.loads(capsys.readouterr().out)
    # 1204 states and 3373 transitions while a step that preempts could follow an admission in its
    # schedule() call, which vLLM never does; 2334 / 7359 before the explorer's engine used the
    # simulator's BlockPool: the preempted request now hits its own freed blocks, still cached,
    # instead of recomputing or loading them (2315 / 7328 before reset_cache followed vLLM's call
    # order, only between steps).
    assert {run["states"] for run in runs.values()} == {976}
    assert runs[("--workers", "2")]["workers"] == 2 and runs[("--no-reduction",)]["reduction"] == "none"
    assert runs[("--no-reduction",)]["transitions"] == runs[("--workers", "2")]["transitions"] == 2630


def test_workers_must_be_positive() -> None:
    with pytest.raises(ValueError, match="workers must be at least 1"):
        explore_parallel(OffloadExploreModel(1, 2), 0)


class CountsUp:
    """One process counting up, one state per number."""

    def initial(self) -> int:
        return 0

    def actions(self, s: int) -> list[str]:
        return ["inc"]

    def step(self, s: int, action: str) -> int:
        return s + 1

    def invariants(self, s: int) -> list[tuple[str, str]]:
        return []

    def fingerprint(self, s: int) -> int:
        return s


class CountsToThreeThenCtrlC(CountsUp):
    """Ctrl-C arrives while the coordinator steps the count from 3."""

    def step(self, s: int, action: str) -> int:
        if s == 3:
            raise KeyboardInterrupt
        return s + 1


def test_parallel_ctrl_c_returns_the_figures_reached_so_far() -> None:
    result = explore_parallel(CountsToThreeThenCtrlC(), 2)
    assert result.interrupted and not result.complete
    assert result.states == 4  # 0, 1, 2, 3


def test_worker_told_to_stop_mid_level_returns_quietly() -> None:
    """The coordinator stops (Ctrl-C) after a worker sent its candidates: the worker gets None
    where it waits for its accepted states, and must return, not raise in its process."""
    coordinator, worker_end = multiprocessing.Pipe()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            _work(CountsUp(), [(0, 0, 0)], worker_end, "none", lambda: None)
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    coordinator.send([0])
    transitions, candidates, found = coordinator.recv()
    assert (transitions, [c[2] for c in candidates], found) == (1, [1], [])
    coordinator.send(None)
    thread.join(timeout=10)
    assert not thread.is_alive() and errors == []
