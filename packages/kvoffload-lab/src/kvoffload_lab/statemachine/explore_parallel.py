"""The breadth-first explorer of :mod:`kvoffload_lab.statemachine.explore` on several cores.

Level-synchronous: a coordinator (this process) owns the set of known fingerprints and the parent
of every state; ``workers`` forked processes own disjoint parts of the frontier. Each level, every
worker expands its states (step, fingerprint, drain checks) and sends the coordinator only the
fingerprints of the successors it does not know yet, with their parent and action; the coordinator
accepts the ones no worker found before (in a fixed order: worker 0's first), and each worker keeps
the successor states of its accepted fingerprints as its next frontier and checks their
invariants. States never cross processes (unpickling the real scheduler costs ~100x a copy): the
frontier is split once, when a sequential warm-up has made it large enough, and children stay with
the worker that made them.

The coordinator accepts successors in the order the sequential search generates them (the
parent's position in the level, then the action), so of several states with one fingerprint it
keeps the same one as the sequential search, and visits the same states with the same counts and
depth (this matters: the model's fingerprint deliberately forgets some orders, e.g. of finished
requests, so states it merges need not have identical futures). The first violation is found at
the same (shortest) depth, possibly on another state of that depth; its trace is rebuilt here by
replay, as in the sequential search. The coordinator and the workers run without automatic garbage
collection and collect once per level, as the sequential search does. Needs the ``fork`` start method
(Linux, macOS); no partial-order reduction (sleep sets would have to follow states across
processes).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
import time
from collections.abc import Callable, Hashable, Sequence
from multiprocessing.connection import Connection
from typing import Any

from kvoffload_lab.statemachine.explore import (
    DRAIN_ACTION,
    DrainMode,
    Drains,
    ExplorableModel,
    ExploreResult,
    HasFinalStates,
    _exception_violation,
    collection_per_level,
    expander,
    finished_result,
    interrupted_result,
    record_violation,
)

# The sequential warm-up runs until the frontier holds this many states per worker.
WARM_UP_STATES_PER_WORKER = 64

# A violation found by a worker: (fingerprint of the state, extra step for the trace, name, message).
_Found = tuple[Hashable, tuple[Any, str | None] | None, str, str]


def _worker(model: Any, frontier: list[tuple[Any, Hashable, int]], conn: Connection, drain: DrainMode) -> None:
    """Expand this worker's part of each level, as told by the coordinator (see the module docstring)."""
    # Ctrl-C reaches the whole process group: only the coordinator handles it, and it stops us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with collection_per_level() as level_done:
        _work(model, frontier, conn, drain, level_done)


def _work(
    model: Any,
    frontier: list[tuple[Any, Hashable, int]],
    conn: Connection,
    drain: DrainMode,
    level_done: Callable[[], None],
) -> None:
    drainer = model.drain if drain != "none" and isinstance(model, Drains) else None
    is_final = model.is_final if isinstance(model, HasFinalStates) else None
    expand = expander(model)
    known: set[Hashable] = set()
    while True:
        command = conn.recv()
        if command is None:
            return
        known.update(command)  # every state accepted so far, by any worker
        found: list[_Found] = []
        candidates: list[tuple[int, int, Hashable, Hashable, Any]] = []
        states: dict[Hashable, Any] = {}
        transitions = 0
        for state, fp, position in frontier:
            actions = list(model.actions(state))
            final = not actions or bool(is_final is not None and is_final(state))
            if drainer is not None and drain == "final" and final:
                found += [(fp, (None, DRAIN_ACTION), name, msg) for name, msg in drainer(state)]
            for index, (action, successor, error) in enumerate(expand(state, actions)):
                transitions += 1
                if error is not None:  # a crash of the system under test is a finding
                    name, msg = _exception_violation(error)
                    found.append((fp, (action, None), name, msg))
                    continue
                child = model.fingerprint(successor)
                if child in known or child in states:
                    continue
                states[child] = successor
                candidates.append((position, index, child, fp, action))
        frontier = []
        conn.send((transitions, candidates, found))
        accepted = conn.recv()
        if accepted is None:  # the coordinator stopped mid-level (Ctrl-C, a violation elsewhere)
            return
        found = []
        for child, position in accepted:
            successor = states[child]
            found += [(child, None, name, msg) for name, msg in model.invariants(successor)]
            if drainer is not None and drain == "all":
                found += [(child, (None, DRAIN_ACTION), name, msg) for name, msg in drainer(successor)]
            frontier.append((successor, child, position))
        conn.send(found)
        level_done()


def explore_parallel(
    model: ExplorableModel,
    workers: int,
    *,
    max_states: int | None = None,
    stop_at_first: bool = True,
    drain: DrainMode = "final",
) -> ExploreResult:
    """:func:`~kvoffload_lab.statemachine.explore.explore` (full search, no reduction, no depth bound)
    on ``workers`` processes; see the module docstring. A KeyboardInterrupt stops the search and
    returns the figures so far, marked ``interrupted``."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    started = time.perf_counter()
    result = ExploreResult()
    parents: dict[Hashable, tuple[Hashable, Any] | None] = {}
    report = _Reporter(model, result, parents, stop_at_first)
    try:
        with collection_per_level() as level_done:
            search = _Coordinator(model, workers, parents, result, drain, max_states, report, level_done)
            frontier = search.warm_up()
            if frontier:
                search.run(frontier)
    except KeyboardInterrupt:
        return interrupted_result(result, len(parents), started)
    return finished_result(result, len(parents), started)


class _Reporter:
    """Records the violations found, once per invariant; with ``stop_at_first``, only those of the
    first violating state, which are the whole report, as in the sequential search (which reports
    every invariant that state breaks)."""

    def __init__(
        self,
        model: ExplorableModel,
        result: ExploreResult,
        parents: dict[Hashable, tuple[Hashable, Any] | None],
        stop_at_first: bool,
    ) -> None:
        self.model = model
        self.result = result
        self.parents = parents
        self.stop_at_first = stop_at_first
        self.seen_violations: set[str] = set()
        self.first_state: list[Hashable] = []

    def __call__(self, found: Sequence[_Found]) -> bool:
        """Record ``found``; True when the search must stop."""
        for violation in found:
            if self.stop_at_first and self.first_state and violation[0] != self.first_state[0]:
                break
            self.first_state[:] = self.first_state or [violation[0]]
            record_violation(self.model, self.result, self.parents, self.seen_violations, violation)
        return bool(found) and self.stop_at_first


class _Coordinator:
    """The search in this process: a sequential warm-up, then each level across the workers."""

    def __init__(
        self,
        model: ExplorableModel,
        workers: int,
        parents: dict[Hashable, tuple[Hashable, Any] | None],
        result: ExploreResult,
        drain: DrainMode,
        max_states: int | None,
        report: _Reporter,
        level_done: Callable[[], None],
    ) -> None:
        self.model = model
        self.workers = workers
        self.parents = parents
        self.result = result
        self.drain = drain
        self.max_states = max_states
        self.report = report
        self.level_done = level_done

    def warm_up(self) -> list[tuple[Any, Hashable]]:
        """The initial state and the first levels, in this process, until the frontier is worth
        splitting; the frontier then, or nothing when the search is over (a violation, no state left)."""
        model, drain = self.model, self.drain
        initial = model.initial()
        fp0 = model.fingerprint(initial)
        self.parents[fp0] = None
        drainer = model.drain if drain != "none" and isinstance(model, Drains) else None
        first: list[_Found] = [(fp0, None, n, m) for n, m in model.invariants(initial)]
        if drainer is not None and drain == "all":
            first += [(fp0, (None, DRAIN_ACTION), n, m) for n, m in drainer(initial)]
        if self.report(first):
            return []
        frontier: list[tuple[Any, Hashable]] = [(initial, fp0)]
        while frontier and len(frontier) < WARM_UP_STATES_PER_WORKER * self.workers:
            frontier, stop = _expand_here(model, frontier, self.parents, self.result, drain, self.max_states,
                                          self.report)
            self.level_done()
            if stop:
                return []
        return frontier

    def run(self, frontier: list[tuple[Any, Hashable]]) -> None:
        """The levels after the warm-up: ``frontier`` split across the workers, one level at a
        time, until no new state is found or a violation stops the search."""
        pipes, processes = self._start_workers(frontier)
        try:
            new: list[Hashable] = list(self.parents)
            while new:
                new, stop = self._level(new, pipes, processes)
                self.level_done()
                if stop:
                    break
        finally:
            _stop_workers(pipes, processes)

    def _start_workers(self, frontier: list[tuple[Any, Hashable]]) -> tuple[list[Connection], list[Any]]:
        """Fork the workers, each with its part of ``frontier``; their pipes and processes."""
        context = multiprocessing.get_context("fork")
        pipes = []
        processes = []
        for w in range(self.workers):
            parent_end, child_end = context.Pipe()
            # Each state carries its position in the level's sequential (BFS) order.
            part = [(state, fp, position) for position, (state, fp) in enumerate(frontier)][w::self.workers]
            process = context.Process(target=_worker, args=(self.model, part, child_end, self.drain), daemon=True)
            process.start()
            child_end.close()
            pipes.append(parent_end)
            processes.append(process)
        return pipes, processes

    def _level(
        self, new: list[Hashable], pipes: list[Connection], processes: list[Any]
    ) -> tuple[list[Hashable], bool]:
        """One level across the workers: the fingerprints it found new, and whether to stop."""
        for conn in pipes:
            conn.send(new)
        replies = [_receive(conn, process) for conn, process in zip(pipes, processes, strict=True)]
        stop = False
        # Candidates in the order the sequential search generates them (parent's position in
        # the level, then action): it keeps the first state of each fingerprint, so this one
        # keeps the same states, whatever worker found them.
        ordered = []
        for worker, (transitions, candidates, found) in enumerate(replies):
            self.result.transitions += transitions
            stop = self.report(found) or stop
            ordered += [(position, index, worker, child, parent, action)
                        for position, index, child, parent, action in candidates]
        ordered.sort(key=lambda c: (c[0], c[1]))
        accepted: list[list[tuple[Hashable, int]]] = [[] for _ in pipes]
        new = []
        for _, _, worker, child, parent, action in ordered:
            if child in self.parents:
                continue
            if self.max_states is not None and len(self.parents) >= self.max_states:
                self.result.complete = False
                continue
            self.parents[child] = (parent, action)
            accepted[worker].append((child, len(new)))
            new.append(child)
        for conn, mine in zip(pipes, accepted, strict=True):
            conn.send(mine)
        for conn, process in zip(pipes, processes, strict=True):
            stop = self.report(_receive(conn, process)) or stop
        if new:
            self.result.depth += 1
        return new, stop


def _stop_workers(pipes: list[Connection], processes: list[Any]) -> None:
    """Tell every worker to stop (one that died needs nothing) and wait for it, or kill it."""
    for conn in pipes:
        with contextlib.suppress(BrokenPipeError, OSError):
            conn.send(None)
    for process in processes:
        process.join(timeout=5)
        if process.is_alive():
            process.kill()


def _receive(conn: Connection, process: Any) -> Any:
    try:
        return conn.recv()
    except EOFError:
        process.join(timeout=5)
        raise RuntimeError(
            f"explorer worker {process.name} died (exit code {process.exitcode}); its error is on stderr"
        ) from None


def _expand_here(
    model: Any,
    frontier: list[tuple[Any, Hashable]],
    parents: dict[Hashable, tuple[Hashable, Any] | None],
    result: ExploreResult,
    drain: DrainMode,
    max_states: int | None,
    report: _Reporter,
) -> tuple[list[tuple[Any, Hashable]], bool]:
    """One level of the warm-up, in this process; returns the next frontier and whether to stop."""
    drainer = model.drain if drain != "none" and isinstance(model, Drains) else None
    is_final = model.is_final if isinstance(model, HasFinalStates) else None
    expand = expander(model)
    found: list[_Found] = []
    nxt: list[tuple[Any, Hashable]] = []
    for state, fp in frontier:
        actions = list(model.actions(state))
        if drainer is not None and drain == "final" and (not actions or bool(is_final is not None and is_final(state))):
            found += [(fp, (None, DRAIN_ACTION), n, m) for n, m in drainer(state)]
        for action, successor, error in expand(state, actions):
            result.transitions += 1
            if error is not None:
                name, msg = _exception_violation(error)
                found.append((fp, (action, None), name, msg))
                continue
            child = model.fingerprint(successor)
            if child in parents:
                continue
            if max_states is not None and len(parents) >= max_states:
                result.complete = False
                continue
            parents[child] = (fp, action)
            found += [(child, None, n, m) for n, m in model.invariants(successor)]
            if drainer is not None and drain == "all":
                found += [(child, (None, DRAIN_ACTION), n, m) for n, m in drainer(successor)]
            nxt.append((successor, child))
    if nxt:
        result.depth += 1
    return nxt, report(found)
