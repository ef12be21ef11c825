"""Conformance: the embedded checker against independent Python enumerations of each spec."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

import tlaplus_models as M
from tlacheck import check_model
from tlacheck.result import (
    EXIT_SUCCESS,
    EXIT_VIOLATION_DEADLOCK,
    EXIT_VIOLATION_LIVENESS,
    EXIT_VIOLATION_SAFETY,
    CheckResult,
)

SPECS = Path(__file__).parent / "specs"


def run(spec: str, cfg: str | None = None) -> CheckResult:
    result = check_model(SPECS / f"{spec}.tla", SPECS / f"{cfg or spec}.cfg")
    assert result.engine == "embedded"
    return result


def assert_success(r: CheckResult, ex: M.Explored) -> None:
    assert r.result == "success", r.message
    assert r.exit_code == EXIT_SUCCESS
    assert r.violated is None and r.trace == []
    assert (r.distinct_states, r.states_generated, r.depth) == (ex.distinct, ex.generated, ex.depth)
    assert r.states_left_on_queue == 0
    assert f"{ex.generated} states generated, {ex.distinct} distinct states found, 0 states left on queue." in (
        r.message
    )


def ints(step_state: dict[str, str], *names: str) -> tuple[int, ...]:
    return tuple(int(step_state[n]) for n in names)


# ---- safety --------------------------------------------------------------------------------

def test_diehard_shortest_counterexample() -> None:
    ex = M.explore([(0, 0)], M.diehard_succ)
    r = run("DieHard")
    assert r.result == "safety failure" and r.violated == "NotSolved"
    assert r.exit_code == EXIT_VIOLATION_SAFETY
    assert len(r.trace) == M.shortest_to(ex, lambda s: s[1] == 4) == 7
    assert r.trace[0].action == "Initial predicate"
    states = [ints(step.state, "small", "big") for step in r.trace]
    assert states[0] == (0, 0) and states[-1][1] == 4
    for a, b in itertools.pairwise(states):
        assert b in M.diehard_succ(a)
    names = {"FillSmall", "FillBig", "EmptySmall", "EmptyBig", "SmallToBig", "BigToSmall"}
    assert all(step.action in names for step in r.trace[1:])


def test_two_phase_commit() -> None:
    assert_success(run("TwoPhase"), M.explore(M.twophase_init(), M.twophase_succ))


def test_peterson_mutual_exclusion_and_starvation_freedom() -> None:
    ex = M.explore(M.PETERSON_INIT, M.peterson_succ)
    assert not any(k[0] == ("cs", "cs") for k in ex.parent)
    assert_success(run("Peterson"), ex)


def test_bounded_fifo_channel() -> None:
    assert_success(run("Channel"), M.explore([((), "none", 0)], M.channel_succ))


def test_instance_with_and_recursion() -> None:
    ex = M.explore([(0, 0)], M.instance_succ)
    assert_success(run("InstanceSpec"), ex)
    r = run("InstanceSpec", "InstanceSpecFull")
    assert r.result == "safety failure" and r.violated == "NotBothFull"
    assert len(r.trace) == M.shortest_to(ex, lambda s: s == (2, 3)) == 6
    assert ints(r.trace[-1].state, "x", "y") == (2, 3)


def test_symmetry_reduction_counts_orbits() -> None:
    init = [("idle", "idle", "idle")]
    plain = M.explore(init, M.symmetric_succ)
    reduced = M.explore(init, M.symmetric_succ, canon=M.symmetric_canon)
    assert reduced.distinct < plain.distinct
    assert_success(run("Symmetric", "SymmetricNoSym"), plain)
    assert_success(run("Symmetric"), reduced)


def test_state_and_action_constraints() -> None:
    ex = M.explore(
        [(0, 0), (0, 1)],
        M.constrained_succ,
        constraint=lambda s: -2 <= s[0] <= 6,
        action_constraint=lambda s, t: t[0] >= s[0] - 1,
    )
    assert_success(run("Constrained"), ex)


def test_deadlock_and_check_deadlock_false() -> None:
    ex = M.explore([("free", "free")], M.deadlock_succ)
    assert ex.deadlocks
    r = run("Deadlock")
    assert r.result == "deadlock failure" and r.violated == "Deadlock"
    assert r.exit_code == EXIT_VIOLATION_DEADLOCK
    assert len(r.trace) == min(ex.level[k] for k in ex.deadlocks) == 3
    last = (r.trace[-1].state["a"].strip('"'), r.trace[-1].state["b"].strip('"'))
    assert M.deadlock_succ(last) == []
    assert_success(run("Deadlock", "DeadlockOff"), ex)


# ---- liveness ------------------------------------------------------------------------------

def hours(r: CheckResult) -> list[int]:
    return [int(step.state["hr"]) for step in r.trace]


def test_hour_clock_liveness_holds_under_weak_fairness() -> None:
    ex = M.explore(range(1, 13), lambda h: [h % 12 + 1])
    assert_success(run("HourClock"), ex)


def test_hour_clock_lasso_for_eventually_always() -> None:
    r = run("HourClock", "HourClockStays")
    assert r.result == "liveness failure" and r.violated == "StaysAtOne"
    assert r.exit_code == EXIT_VIOLATION_LIVENESS
    hs = hours(r)
    assert r.loop_back_to is not None and 0 <= r.loop_back_to < len(hs)
    # A genuine lasso: every step (and the step back to the loop start) is an HCnxt step, and
    # the loop visits a state where hr # 1 infinitely often. Under WF the clock cannot stop,
    # so the loop must be the full 12-hour cycle.
    for a, b in itertools.pairwise(hs):
        assert b == a % 12 + 1
    assert hs[r.loop_back_to] == hs[-1] % 12 + 1
    loop = hs[r.loop_back_to:]
    assert sorted(loop) == list(range(1, 13))


def test_hour_clock_without_fairness_may_stutter() -> None:
    r = run("HourClock", "HourClockUnfair")
    assert r.result == "liveness failure" and r.violated == "EventuallyNoon"
    # Shortest lasso: an initial state other than 12 that stutters forever.
    assert len(r.trace) == 1 and r.loop_back_to == 0
    assert hours(r)[0] != 12


def test_peterson_starves_without_fairness() -> None:
    r = run("Peterson", "PetersonUnfair")
    assert r.result == "liveness failure" and r.violated == "StarvationFree"
    assert r.loop_back_to == len(r.trace) - 1  # the waiting process is never scheduled again
    ex = M.explore(M.PETERSON_INIT, M.peterson_succ)
    # The prefix is a path of the state graph ending in a state where some process waits.
    last = r.trace[-1].state["pc"]
    assert '"wait"' in last
    assert len(r.trace) == min(ex.level[k] for k in ex.parent if "wait" in k[0])


# ---- the project's own spec ------------------------------------------------------------------

KV = Path(__file__).parents[3] / "tla"


@pytest.mark.slow
def test_kvoffload_eager_signal_counterexample() -> None:
    r = check_model(KV / "KVOffload.tla", KV / "KVOffload_EagerSignal.cfg")
    assert r.result == "safety failure", r.message
    assert r.violated == "NoManagerCallAfterSignal"
    assert r.trace[0].action == "Initial predicate"


def test_unnamed_instance_infix_enabled_substitution(capsys: pytest.CaptureFixture[str]) -> None:
    # x' = (x + Lim) % 5 with Lim = 2 visits all of 0..4; Impl <- Seven in the cfg.
    ex = M.explore([0], lambda x: [(x + 2) % 5])
    assert_success(run("Ops"), ex)
    captured = capsys.readouterr()
    assert captured.out == ""  # PrintT goes to stderr, stdout stays clean for --json
    assert sorted(int(v) for v in captured.err.split()) == [0, 1, 2, 3, 4]


def test_weak_versus_strong_fairness() -> None:
    r = run("Fairness", "FairnessWeak")
    assert r.result == "liveness failure" and r.violated == "EventuallyX"
    # Toggling forever keeps A only intermittently enabled: WF(A) is satisfied, x stays 0.
    states = [(int(s.state["x"]), int(s.state["y"])) for s in r.trace]
    assert states == [(0, 0), (0, 1)] and r.loop_back_to == 0
    assert [s.action for s in r.trace] == ["Initial predicate", "Toggle"]
    # SF(A): A is enabled infinitely often on that cycle, so it must eventually be taken.
    ex = M.explore([(0, 0)], lambda s: [(s[0], 1 - s[1])] + ([(1, s[1])] if s == (0, 1) else []))
    assert_success(run("Fairness", "FairnessStrong"), ex)


def test_action_property_violation() -> None:
    r = run("HourClock", "HourClockIncreasing")
    assert r.result == "safety failure" and r.violated == "Increasing"
    assert r.exit_code == EXIT_VIOLATION_LIVENESS  # TLC's status for any broken PROPERTY
    assert hours(r) == [12, 1]  # the shortest: start at 12 and wrap around
    assert [s.action for s in r.trace] == ["Initial predicate", "HCnxt"]
