"""A breadth-first explorer over any model: every reachable state within bounds, shortest counterexample.

It knows nothing about KV caches. A *model* is any object with

- ``initial() -> S``: the initial state;
- ``actions(s) -> Iterable[A]``: the actions enabled in ``s`` (``action_name(a)``, if the model has
  it, names one for traces; otherwise ``str(a)``);
- ``step(s, a) -> S``: the successor; it must not mutate ``s`` and must be deterministic, because a
  counterexample is rebuilt by replaying the recorded actions from ``initial()``;
- ``invariants(s) -> list[(name, message)]``: every violation in ``s`` (empty: all hold);
- ``fingerprint(s) -> Hashable``: equal fingerprints mean "the same state"; a model does symmetry
  reduction here (e.g. canonical names for interchangeable processes);

and optionally, each a typed protocol a model implements by having the method:

- :class:`NamesActions` ``action_name(a) -> str``: how an action reads in a trace;
- :class:`Describes` ``describe(s) -> dict[str, str]``: readable variables, diffed between
  consecutive trace states;
- :class:`HasFinalStates` ``is_final(s) -> bool``: the state is an intended end state (checked by
  ``drain`` in "final" mode);
- :class:`Drains` ``drain(s) -> list[(name, message)]``: a liveness-ish check run from ``s`` (e.g.
  "if every job completes, everything is eventually cleaned and nothing leaks");
- :class:`StepsOwned` ``step_owned(s, a) -> S``: ``step`` that may consume ``s`` (mutate or reuse
  it). The explorer calls it for the last action it takes from a state, which it never touches
  again, so a model that copies its state in ``step`` can skip one copy per expanded state. It must
  give the same successor as ``step``.
- :class:`StepsMany` ``successors(s, actions) -> Iterable[(a, successor | None, error | None)]``:
  every action of ``actions`` taken from ``s``, in that order: its successor, or the exception its
  ``step`` raises. It may consume ``s`` (the explorer never touches it again) and share work between
  actions that begin alike (e.g. one engine step that ends in different ways); each successor must
  be the one ``step`` gives.
- :class:`Touches` ``touches(s, a) -> frozenset | None``: the processes (e.g. requests) action
  ``a`` reads or writes in ``s``; None for an action on shared state. Two actions enabled in ``s``
  that touch disjoint sets are *independent*: the model promises that each stays enabled after the
  other and that both orders reach states with the same fingerprint. The explorer then prunes
  transitions with sleep sets (partial-order reduction, below).

Partial-order reduction (sleep sets, Godefroid 1996). When ``a`` and ``b`` are independent in ``s``
and ``b`` was explored from ``s`` before ``a``, the state ``s.a.b`` is ``s.b.a``, which the search
reaches from ``s.b``; so ``b`` is put to *sleep* in ``s.a`` and not executed from there (nor from
states reached by actions independent of it). Sleep sets prune transitions, never states: every
state the full search reaches is reached, at the same depth (the diamond's two paths have the
same length). A state is stored with its sleep set; reached again with a smaller one, it is either
not expanded yet (the sets are intersected) or it is re-expanded for the actions it slept on
(rebuilt by replay; counted in ``reexpanded``). Hence, for the properties checked here, the reduced
search gives the same verdicts as the full one: every invariant is a predicate of one state and
the drain check a function of one state, both evaluated on exactly the same set of states; the
shortest counterexample has the same length (the depth of the first violating state); only the
transition count drops. This holds as long as ``touches`` is truthful; tests check on whole state
spaces that every pair the model calls independent commutes, and that reduced and full searches
find the same violations on every mutant of the bug zoo. ``reduce=False`` (``--no-reduction``)
runs the full search, whose exact transition counts are pinned in tests.

An exception raised by ``step`` is a violation too: one carrying an ``invariant`` attribute (such as
``LifecycleViolation``) is reported under that name, any other as ``Crash``.

Memory: a search allocates a state per transition, frees most of them at once (by reference
counting: a known fingerprint), and keeps a frontier of up to hundreds of thousands of states made of
many small containers. Python's cyclic collector, run every few hundred allocations, would scan that
frontier over and over (a quarter of the time on the explore model); it finds nothing, since states
have no reference cycles. So a search runs with automatic collection off (:func:`collection_per_level`)
and collects the young generations once per breadth-first level, which frees any cycles a model does
make, scanning each surviving object about once.

Breadth-first order makes the first violation found a shortest one: every state of depth ``d`` was
checked before any state of depth ``d + 1`` is generated. The explorer keeps only the frontier's
states and one (parent fingerprint, action) pair per state; a trace is rebuilt by replay.
"""

from __future__ import annotations

import contextlib
import gc
import os
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

DrainMode = Literal["all", "final", "none"]

CRASH = "Crash"
DRAIN_ACTION = "drain (no new requests; every job completes; steps run until quiet)"


class ExplorableModel(Protocol):
    """The minimum a model needs; see the module docstring for the optional methods."""

    def initial(self) -> Any: ...

    def actions(self, state: Any) -> Iterable[Any]: ...

    def step(self, state: Any, action: Any) -> Any: ...

    def invariants(self, state: Any) -> list[tuple[str, str]]: ...

    def fingerprint(self, state: Any) -> Hashable: ...


@runtime_checkable
class NamesActions(Protocol):
    def action_name(self, action: Any) -> str: ...


@runtime_checkable
class Describes(Protocol):
    def describe(self, state: Any) -> dict[str, str]: ...


@runtime_checkable
class HasFinalStates(Protocol):
    def is_final(self, state: Any) -> bool: ...


@runtime_checkable
class Drains(Protocol):
    def drain(self, state: Any) -> list[tuple[str, str]]: ...


@runtime_checkable
class StepsOwned(Protocol):
    def step_owned(self, state: Any, action: Any) -> Any: ...


@runtime_checkable
class StepsMany(Protocol):
    def successors(
        self, state: Any, actions: Sequence[Any]
    ) -> Iterable[tuple[Any, Any, Exception | None]]: ...


@runtime_checkable
class Touches(Protocol):
    def touches(self, state: Any, action: Any) -> frozenset[Hashable] | None: ...


@dataclass(frozen=True)
class CounterexampleStep:
    """One action of a counterexample and the variables it changed, ``{name: (before, after)}``."""

    action: str
    changed: dict[str, tuple[str, str]] = field(default_factory=dict)
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"action": self.action, "changed": {k: list(v) for k, v in self.changed.items()}}
        if self.error is not None:
            out["error"] = self.error
        return out


@dataclass(frozen=True)
class Counterexample:
    """A violated invariant and a shortest action sequence from the initial state that violates it."""

    invariant: str
    message: str
    trace: tuple[CounterexampleStep, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "invariant": self.invariant,
            "message": self.message,
            "trace": [step.to_json() for step in self.trace],
        }


@dataclass
class ExploreResult:
    """Figures of one exploration. ``complete`` is False when a bound cut the search short."""

    states: int = 0
    transitions: int = 0
    complete: bool = True
    depth: int = 0
    seconds: float = 0.0
    # CPU seconds (user and system) of this process and of the workers it waited for, from
    # ``cpu_started`` (when the result was made) to the end of the search.
    cpu_seconds: float = 0.0
    cpu_started: float = field(default_factory=lambda: cpu_time(), repr=False, compare=False)
    reduced: bool = False
    reexpanded: int = 0
    violations: list[Counterexample] = field(default_factory=list)
    # True when a KeyboardInterrupt stopped the search: the figures are those reached so far.
    interrupted: bool = False

    @property
    def states_per_s(self) -> float:
        return self.states / self.seconds if self.seconds > 0 else float(self.states)

    @property
    def ok(self) -> bool:
        return not self.violations

    def to_json(self) -> dict[str, Any]:
        return {
            "states": self.states,
            "transitions": self.transitions,
            "complete": self.complete,
            "depth": self.depth,
            "seconds": round(self.seconds, 3),
            "cpu_seconds": round(self.cpu_seconds, 3),
            "states_per_s": round(self.states_per_s, 1),
            "reduction": "sleep sets" if self.reduced else "none",
            "reexpanded": self.reexpanded,
            "violations": [v.to_json() for v in self.violations],
            "interrupted": self.interrupted,
        }


def _action_name(model: Any, action: Any) -> str:
    return model.action_name(action) if isinstance(model, NamesActions) else str(action)


def _exception_violation(error: BaseException) -> tuple[str, str]:
    invariant = getattr(error, "invariant", None)
    if isinstance(invariant, str) and invariant:
        return invariant, str(error)
    return CRASH, f"{type(error).__name__}: {error}"


@contextlib.contextmanager
def collection_per_level() -> Iterator[Callable[[], None]]:
    """Automatic garbage collection off for the ``with`` block (as it was after it); yields the
    function to call at the end of each breadth-first level (see the module docstring)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield _collect_young
    finally:
        if enabled:
            gc.enable()


def _collect_young() -> None:
    # The young generations only: what the level allocated and kept moves to the oldest
    # generation, which is not scanned again while automatic collection is off.
    gc.collect(1)


def explore(
    model: ExplorableModel,
    *,
    max_depth: int | None = None,
    max_states: int | None = None,
    stop_at_first: bool = True,
    drain: DrainMode = "final",
    reduce: bool = True,
) -> ExploreResult:
    """Breadth-first search of ``model`` within the bounds.

    ``drain``: run ``model.drain`` on every new state ("all"), only on final states ("final":
    no enabled action, ``is_final``, or the depth bound reached), or never ("none").
    ``reduce``: prune transitions with sleep sets when the model has ``touches`` (see the module
    docstring); False runs the full search. A KeyboardInterrupt stops the search and returns the
    figures so far, marked ``interrupted``.
    """
    started = time.perf_counter()
    result = ExploreResult()
    # fingerprint -> (parent fingerprint, action) of the first (hence shortest) path reaching it.
    parents: dict[Hashable, tuple[Hashable, Any] | None] = {}
    try:
        search = _Search(model, result, parents, (max_depth, max_states, stop_at_first), drain, reduce)
        with collection_per_level() as level_done:
            search.run(level_done)
    except _Stop:
        pass
    except KeyboardInterrupt:
        return interrupted_result(result, len(parents), started)
    return finished_result(result, len(parents), started)


def interrupted_result(result: ExploreResult, states: int, started: float) -> ExploreResult:
    """``result`` as it stands when Ctrl-C stopped a search: the figures so far, not complete."""
    result.interrupted = True
    result.complete = False
    return finished_result(result, states, started)


def finished_result(result: ExploreResult, states: int, started: float) -> ExploreResult:
    """``result`` with its state count, the seconds since ``started`` and its CPU seconds."""
    result.states = states
    result.seconds = time.perf_counter() - started
    result.cpu_seconds = cpu_time() - result.cpu_started
    return result


def cpu_time() -> float:
    """User and system CPU seconds of this process and of its children it has waited for."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def record_violation(
    model: ExplorableModel,
    result: ExploreResult,
    parents: dict[Hashable, tuple[Hashable, Any] | None],
    seen_violations: set[str],
    violation: tuple[Hashable, tuple[Any, str | None] | None, str, str],
) -> None:
    """Add ``(fingerprint, extra step, invariant, message)`` to ``result`` with its rebuilt trace,
    once per invariant name."""
    fp, extra, name, message = violation
    if name in seen_violations:
        return
    seen_violations.add(name)
    result.violations.append(Counterexample(name, message, rebuild_trace(model, _path(parents, fp), extra)))


Expander = Callable[[Any, Sequence[Any]], Iterable[tuple[Any, Any, Exception | None]]]


def expander(model: ExplorableModel) -> Expander:
    """``expand(state, actions)``: ``(action, successor, None)`` or ``(action, None, error)`` for
    each of ``actions`` from ``state``, in order; it consumes ``state`` (the caller never touches it
    again): the model's ``successors`` if it has one, else ``step`` (``step_owned`` for the last)."""
    if isinstance(model, StepsMany):
        return model.successors
    step_owned = model.step_owned if isinstance(model, StepsOwned) else None

    def expand(state: Any, actions: Sequence[Any]) -> Iterable[tuple[Any, Any, Exception | None]]:
        return _expand_one_by_one(model, step_owned, state, actions)

    return expand


def _expand_one_by_one(
    model: ExplorableModel, step_owned: Callable[[Any, Any], Any] | None, state: Any, actions: Sequence[Any]
) -> Iterable[tuple[Any, Any, Exception | None]]:
    last = len(actions) - 1
    for index, action in enumerate(actions):
        try:
            if step_owned is not None and index == last:
                successor = step_owned(state, action)  # consumes state: the last use of it
            else:
                successor = model.step(state, action)
        except Exception as error:  # a crash of the system under test is a finding, not our bug
            yield action, None, error
            continue
        yield action, successor, None


class _Stop(Exception):
    """A violation was recorded and the search stops at the first one."""


# A queued state: (state, fingerprint, depth, only); ``only`` limits a re-expansion to the actions
# it lacked.
_Queued = tuple[Any, Hashable, int, frozenset[Any] | None]


class _Search:
    """One breadth-first search, in named steps: the initial state, which of a state's actions to
    expand, the expansion, and each new state found."""

    def __init__(
        self,
        model: ExplorableModel,
        result: ExploreResult,
        parents: dict[Hashable, tuple[Hashable, Any] | None],
        bounds: tuple[int | None, int | None, bool],
        drain: DrainMode,
        reduce: bool,
    ) -> None:
        self.model = model
        self.result = result
        self.parents = parents
        self.max_depth, self.max_states, self.stop_at_first = bounds
        self.drain = drain
        self.drainer = model.drain if drain != "none" and isinstance(model, Drains) else None
        self.is_final = model.is_final if isinstance(model, HasFinalStates) else None
        self.expand = expander(model)
        self.touches: Callable[[Any, Any], frozenset[Hashable] | None] | None = (
            model.touches if reduce and isinstance(model, Touches) else None
        )
        result.reduced = self.touches is not None
        # Sleep sets: of queued states (to be intersected when reached again), and of expanded ones
        # (a later, smaller sleep set re-expands the difference).
        self.queued_sleep: dict[Hashable, frozenset[Any]] = {}
        self.expanded_sleep: dict[Hashable, frozenset[Any]] = {}
        self.seen_violations: set[str] = set()
        self.queue: deque[_Queued] = deque()

    def run(self, level_done: Callable[[], None]) -> None:
        """Search until the queue is empty; raises :class:`_Stop` at a violation that ends it."""
        self._start()
        level = 0
        while self.queue:
            state, fp, depth, only = self.queue.popleft()
            if depth > level:
                level = depth
                level_done()
            planned = self._plan(state, fp, depth, only)
            if planned is not None:
                self._expand(state, fp, depth, *planned)

    def _report(self, fp: Hashable, problems: Sequence[tuple[str, str]], extra: tuple[Any, str | None] | None) -> None:
        """Record violations; raises :class:`_Stop` when the search must stop."""
        for name, message in problems:
            record_violation(self.model, self.result, self.parents, self.seen_violations, (fp, extra, name, message))
        if problems and self.stop_at_first:
            raise _Stop

    def _start(self) -> None:
        initial = self.model.initial()
        fp0 = self.model.fingerprint(initial)
        self.parents[fp0] = None
        self._report(fp0, self.model.invariants(initial), None)
        if self.drainer is not None and self.drain == "all":
            self._report(fp0, self.drainer(initial), (None, DRAIN_ACTION))
        self.queue.append((initial, fp0, 0, None))
        self.queued_sleep[fp0] = _NOTHING

    def _plan(
        self, state: Any, fp: Hashable, depth: int, only: frozenset[Any] | None
    ) -> tuple[list[Any], frozenset[Any]] | None:
        """The actions to expand from ``state`` and its sleep set; None when it is not expanded."""
        actions = list(self.model.actions(state))
        if only is not None:
            if self.max_depth is not None and depth >= self.max_depth:
                return None
            return [a for a in actions if a in only], self.expanded_sleep[fp]
        sleep = self.queued_sleep.pop(fp, _NOTHING)
        if self.touches is not None:
            self.expanded_sleep[fp] = sleep
        at_bound = self.max_depth is not None and depth >= self.max_depth
        final = not actions or at_bound or bool(self.is_final is not None and self.is_final(state))
        if self.drainer is not None and self.drain == "final" and final:
            self._report(fp, self.drainer(state), (None, DRAIN_ACTION))
        if at_bound:
            # Complete only if nothing new lies beyond the bound.
            if self.result.complete and any(_leads_somewhere_new(self.model, state, a, self.parents) for a in actions):
                self.result.complete = False
            return None
        return ([a for a in actions if a not in sleep] if sleep else actions), sleep

    def _expand(self, state: Any, fp: Hashable, depth: int, todo: list[Any], sleep: frozenset[Any]) -> None:
        touches = self.touches
        # (action, what it touches) of the sleeping and already explored actions.
        done: list[tuple[Any, frozenset[Hashable] | None]] = (
            [(b, touches(state, b)) for b in sleep] if touches is not None and sleep else []
        )
        # Read before the expansion, which consumes the state.
        touched_by = [touches(state, action) for action in todo] if touches is not None else None
        for index, (action, successor, error) in enumerate(self.expand(state, todo)):
            self.result.transitions += 1
            touched = touched_by[index] if touched_by is not None else None
            if error is not None:
                self._report(fp, [_exception_violation(error)], (action, None))
                continue
            child_sleep = (
                frozenset(b for b, other in done if other is not None and not touched & other)
                if touched is not None and done
                else _NOTHING
            )
            if touches is not None:
                done.append((action, touched))
            self._reach(fp, depth, action, successor, child_sleep)

    def _reach(self, fp: Hashable, depth: int, action: Any, successor: Any, child_sleep: frozenset[Any]) -> None:
        """``successor`` of the state ``fp`` by ``action``: queued and checked when it is new."""
        child = self.model.fingerprint(successor)
        if child in self.parents:
            if self.touches is not None:
                _merge_sleep(self.model, child, child_sleep, self.queued_sleep, self.expanded_sleep, self.parents,
                             self.queue, self.result)
            return
        if self.max_states is not None and len(self.parents) >= self.max_states:
            self.result.complete = False
            return
        self.parents[child] = (fp, action)
        self.queued_sleep[child] = child_sleep
        self.result.depth = max(self.result.depth, depth + 1)
        self._report(child, self.model.invariants(successor), None)
        if self.drainer is not None and self.drain == "all":
            self._report(child, self.drainer(successor), (None, DRAIN_ACTION))
        self.queue.append((successor, child, depth + 1, None))


_NOTHING: frozenset[Any] = frozenset()


def _merge_sleep(
    model: ExplorableModel,
    fp: Hashable,
    sleep: frozenset[Any],
    queued_sleep: dict[Hashable, frozenset[Any]],
    expanded_sleep: dict[Hashable, frozenset[Any]],
    parents: dict[Hashable, tuple[Hashable, Any] | None],
    queue: deque[_Queued],
    result: ExploreResult,
) -> None:
    """A known state reached again with sleep set ``sleep``: only actions asleep on every path
    to it may stay unexplored."""
    queued = queued_sleep.get(fp)
    if queued is not None:
        if queued:
            queued_sleep[fp] = queued & sleep
        return
    before = expanded_sleep.get(fp)
    if not before or before <= sleep:
        return
    missing = before - sleep
    expanded_sleep[fp] = before & sleep
    # Rebuilt by replaying its recorded path (states are not kept once expanded).
    path = _path(parents, fp)
    state = model.initial()
    for action in path:
        state = model.step(state, action)
    result.reexpanded += 1
    queue.append((state, fp, len(path), missing))


def _leads_somewhere_new(model: ExplorableModel, state: Any, action: Any, parents: dict[Hashable, Any]) -> bool:
    try:
        return model.fingerprint(model.step(state, action)) not in parents
    except Exception:  # beyond the bound: unexplored, not reported
        return True


def _path(parents: dict[Hashable, tuple[Hashable, Any] | None], fp: Hashable) -> list[Any]:
    actions: list[Any] = []
    entry = parents[fp]
    while entry is not None:
        parent, action = entry
        actions.append(action)
        entry = parents[parent]
    actions.reverse()
    return actions


def _diff(before: dict[str, str], after: dict[str, str]) -> dict[str, tuple[str, str]]:
    return {
        name: (before.get(name, "-"), after.get(name, "-"))
        for name in dict.fromkeys([*before, *after])
        if before.get(name, "-") != after.get(name, "-")
    }


def rebuild_trace(
    model: Any, actions: Sequence[Any], extra: tuple[Any, str | None] | None = None
) -> tuple[CounterexampleStep, ...]:
    """Replay ``actions`` from ``model.initial()`` and record the variables each one changed.

    ``extra`` is a last step that is not a plain action: ``(action, None)`` for an action whose
    ``step`` raised, ``(None, label)`` for a drain check run from the last state.
    """
    describe = model.describe if isinstance(model, Describes) else None
    state = model.initial()
    before = describe(state) if describe is not None else {}
    steps: list[CounterexampleStep] = []
    for action in actions:
        state = model.step(state, action)
        after = describe(state) if describe is not None else {}
        steps.append(CounterexampleStep(_action_name(model, action), _diff(before, after)))
        before = after
    if extra is not None:
        action, label = extra
        if action is not None:
            error = None
            try:
                after = describe(model.step(state, action)) if describe is not None else {}
            except Exception as exc:  # reproduces the crash the search saw
                error = f"{type(exc).__name__}: {exc}"
                after = before
            steps.append(CounterexampleStep(_action_name(model, action), _diff(before, after), error))
        else:
            steps.append(CounterexampleStep(label or DRAIN_ACTION))
    return tuple(steps)


def format_counterexample(violation: Counterexample) -> str:
    """A numbered list of actions, each followed by the variables it changed (before -> after)."""
    lines = [f"Invariant {violation.invariant} violated: {violation.message}"]
    lines.append(f"Shortest counterexample ({len(violation.trace)} step{'s' if len(violation.trace) != 1 else ''}):")
    if not violation.trace:
        lines.append("  (the initial state)")
    width = len(str(len(violation.trace)))
    for number, step in enumerate(violation.trace, 1):
        lines.append(f"  {number:>{width}}. {step.action}")
        pad = " " * (width + 4)
        for name, (old, new) in step.changed.items():
            lines.append(f"{pad}{name}: {old} -> {new}")
        if step.error is not None:
            lines.append(f"{pad}raised {step.error}")
    return "\n".join(lines)


def format_result(result: ExploreResult) -> str:
    """A one-paragraph summary followed by every counterexample."""
    verdict = "no violation" if result.ok else f"{len(result.violations)} violation(s)"
    coverage = "complete" if result.complete else "INCOMPLETE (a bound was hit)"
    lines = [
        f"{result.states} distinct states, {result.transitions} transitions, depth {result.depth}, "
        f"{result.seconds:.2f} s ({result.states_per_s:.0f} states/s), search {coverage}: {verdict}"
    ]
    for violation in result.violations:
        lines += ["", format_counterexample(violation)]
    return "\n".join(lines)
