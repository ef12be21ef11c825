"""The generic explorer on toy models whose state counts and shortest counterexamples are known."""

from __future__ import annotations

import gc
import itertools
import weakref
from collections.abc import Hashable
from dataclasses import dataclass

import pytest

from kvoffload.offload.errors import LifecycleViolation
from kvoffload_lab.statemachine.explore import (
    CRASH,
    DRAIN_ACTION,
    Counterexample,
    CounterexampleStep,
    explore,
    format_counterexample,
    format_result,
)


@dataclass
class Counter:
    """0..limit, +1 / -1 / back to 0; ``bad`` is a forbidden value (None: everything is fine)."""

    limit: int
    bad: int | None = None

    def initial(self) -> int:
        return 0

    def actions(self, s: int) -> list[str]:
        return [a for a, ok in (("inc", s < self.limit), ("dec", s > 0), ("zero", s > 0)) if ok]

    def step(self, s: int, a: str) -> int:
        return {"inc": s + 1, "dec": s - 1, "zero": 0}[a]

    def invariants(self, s: int) -> list[tuple[str, str]]:
        return [("NotBad", f"counter reached {s}")] if s == self.bad else []

    def fingerprint(self, s: int) -> Hashable:
        return s

    def describe(self, s: int) -> dict[str, str]:
        return {"n": str(s)}


IDLE, CHECKED, CRIT = "idle", "checked", "crit"


@dataclass
class Mutex:
    """Two processes. ``atomic``: test-and-set entry (correct); otherwise check, then enter (racy)."""

    atomic: bool = True
    symmetric: bool = False

    def initial(self) -> tuple[str, str]:
        return (IDLE, IDLE)

    def actions(self, s: tuple[str, str]) -> list[tuple[str, int]]:
        out = []
        for i in (0, 1):
            other = s[1 - i]
            if s[i] == IDLE and other != CRIT:
                out.append(("enter" if self.atomic else "check", i))
            if s[i] == CHECKED:
                out.append(("enter", i))
            if s[i] == CRIT:
                out.append(("leave", i))
        return out

    def action_name(self, a: tuple[str, int]) -> str:
        return f"{a[0]}(p{a[1]})"

    def step(self, s: tuple[str, str], a: tuple[str, int]) -> tuple[str, str]:
        kind, i = a
        new = {"check": CHECKED, "enter": CRIT, "leave": IDLE}[kind]
        pcs = list(s)
        pcs[i] = new
        return (pcs[0], pcs[1])

    def invariants(self, s: tuple[str, str]) -> list[tuple[str, str]]:
        return [("MutualExclusion", "both processes are in the critical section")] if s == (CRIT, CRIT) else []

    def fingerprint(self, s: tuple[str, str]) -> Hashable:
        # The processes are interchangeable: a state and its mirror image are one state.
        return tuple(sorted(s)) if self.symmetric else s

    def describe(self, s: tuple[str, str]) -> dict[str, str]:
        return {"p0": s[0], "p1": s[1]}


def test_counter_state_count_and_complete() -> None:
    result = explore(Counter(limit=5))
    assert (result.states, result.complete, result.ok) == (6, True, True)
    # inc from 0..4, dec and zero from 1..5.
    assert result.transitions == 5 + 5 + 5
    assert result.depth == 5


def test_shortest_counterexample_is_found() -> None:
    result = explore(Counter(limit=10, bad=4))
    assert not result.ok
    (violation,) = result.violations
    assert violation.invariant == "NotBad"
    assert [step.action for step in violation.trace] == ["inc"] * 4
    assert violation.trace[-1].changed == {"n": ("3", "4")}


def test_racy_mutex_counterexample() -> None:
    result = explore(Mutex(atomic=False))
    (violation,) = result.violations
    assert violation.invariant == "MutualExclusion"
    assert len(violation.trace) == 4
    actions = [step.action for step in violation.trace]
    assert sorted(actions[:2]) == ["check(p0)", "check(p1)"]
    assert sorted(actions[2:]) == ["enter(p0)", "enter(p1)"]


def test_atomic_mutex_state_counts_and_symmetry_reduction() -> None:
    plain = explore(Mutex(atomic=True))
    reduced = explore(Mutex(atomic=True, symmetric=True))
    # (idle, idle), (crit, idle), (idle, crit); the last two are mirror images.
    assert (plain.states, plain.complete, plain.ok) == (3, True, True)
    assert (reduced.states, reduced.complete, reduced.ok) == (2, True, True)


def test_racy_mutex_all_states_with_and_without_symmetry() -> None:
    # Every pair of {idle, checked, crit} is reachable (crit/crit too: keep going after it).
    plain = explore(Mutex(atomic=False), stop_at_first=False)
    reduced = explore(Mutex(atomic=False, symmetric=True), stop_at_first=False)
    assert plain.states == 9
    assert reduced.states == 6  # unordered pairs of 3 values
    assert [v.invariant for v in plain.violations] == ["MutualExclusion"]


def test_bounds_make_the_search_incomplete() -> None:
    by_depth = explore(Counter(limit=10), max_depth=3)
    assert not by_depth.complete
    assert by_depth.states == 4
    by_states = explore(Counter(limit=10), max_states=5)
    assert not by_states.complete
    assert by_states.states == 5
    exact = explore(Counter(limit=3), max_depth=3)
    assert exact.complete  # depth 3 reached, but no action was left there


class Raising(Counter):
    def __init__(self, error: Exception) -> None:
        super().__init__(limit=5)
        self.error = error

    def step(self, s: int, a: str) -> int:
        if s == 2 and a == "inc":
            raise self.error
        return super().step(s, a)


def test_lifecycle_violation_is_reported_under_its_invariant() -> None:
    result = explore(Raising(LifecycleViolation("SignalExactlyOnce", "r1", "on_request_finished", "retired")))
    (violation,) = result.violations
    assert violation.invariant == "SignalExactlyOnce"
    assert [step.action for step in violation.trace] == ["inc", "inc", "inc"]
    assert violation.trace[-1].error is not None and "LifecycleViolation" in violation.trace[-1].error


def test_other_exceptions_are_crashes() -> None:
    result = explore(Raising(KeyError("r1")))
    (violation,) = result.violations
    assert violation.invariant == CRASH
    assert violation.message.startswith("KeyError")


class Leaky(Counter):
    """Drain check: from 3 on, 'cleaning up' fails; the intended end state is the limit."""

    def is_final(self, s: int) -> bool:
        return s == self.limit

    def drain(self, s: int) -> list[tuple[str, str]]:
        return [("NoLeak", f"{s} left over")] if s >= 3 else []


@pytest.mark.parametrize(("mode", "found"), [("all", True), ("final", True), ("none", False)])
def test_drain_modes(mode: str, found: bool) -> None:
    result = explore(Leaky(limit=3), drain=mode)  # type: ignore[arg-type]
    assert result.ok is not found
    if found:
        (violation,) = result.violations
        assert violation.invariant == "NoLeak"
        assert violation.trace[-1].action == DRAIN_ACTION
        assert len(violation.trace) == 4


def test_counterexample_printer_format() -> None:
    violation = Counterexample(
        "MutualExclusion",
        "both in",
        (
            CounterexampleStep("check(p0)", {"p0": ("idle", "checked")}),
            CounterexampleStep("enter(p0)", {"p0": ("checked", "crit")}),
            CounterexampleStep("enter(p1)", {}, error="KeyError: 'p1'"),
        ),
    )
    assert format_counterexample(violation).splitlines() == [
        "Invariant MutualExclusion violated: both in",
        "Shortest counterexample (3 steps):",
        "  1. check(p0)",
        "     p0: idle -> checked",
        "  2. enter(p0)",
        "     p0: checked -> crit",
        "  3. enter(p1)",
        "     raised KeyError: 'p1'",
    ]


def test_result_summary_and_json() -> None:
    result = explore(Mutex(atomic=False))
    text = format_result(result)
    assert "distinct states" in text and "1 violation(s)" in text and "1. check(p" in text
    data = result.to_json()
    assert set(data) == {
        "states", "transitions", "complete", "depth", "seconds", "cpu_seconds", "states_per_s", "violations",
        "reduction", "reexpanded", "interrupted",
    }
    assert data["cpu_seconds"] >= 0
    assert data["interrupted"] is False
    assert data["reduction"] == "none"  # Mutex has no touches()
    (violation,) = data["violations"]
    assert violation["invariant"] == "MutualExclusion"
    assert violation["trace"][0]["changed"]


@dataclass
class MutableCounter:
    """A counter kept in a one-element list, with ``step_owned`` consuming its input."""

    limit: int

    def __post_init__(self) -> None:
        self.owned_calls: list[int] = []

    def initial(self) -> list[int]:
        return [0]

    def actions(self, s: list[int]) -> list[str]:
        return [a for a, ok in (("inc", s[0] < self.limit), ("dec", s[0] > 0), ("zero", s[0] > 0)) if ok]

    def step(self, s: list[int], a: str) -> list[int]:
        return self.step_owned(list(s), a, record=False)

    def step_owned(self, s: list[int], a: str, record: bool = True) -> list[int]:
        if record:
            self.owned_calls.append(s[0])
        s[0] = {"inc": s[0] + 1, "dec": s[0] - 1, "zero": 0}[a]
        return s

    def invariants(self, s: list[int]) -> list[tuple[str, str]]:
        return []

    def fingerprint(self, s: list[int]) -> Hashable:
        return s[0]


def test_step_owned_is_used_once_per_expanded_state() -> None:
    model = MutableCounter(limit=5)
    result = explore(model)
    plain = explore(Counter(limit=5))
    assert (result.states, result.transitions, result.depth) == (plain.states, plain.transitions, plain.depth)
    # The last action from each state consumes it: once per expanded state (all of 0..5 have actions).
    assert sorted(model.owned_calls) == [0, 1, 2, 3, 4, 5]


class InterruptedCounter(MutableCounter):
    """Ctrl-C arrives while the explorer steps the model from 3."""

    def step(self, s: list[int], action: str) -> list[int]:
        if s[0] == 3:
            raise KeyboardInterrupt
        return super().step(s, action)


def test_ctrl_c_returns_the_figures_reached_so_far() -> None:
    result = explore(InterruptedCounter(10))
    assert result.interrupted and not result.complete
    assert result.states == 4  # 0, 1, 2, 3
    assert result.to_json()["interrupted"] is True


@dataclass
class Grid:
    """``n`` processes, each counting to ``k`` on its own: every interleaving reaches every state.
    A step of process i touches only i, so steps of different processes are independent."""

    n: int
    k: int
    bad: tuple[int, ...] | None = None
    declare_touches: bool = True

    def initial(self) -> tuple[int, ...]:
        return (0,) * self.n

    def actions(self, s: tuple[int, ...]) -> list[int]:
        return [i for i in range(self.n) if s[i] < self.k]

    def step(self, s: tuple[int, ...], i: int) -> tuple[int, ...]:
        return (*s[:i], s[i] + 1, *s[i + 1 :])

    def invariants(self, s: tuple[int, ...]) -> list[tuple[str, str]]:
        return [("NotBad", f"reached {s}")] if s == self.bad else []

    def fingerprint(self, s: tuple[int, ...]) -> Hashable:
        return s

    def touches(self, s: tuple[int, ...], i: int) -> frozenset[int] | None:
        return frozenset((i,)) if self.declare_touches else None


@pytest.mark.parametrize(("n", "k"), [(2, 3), (3, 4), (4, 2)])
def test_sleep_sets_prune_transitions_not_states(n: int, k: int) -> None:
    full = explore(Grid(n, k), reduce=False)
    reduced = explore(Grid(n, k))
    assert full.states == reduced.states == (k + 1) ** n
    assert full.transitions == n * k * (k + 1) ** (n - 1)
    # Every state is entered by one transition: the reduction is exact on independent processes.
    assert reduced.transitions == reduced.states - 1
    assert reduced.depth == full.depth == n * k
    assert reduced.reduced and not full.reduced
    assert explore(Grid(n, k, declare_touches=False)).transitions == full.transitions


def test_sleep_sets_keep_the_shortest_counterexample() -> None:
    for bad in [(1, 2, 0), (3, 3, 3), (0, 0, 2)]:
        full = explore(Grid(3, 3, bad=bad), reduce=False)
        reduced = explore(Grid(3, 3, bad=bad))
        assert [len(v.trace) for v in reduced.violations] == [len(v.trace) for v in full.violations] == [sum(bad)]


def test_parallel_worker_failure_is_an_error_not_a_hang() -> None:
    from kvoffload_lab.statemachine.explore_parallel import explore_parallel

    class Broken(Grid):
        def invariants(self, s: tuple[int, ...]) -> list[tuple[str, str]]:
            if sum(s) == 25:
                raise RuntimeError("invariant code broke")
            return []

    assert explore_parallel(Grid(3, 10), 1).states == 11**3
    with pytest.raises(RuntimeError, match=r"explorer worker .* died"):
        explore_parallel(Broken(3, 10), 1)


class CyclicGrid(Grid):
    """A Grid whose every step makes a reference cycle that only the cyclic collector can free;
    ``live`` counts the cycles not freed yet, ``most_live`` the most seen at once."""

    def __init__(self, n: int, k: int) -> None:
        super().__init__(n, k)
        self.live = self.made = self.most_live = 0
        self.gc_was_enabled: list[bool] = []

    def step(self, s: tuple[int, ...], i: int) -> tuple[int, ...]:
        node: dict[str, object] = {}
        node["self"] = node
        holder = _Cycle(node)
        weakref.finalize(holder, self._freed)
        self.live += 1
        self.made += 1
        self.most_live = max(self.most_live, self.live)
        self.gc_was_enabled.append(gc.isenabled())
        return super().step(s, i)

    def _freed(self) -> None:
        self.live -= 1


class _Cycle:
    def __init__(self, node: dict[str, object]) -> None:
        self.node = node
        node["holder"] = self


@pytest.mark.parametrize("enabled", [True, False])
def test_search_runs_without_automatic_collection_and_collects_each_level(enabled: bool) -> None:
    model = CyclicGrid(3, 6)
    (gc.enable if enabled else gc.disable)()
    try:
        result = explore(model, reduce=False)
        assert gc.isenabled() is enabled  # as it was before the search
    finally:
        gc.enable()
    assert result.states == 7**3
    assert not any(model.gc_was_enabled)
    # Cycles are freed level by level, not all at the end: at most about two levels' worth live.
    widest_level = max(
        sum(1 for s in itertools.product(range(7), repeat=3) if sum(s) == depth) for depth in range(19)
    )
    assert model.made == result.transitions
    assert model.most_live <= 3 * 3 * widest_level < model.made // 2
